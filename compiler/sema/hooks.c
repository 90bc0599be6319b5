/* hooks.c: the parallel styles' forward-pre-hooks and forward hooks,
 * reproducing torch.distributed.tensor.parallel.style (PyTorch 2.15).
 *
 * The crux is from_local: a plain tensor is *labelled* with the declared
 * layout without any communication. tpcc knows the tensor's true
 * placement, so a label that lies is reported (the relabel check); one
 * that grows a dimension is followed downstream (grown.c). */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

static tp_val *to_local(interp *I, tp_val *v)
{
    if (!v->dtensor)
        return v;
    tp_val *r = tp_val_copy(I, v);
    r->dtensor = false;
    r->redist_src = v->redist_src;
    return r;
}

/* Where the fix for a lying label belongs, when the label is a default. */
static void fix_upstream(interp *I, tp_diag *g, const tp_val *x, tp_placement want)
{
    char pl[24];
    tp_module *prod = x->producer;
    tp_pl_str(want, x->rank, pl);
    if (!prod || x->pl.kind != TP_REPLICATE || want.kind != TP_SHARD)
        return;
    if (!prod->style) {
        char *text = tp_xasprintf("PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=%s)", pl);
        tp_diag_help(g, "make '%s' hand over its output already sharded: \"%s\": %s", prod->fqn, prod->fqn, text);
        tp_fix_add_root_entry(g, I->p, prod->fqn, text);
        free(text);
    } else if (prod->style->kind == TP_STYLE_COLWISE || prod->style->kind == TP_STYLE_ROWWISE) {
        tp_diag_help(g, "let '%s' scatter its output: %s(..., output_layouts=%s)", prod->fqn, prod->style->name, pl);
        tp_fix_set_kwarg(g, prod->style->call, "output_layouts", pl);
    }
}

static void report_relabel(interp *I, const tp_val *x, tp_io_layout label, const tp_style *s, tp_span site,
                           const char *what)
{
    char truth[24], lab[24];
    tp_placement L = tp_placement_norm(label.pl, x->rank), T = tp_placement_norm(x->pl, x->rank);
    tp_pl_str(T, x->rank, truth);
    tp_pl_str(L, x->rank, lab);
    tp_span at = label.node ? label.node->span : tp_entry_span(s);
    tp_diag *g;
    if (T.kind == TP_REPLICATE && L.kind == TP_SHARD) {
        g = tp_finding(I, TP_ERROR, at, "relabel", x, NULL,
                       "%s labels %s as %s, but it is a plain tensor holding the full %s on every rank: "
                       "PyTorch assumes it is already sharded, so dimension %d (%s) grows from %lld to %lld",
                       what, x->is_position ? "the positions" : x->is_index ? "the token ids" : "its input", lab,
                       x->is_position ? "positions" : x->is_index ? "ids" : "tensor",
                       L.dim, x->dimname[L.dim], (long long)x->shape[L.dim], (long long)(x->shape[L.dim] * I->tp));
        if (g)
            tp_grown_track(I, g, x, L.dim);
    } else if (tp_placement_is_partial(T)) {
        g = tp_finding(I, TP_ERROR, at, "relabel", x, NULL,
                       "%s labels its input %s, but the plain tensor holds partial sums (%s): the reduction is skipped",
                       what, lab, truth);
    } else {
        g = tp_finding(I, TP_ERROR, at, "relabel", x, NULL,
                       "%s labels its input %s, but the plain tensor is %s on the ranks: PyTorch trusts the label "
                       "and computes with the wrong global tensor", what, lab, truth);
    }
    if (!g)
        return;
    if (x->span.file >= 0 && x->producer)
        tp_diag_note_at(g, x->span, "the tensor is produced here by '%s'", x->producer->fqn);
    else if (x->span.file >= 0)
        tp_diag_note_at(g, x->span, "%s here", x->is_position ? "the positions are computed"
                                               : x->is_index  ? "the token ids enter the model"
                                                              : "the tensor is produced");
    if (site.file >= 0)
        tp_diag_note_at(g, site, "and labelled here, when '%s' is called", tp_cur_fqn(I));
    if (label.node && !tp_placement_is_partial(T)) {
        tp_diag_help(g, "declare what the tensor really is: %s", truth);
        tp_diag_fixit(g, label.node->span, truth);
    } else if (!label.node && !s->hf && (s->kind == TP_STYLE_COLWISE || s->kind == TP_STYLE_ROWWISE) &&
               !tp_placement_is_partial(T)) {
        char dflt[24];
        tp_diag_help(g, "%s defaults to input_layouts=%s; pass input_layouts=%s", s->name,
                     tp_placement_str(label.pl, dflt, sizeof dflt), truth);
        tp_fix_set_kwarg(g, s->call, "input_layouts", truth);
    } else {
        fix_upstream(I, g, x, L);
    }
}

/* PyTorch's _prepare_input_arg / _prepare_input_fn for one tensor. */
static tp_val *prepare_arg(interp *I, tp_val *x, tp_io_layout layout, tp_io_layout desired, bool use_local,
                           const tp_style *s, tp_span site, const char *what)
{
    if (layout.none)
        return x;
    tp_placement L = tp_placement_norm(layout.pl, x->rank);
    tp_val *dt;
    if (!x->dtensor) {
        dt = tp_val_copy(I, x);
        dt->dtensor = true;
        dt->pl = L;
        dt->redist_src = -1;
        if (!tp_placement_eq(x->pl, L, x->rank)) {
            report_relabel(I, x, layout, s, site, what);
            tp_placement T = tp_placement_norm(x->pl, x->rank);
            if (T.kind == TP_REPLICATE && L.kind == TP_SHARD)
                dt->shape[L.dim] *= I->tp;              /* the inflation PyTorch computes */
            else if (T.kind == TP_SHARD && L.kind != TP_SHARD)
                dt->shape[T.dim] = tp_local_size(I, x, T.dim);
            dt->poisoned = true;
        } else if (L.kind == TP_SHARD) {
            dt->shard_cause = s;
            tp_check_shard_divisible(I, dt, s, site);
        }
    } else {
        dt = x;
        if (!tp_placement_eq(x->pl, L, x->rank) && layout.node) {
            char a[24], b[24];
            tp_diag *g = tp_finding(I, TP_WARNING, layout.node->span, "ignored-layout", x, NULL,
                                    "%s declares %s, but its input is already a DTensor that is %s; PyTorch keeps %s",
                                    what, tp_pl_str(L, x->rank, a), tp_pl_str(x->pl, x->rank, b), b);
            if (g) {
                tp_diag_help(g, "declare %s", b);
                tp_diag_fixit(g, layout.node->span, b);
            }
        }
    }
    /* PyTorch compares the declared layout with the desired one, not the
     * tensor's real placement */
    if (!desired.none && !tp_placement_eq(layout.pl, desired.pl, x->rank))
        dt = tp_redistribute(I, dt, desired.pl, s, site, false);
    return use_local ? to_local(I, dt) : dt;
}

/* transformers 4.56's local_colwise / local_rowwise (use_dtensor=False):
 * plain local weight shards and no hook, so the module multiplies what
 * arrives. That is right only for a plain tensor already laid out as the
 * weight expects: whole for colwise, the feature shard for rowwise. */
static void local_linear_input(interp *I, tp_module *mod, iv *args, tp_span site)
{
    const tp_style *s = mod->style;
    tp_val *x = args[0].t;
    int last = x->rank - 1;
    tp_placement want = s->kind == TP_STYLE_COLWISE ? tp_replicate() : tp_shard(last);
    char have[24], need[24];
    tp_pl_str(x->pl, x->rank, have);
    tp_pl_str(want, x->rank, need);
    tp_diag *g = NULL;
    if (x->dtensor)
        g = tp_finding(I, TP_ERROR, tp_entry_span(s), "mixed-tensor", x, NULL,
                       "\"%s\" on '%s' installs no hook and keeps plain local weights, but its input is a DTensor "
                       "(%s): PyTorch raises 'got mixed torch.Tensor and DTensor'", s->name, mod->fqn, have);
    else if (!tp_placement_eq(x->pl, want, x->rank))
        g = tp_finding(I, TP_ERROR, tp_entry_span(s), "layout-mismatch", x, NULL,
                       "\"%s\" on '%s' installs no hook: it multiplies its plain input as it arrives, which is %s, "
                       "and its weight shard needs %s", s->name, mod->fqn, have, need);
    else if (s->kind == TP_STYLE_ROWWISE && tp_module_param(mod, "bias") && I->tp > 1)
        g = tp_finding(I, TP_ERROR, tp_entry_span(s), "partial-nonlinear", x, NULL,
                       "\"%s\" on '%s' adds its whole bias on every rank to partial sums: reduced, the bias counts "
                       "%lld times", s->name, mod->fqn, (long long)I->tp);
    else
        return;
    if (g && site.file >= 0)
        tp_diag_note_at(g, site, "'%s' is called here", mod->fqn);
    if (g)
        tp_diag_help(g, "use transformers 5.23's \"%s\", whose hooks lay the input out and reduce the output",
                     s->kind == TP_STYLE_COLWISE ? "colwise" : "rowwise");
    tp_val *v = tp_val_copy(I, x);
    v->dtensor = false;
    v->pl = want;
    v->poisoned = true;
    args[0].t = v;
}

static void prepare_colrow(interp *I, tp_module *mod, iv *args, int nargs, tp_span site)
{
    const tp_style *s = mod->style;
    if (s->hf && s->hf->no_hooks) {
        if (nargs >= 1 && args[0].kind == IV_TENSOR)
            local_linear_input(I, mod, args, site);
        return;
    }
    if (nargs < 1 || args[0].kind != IV_TENSOR) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(s), "arity", NULL, NULL,
                                "%s reads the module's first positional input, but '%s' is called without one",
                                s->name, mod->fqn);
        if (g && site.file >= 0)
            tp_diag_note_at(g, site, "called here");
        return;
    }
    tp_io_layout desired = {false, tp_replicate(), NULL};
    if (s->kind == TP_STYLE_ROWWISE && mod->kind == TP_MOD_LINEAR)
        desired.pl = tp_shard(-1);
    char *what = s->hf ? tp_xasprintf("\"%s\" on '%s'", s->name, mod->fqn) : tp_xasprintf("%s on '%s'", s->name, mod->fqn);
    args[0].t = prepare_arg(I, args[0].t, s->input, desired, false, s, site, what);
    free(what);
}

static void prepare_sequence(interp *I, tp_module *mod, iv *args, int nargs, tp_span site)
{
    const tp_style *s = mod->style;
    if (nargs < 1 || args[0].kind != IV_TENSOR)
        return;
    tp_val *x = args[0].t;
    tp_io_layout seq = {false, tp_shard(s->sequence_dim), NULL};
    if (s->sequence_dim >= x->rank || s->sequence_dim < -x->rank) {
        tp_finding(I, TP_ERROR, tp_entry_span(s), "plan", x, NULL, "sequence_dim=%d is out of range for a %d-d input",
                   s->sequence_dim, x->rank);
        return;
    }
    char *what = tp_xasprintf("%s on '%s'", s->hf ? "\"sequence_parallel\"" : "SequenceParallel", mod->fqn);
    if (x->dtensor)       /* PyTorch >= 2.5: a DTensor is redistributed to Shard(sequence_dim) */
        args[0].t = tp_redistribute(I, x, seq.pl, s, site, false);
    else
        args[0].t = prepare_arg(I, x, seq, (tp_io_layout){.none = true}, false, s, site, what);
    free(what);
}

/* input_layouts=(A,), desired_input_layouts=(B,) for a module called by
 * keyword becomes input_kwarg_layouts={"name": A}, desired_...={"name": B},
 * the i-th positional layout going to the i-th keyword of the call. */
static void rewrite_as_kwargs(tp_diag *g, const tp_style *s, const char *arg, const char *kwarg,
                              const tp_io_layout *layouts, int n, char **kwnames)
{
    const tp_node *a = tp_call_kw_arg(s->call, arg);
    if (!a)
        return;
    tp_buf b;
    tp_buf_init(&b);
    tp_buf_appendf(&b, "%s={", kwarg);
    for (int i = 0, k = 0; i < n; i++) {
        char pl[24];
        if (layouts[i].none)
            continue;
        tp_buf_appendf(&b, "%s\"%s\": %s", k++ ? ", " : "", kwnames[i],
                       tp_placement_str(layouts[i].pl, pl, sizeof pl));
    }
    tp_buf_append(&b, "}");
    tp_diag_fixit(g, a->span, b.data);
    tp_buf_free(&b);
}

static void fix_positional_to_keyword(tp_diag *g, const tp_style *s, char **kwnames)
{
    tp_diag_help(g, "the module takes '%s' by keyword: use input_kwarg_layouts={\"%s\": ...} and "
                    "desired_input_kwarg_layouts={\"%s\": ...}", kwnames[0], kwnames[0], kwnames[0]);
    rewrite_as_kwargs(g, s, "input_layouts", "input_kwarg_layouts", s->in.layout, s->in.n, kwnames);
    rewrite_as_kwargs(g, s, "desired_input_layouts", "desired_input_kwarg_layouts", s->in.desired, s->in.n, kwnames);
}

/* After an error in a module's input hook, what the module computes is
 * nonsense: mark its inputs so that nothing downstream reports again. */
static void poison_all(interp *I, iv *args, int nargs, iv *kwargs, int nkw)
{
    for (int i = 0; i < nargs + nkw; i++) {
        iv *v = i < nargs ? &args[i] : &kwargs[i - nargs];
        if (v->kind == IV_TENSOR) {
            v->t = tp_val_copy(I, v->t);
            v->t->poisoned = true;
        }
    }
}

/* How a module was called, for a message: "1 positional argument and no
 * keywords", "0 positional arguments and the keywords hidden_states". */
static char *describe_call(int nargs, char **kwnames, int nkw)
{
    tp_buf b;
    tp_buf_init(&b);
    tp_buf_appendf(&b, "%d positional argument%s and ", nargs, nargs == 1 ? "" : "s");
    if (!nkw)
        tp_buf_append(&b, "no keywords");
    for (int k = 0; k < nkw; k++)
        tp_buf_appendf(&b, "%s%s", k ? ", " : nkw == 1 ? "the keyword " : "the keywords ", kwnames[k]);
    return b.data;
}

/* The positional argument bound to forward parameter `name`, else NULL. */
static const tp_val *positional_for(const tp_module *mod, const char *name, const iv *args, int nargs)
{
    const tp_node *def = tp_module_forward(mod);
    for (int i = 0; def && i < def->nkids - 1 && i < nargs; i++)
        if (!strcmp(def->kids[i]->name, name))
            return args[i].kind == IV_TENSOR ? args[i].t : NULL;
    return NULL;
}

/* What skipping the layout costs: a DTensor that is not what the layout
 * wanted is redistributed later by DTensor's own propagation, where an op
 * needs it; anything else enters as it is. */
static void note_skipped_cost(tp_diag *g, const tp_val *x, tp_placement wanted, const char *kw)
{
    char have[24], want[24];
    tp_pl_str(x->pl, x->rank, have);
    tp_pl_str(wanted, x->rank, want);
    if (x->dtensor && !tp_placement_eq(x->pl, wanted, x->rank))
        tp_diag_note_at(g, TP_NO_SPAN, "'%s' stays a DTensor %s instead of becoming %s: DTensor's sharding "
                        "propagation inserts the collectives implicitly where an op needs another layout (the "
                        "implicit-redistribute warnings that follow)", kw, have, want);
    else
        tp_diag_note_at(g, TP_NO_SPAN, "'%s' enters as it is (a %s %s): the results are those of a plan without "
                        "this layout", kw, x->dtensor ? "DTensor" : "plain tensor", have);
}

/* PyTorch walks the keyword arguments actually passed: a layout for a
 * keyword the module is not called with is skipped, and the forward runs
 * on what it gets. */
static void warn_keyword_not_passed(interp *I, const tp_module *mod, int j, const iv *args, int nargs,
                                    char **kwnames, int nkw, tp_span site)
{
    const tp_io_spec *in = &mod->style->in;
    const tp_val *x = positional_for(mod, in->kw[j], args, nargs);
    char *call = describe_call(nargs, kwnames, nkw);
    char *how = x ? tp_xasprintf(" ('%s' arrives positionally)", in->kw[j]) : tp_xstrdup("");
    tp_diag *g = tp_finding(I, TP_WARNING, in->kw_layout[j].node->span, "ignored-layout", x, NULL,
                            "input_kwarg_layouts names '%s', but '%s' is called with %s%s: PyTorch only walks the "
                            "keyword arguments passed and skips this layout", in->kw[j], mod->fqn, call, how);
    free(call);
    free(how);
    if (!g)
        return;
    if (site.file >= 0)
        tp_diag_note_at(g, site, "called here");
    if (x)
        note_skipped_cost(g, x, in->kw_desired[j].none ? in->kw_layout[j].pl : in->kw_desired[j].pl, in->kw[j]);
    tp_diag_help(g, "use input_layouts=(...,) and desired_input_layouts=(...,) for positional inputs");
}

static void prepare_module_input(interp *I, tp_module *mod, iv *args, int nargs, char **kwnames, iv *kwargs,
                                 int nkw, tp_span site)
{
    const tp_style *s = mod->style;
    const tp_io_spec *in = &s->in;
    if (in->n >= 0 && in->n != nargs) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(s), "arity", NULL, NULL,
                                "module inputs and input_layouts should have same length! '%s' is called with %d "
                                "positional argument%s%s, input_layouts has %d",
                                mod->fqn, nargs, nargs == 1 ? "" : "s",
                                nkw ? " and by keyword" : "", in->n);
        if (g && site.file >= 0)
            tp_diag_note_at(g, site, "called here");
        poison_all(I, args, nargs, kwargs, nkw);
        if (g && nkw && nargs == 0 && in->n <= nkw)
            fix_positional_to_keyword(g, s, kwnames);
        else if (g)
            tp_diag_help(g, "give one layout per positional input, with None for the ones to leave alone");
    } else {
        for (int i = 0; i < nargs && in->n > 0; i++) {
            if (args[i].kind != IV_TENSOR) continue;
            char *what = tp_xasprintf("PrepareModuleInput on '%s' (input %d)", mod->fqn, i);
            args[i].t = prepare_arg(I, args[i].t, in->layout[i], in->desired[i], in->use_local, s, site, what);
            free(what);
        }
    }
    for (int j = 0; j < in->nkw; j++) {
        int k = 0;
        while (k < nkw && strcmp(kwnames[k], in->kw[j]))
            k++;
        if (k == nkw) {
            warn_keyword_not_passed(I, mod, j, args, nargs, kwnames, nkw, site);
            continue;
        }
        if (kwargs[k].kind != IV_TENSOR)
            continue;
        char *what = tp_xasprintf("PrepareModuleInput on '%s' (%s=)", mod->fqn, in->kw[j]);
        kwargs[k].t = prepare_arg(I, kwargs[k].t, in->kw_layout[j], in->kw_desired[j], in->use_local, s, site, what);
        free(what);
    }
}

/* transformers 4.56's IsolatedParallel and GatherParallel: a DTensor
 * first input becomes its local tensor, and the hook returns that one
 * tensor in place of the arguments (IsolatedParallel always). */
static void local_input(interp *I, tp_module *mod, iv *args, int nargs, tp_span site)
{
    const tp_style *s = mod->style;
    if (nargs < 1 || args[0].kind != IV_TENSOR)
        return;
    bool dtensor = args[0].t->dtensor;
    if (nargs > 1 && (dtensor || s->hf->first_input_only)) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(s), "arity", NULL, NULL,
                                "\"%s\" returns only the first positional input from its pre-hook, so '%s', called "
                                "with %d, loses the others: Python raises TypeError", s->name, mod->fqn, nargs);
        if (g && site.file >= 0)
            tp_diag_note_at(g, site, "called here");
    }
    args[0].t = to_local(I, args[0].t);
}

void tp_hook_inputs(interp *I, tp_module *mod, iv *args, int nargs, char **kwnames, iv *kwargs, int nkw,
                    tp_span site)
{
    const tp_style *s = mod->style;
    if (!s)
        return;
    switch (s->kind) {
    case TP_STYLE_COLWISE:
    case TP_STYLE_ROWWISE: prepare_colrow(I, mod, args, nargs, site); break;
    case TP_STYLE_SEQUENCE: prepare_sequence(I, mod, args, nargs, site); break;
    case TP_STYLE_PREPARE_INPUT:
    case TP_STYLE_PREPARE_INPUT_OUTPUT: prepare_module_input(I, mod, args, nargs, kwnames, kwargs, nkw, site); break;
    case TP_STYLE_PREPARE_OUTPUT: break;
    case TP_STYLE_IDENTITY:
        if (s->hf->local_input)
            local_input(I, mod, args, nargs, site);
        break;
    }
}

static tp_val *prepare_output(interp *I, tp_module *mod, tp_val *v, tp_span site)
{
    const tp_style *s = mod->style;
    char *what = s->hf ? tp_xasprintf("\"%s\" on '%s' (its output)", s->name, mod->fqn)
                       : tp_xasprintf("PrepareModuleOutput on '%s'", mod->fqn);
    v = prepare_arg(I, v, s->out.layout[0], s->out.desired[0], s->out.use_local, s, site, what);
    free(what);
    return v;
}

iv tp_hook_output(interp *I, tp_module *mod, iv out, tp_span site)
{
    const tp_style *s = mod->style;
    if (!s || out.kind != IV_TENSOR)
        return out;
    tp_val *v = out.t;
    switch (s->kind) {
    case TP_STYLE_COLWISE:
    case TP_STYLE_ROWWISE:
        if (s->hf && s->hf->no_hooks)
            break;
        /* _prepare_output_fn compares the output's real placement */
        if (v->dtensor && !tp_placement_eq(v->pl, s->output.pl, v->rank))
            v = tp_redistribute(I, v, s->output.pl, s, site, false);
        if (tp_bias_after_reduce(mod))
            tp_record_bias_add(I, mod, v);
        if (s->use_local_output)
            v = to_local(I, v);
        break;
    case TP_STYLE_SEQUENCE:
        if (s->use_local_output)
            v = to_local(I, v);
        break;
    case TP_STYLE_IDENTITY:
        /* "all_reduce" and "gather" label a plain output Partial and reduce it */
        if (s->out.n == 1)
            v = prepare_output(I, mod, v, site);
        break;
    case TP_STYLE_PREPARE_OUTPUT:
    case TP_STYLE_PREPARE_INPUT_OUTPUT:
        if (s->out.n != 1) {
            tp_finding(I, TP_ERROR, tp_entry_span(s), "arity", NULL, NULL,
                       "module outputs and output_layouts should have same length! '%s' returns 1 output, "
                       "output_layouts has %d", mod->fqn, s->out.n);
            break;
        }
        v = prepare_output(I, mod, v, site);
        break;
    case TP_STYLE_PREPARE_INPUT:
        break;
    }
    out.t = v;
    return out;
}
