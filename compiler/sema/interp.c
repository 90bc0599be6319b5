/* interp.c: the symbolic forward pass (see check.h).
 *
 * Walks the root module's forward body statement by statement. A module
 * call runs the style's input hook, the module's own forward (or the leaf
 * op), then the output hook, exactly in PyTorch's order, so labels and
 * redistributions happen where they happen at run time. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

/* ---- values ------------------------------------------------------------ */

tp_val *tp_val_new(interp *I, int rank, const int64_t *shape, const char *const *names)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (__builtin_mul_overflow(n, shape[i], &n) && !I->stop) {
            /* sizes come from the configuration: a tensor this large is a typo */
            tp_diag_add(I->d, TP_ERROR, TP_NO_SPAN, "config",
                        "a tensor in '%s' would have more than 2^63 elements; check the sizes", tp_cur_fqn(I));
            I->stop = true;
        }
    tp_val *v = tp_xcalloc(1, sizeof *v);
    v->id = I->next_id++;
    v->rank = rank;
    for (int i = 0; i < rank; i++) {
        v->shape[i] = shape[i];
        v->dimname[i] = names ? names[i] : "";
    }
    v->pl = tp_replicate();
    v->redist_src = -1;
    v->gather_comm = -1;
    v->gv = -1;
    v->heads_diag = -1;
    v->span = TP_NO_SPAN;
    I->vals = tp_xgrow(I->vals, I->nvals, &I->capvals, sizeof *I->vals, 1024);
    I->vals[I->nvals++] = v;
    return v;
}

const char *tp_intern(interp *I, const char *s)
{
    for (int i = 0; i < I->nstrings; i++)
        if (!strcmp(I->strings[i], s))
            return I->strings[i];
    I->strings = tp_xrealloc(I->strings, (size_t)(I->nstrings + 1) * sizeof *I->strings);
    return I->strings[I->nstrings++] = tp_xstrdup(s);
}

tp_val *tp_val_copy(interp *I, const tp_val *v)
{
    tp_val *c = tp_val_new(I, v->rank, v->shape, v->dimname);
    int id = c->id;
    *c = *v;
    c->id = id;
    c->redist_src = -1;
    return c;
}

const char *tp_pl_str(tp_placement p, int rank, char *buf)
{
    return tp_placement_str(tp_placement_norm(p, rank), buf, 24);
}

char *tp_val_describe(const tp_val *v)
{
    char pl[24], shape[160] = "";
    size_t n = 0;
    for (int i = 0; i < v->rank && n < sizeof shape - 24; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? ", " : "", (long long)v->shape[i]);
    /* a fused projection's packed output: each segment sharded on its own */
    return tp_xasprintf("%s%s %s [%s]", tp_pl_str(v->pl, v->rank, pl), v->nsegments ? " packed" : "",
                        v->dtensor ? "DTensor" : "plain", shape);
}

int64_t tp_local_size(const interp *I, const tp_val *v, int d)
{
    tp_placement p = tp_placement_norm(v->pl, v->rank);
    if (p.kind == TP_SHARD && p.dim == d)
        return (v->shape[d] + I->tp - 1) / I->tp;
    return v->shape[d];
}

/* ---- diagnostics --------------------------------------------------------- */

tp_diag *tp_finding(interp *I, tp_diag_level lvl, tp_span span, const char *check,
                    const tp_val *a, const tp_val *b, const char *fmt, ...)
{
    if ((a && a->poisoned) || (b && b->poisoned))
        return NULL;
    for (int i = 0; i < I->nseen; i++) {
        seen_diag *s = &I->seen[i];
        if (!strcmp(s->check, check) && s->file == span.file && s->offset == span.offset) {
            if (!s->repeats++)
                s->first_fqn = tp_xstrdup(tp_cur_fqn(I));
            free(s->last_fqn);
            s->last_fqn = tp_xstrdup(tp_cur_fqn(I));
            return NULL;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    char *msg = tp_xvasprintf(fmt, ap);
    va_end(ap);
    tp_diag *g = tp_diag_add(I->d, lvl, span, check, "%s", msg);
    free(msg);
    I->seen = tp_xgrow(I->seen, I->nseen, &I->capseen, sizeof *I->seen, 32);
    I->seen[I->nseen++] = (seen_diag){check, span.file, span.offset, I->d->count - 1, 0, NULL, NULL};
    return g;
}

void tp_findings_finish(interp *I)
{
    tp_grown_finish(I);
    for (int i = 0; i < I->nseen; i++) {
        seen_diag *s = &I->seen[i];
        if (s->repeats)
            tp_diag_note_at(&I->d->items[s->index], TP_NO_SPAN,
                            s->repeats == 1 ? "the same happens in %d more module (%s)"
                                            : "the same happens in %d more modules (%s ... %s)",
                            s->repeats, s->first_fqn, s->last_fqn);
        free(s->first_fqn);
        free(s->last_fqn);
    }
    free(I->seen);
    I->seen = NULL;
    I->nseen = 0;
}

/* ---- layout changes -------------------------------------------------------- */

int tp_record_comm(interp *I, tp_redist_record c)
{
    tp_analysis *a = I->a;
    a->comms = tp_xgrow(a->comms, a->ncomms, &a->capcomms, sizeof *a->comms, 256);
    a->comms[a->ncomms] = c;
    return a->ncomms++;
}

static int64_t elems(const tp_val *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        n *= v->shape[i];
    return n;
}

void tp_check_shard_divisible(interp *I, tp_val *v, const tp_style *cause, tp_span span)
{
    tp_placement p = tp_placement_norm(v->pl, v->rank);
    if (p.kind != TP_SHARD || p.dim >= v->rank || v->shape[p.dim] % I->tp == 0)
        return;
    int64_t n = v->shape[p.dim], padded = (n + I->tp - 1) / I->tp * I->tp;
    tp_diag *g = tp_finding(I, TP_ERROR, cause ? tp_entry_span(cause) : span, "divisibility", v, NULL,
                            "dimension %d (%s = %lld) does not split evenly over %lld ranks",
                            p.dim, v->dimname[p.dim], (long long)n, (long long)I->tp);
    if (!g)
        return;
    if (span.file >= 0)
        tp_diag_note_at(g, span, "the tensor is sharded here");
    if (v->dimname[p.dim][0] && tp_config_has(I->c, v->dimname[p.dim]))
        tp_diag_help(g, "pad %s to %lld (-D %s=%lld), or use a tp that divides %lld",
                     v->dimname[p.dim], (long long)padded, v->dimname[p.dim], (long long)padded, (long long)n);
    else
        tp_diag_help(g, "pad this dimension to %lld, or use a tp that divides %lld", (long long)padded, (long long)n);
    v->poisoned = true;
}

/* Returns true when it fired: the more general gather-then-slice smell is
 * then the same finding. */
static bool smell_undone(interp *I, const tp_val *v, tp_placement to, const tp_style *cause, tp_span span)
{
    if (v->redist_src < 0 || !tp_placement_eq(v->redist_from, to, v->rank))
        return false;
    char a[24], b[24];
    tp_diag *g = tp_finding(I, TP_WARNING, cause ? tp_entry_span(cause) : span, "redundant-redistribute", v, NULL,
                            "this redistribution %s -> %s undoes the one just before it",
                            tp_pl_str(v->pl, v->rank, a), tp_pl_str(to, v->rank, b));
    if (g && v->redist_cause && v->redist_cause != cause)
        tp_diag_note_at(g, tp_entry_span(v->redist_cause), "which redistributed %s -> %s",
                        tp_pl_str(to, v->rank, a), tp_pl_str(v->pl, v->rank, b));
    if (g)
        tp_diag_help(g, "keep the tensor %s: drop both redistributions", tp_pl_str(to, v->rank, a));
    return true;
}

/* Chains collective idx (of the tensor with id value) to that tensor's
 * earlier ones. */
static void index_comm(interp *I, int value, int idx)
{
    if (value >= I->caplast) {
        int cap = I->caplast;
        while (I->caplast <= value)
            I->last_comm_of = tp_xgrow(I->last_comm_of, I->caplast, &I->caplast, sizeof *I->last_comm_of, 1024);
        for (int i = cap; i < I->caplast; i++)
            I->last_comm_of[i] = -1;
    }
    I->prev_comm_of = tp_xgrow(I->prev_comm_of, idx, &I->capprev, sizeof *I->prev_comm_of, 1024);
    I->prev_comm_of[idx] = I->last_comm_of[value];
    I->last_comm_of[value] = idx;
}

/* The first earlier collective that moved the same tensor the same way
 * as comms[self], or -1. */
static int earlier_same_move(const interp *I, const tp_redist_record *c, int self)
{
    int first = -1;
    for (int i = I->prev_comm_of[self]; i >= 0; i = I->prev_comm_of[i]) {
        const tp_redist_record *o = &I->a->comms[i];
        if (o->kind == c->kind && tp_placement_eq(o->to, c->to, c->rank))
            first = i;
    }
    return first;
}

static void smell_repeated_gather(interp *I, const tp_val *v, tp_redist_record *c, int self)
{
    int i = earlier_same_move(I, c, self);
    if (i < 0)
        return;
    tp_redist_record *o = &I->a->comms[i];
    tp_diag *g = tp_finding(I, TP_WARNING, c->cause ? tp_entry_span(c->cause) : c->span, "repeated-gather", v, NULL,
                            "the same tensor is %s again (%s already did)",
                            c->kind == TP_REDIST_ALL_GATHER ? "all-gathered" : "redistributed",
                            o->module ? o->module->fqn : "an earlier op");
    if (g && o->cause)
        tp_diag_note_at(g, tp_entry_span(o->cause), "first %s here", tp_redist_name(o->kind));
    if (g)
        tp_diag_help(g, "gather once: put PrepareModuleInput(...) on the parent module with the Shard -> Replicate "
                        "redistribution and keep these entries at their defaults");
}

static void smell_gather_then_slice(interp *I, const tp_val *v, int dim, const tp_style *cause, tp_span span)
{
    if (v->gather_comm < 0 || v->gather_dim != dim)
        return;
    tp_redist_record *g0 = &I->a->comms[v->gather_comm];
    tp_diag *g = tp_finding(I, TP_WARNING, cause ? tp_entry_span(cause) : span, "gather-then-slice", v, NULL,
                            "'%s' slices dimension %d again after '%s' all-gathered it: the ops in between act on "
                            "each slice independently, so the gather and the replicated compute are wasted",
                            tp_cur_fqn(I), dim, g0->module ? g0->module->fqn : "an earlier op");
    if (g && g0->cause && g0->cause != cause)
        tp_diag_note_at(g, tp_entry_span(g0->cause), "gathered here");
    if (g) {
        /* what keeping it sharded saves: the gather's ring traffic, per rank */
        double saved = (double)g0->elems * 4 * (double)(I->tp - 1) / (double)I->tp;
        tp_diag_help(g, "keep the tensor sharded: use the defaults (ColwiseParallel() output Shard(-1), "
                        "RowwiseParallel() input Shard(-1)); this saves the all-gather (%.1f MiB sent per rank in "
                        "fp32, per module) and the replicated compute", saved / (1 << 20));
    }
}

/* The node of a layout change: the op PyTorch's redistribute_local_tensor
 * runs for it. */
static void record_reshard(interp *I, tp_redist_kind k, tp_val *v, tp_val *r, tp_placement from, tp_placement to,
                           const tp_style *cause, bool implicit)
{
    static const tp_op_kind ops[] = {
        [TP_REDIST_ALL_GATHER] = TP_OP_ALL_GATHER, [TP_REDIST_ALL_REDUCE] = TP_OP_ALL_REDUCE,
        [TP_REDIST_REDUCE_SCATTER] = TP_OP_REDUCE_SCATTER, [TP_REDIST_ALL_TO_ALL] = TP_OP_ALL_TO_ALL,
        [TP_REDIST_LOCAL_SLICE] = TP_OP_SLICE, [TP_REDIST_LOCAL_DIVIDE] = TP_OP_SCALE,
    };
    tp_gnode *n = tp_record_redist(I, ops[k], v, r, tp_redist_name(k));
    n->from = from;
    n->to = to;
    n->op.dim = from.kind == TP_SHARD ? from.dim : to.kind == TP_SHARD ? to.dim : 0;
    n->op.dim2 = to.kind == TP_SHARD ? to.dim : 0;
    n->op.parts = (int)I->tp;
    n->op.scale = k == TP_REDIST_LOCAL_DIVIDE ? 1.0 / (double)I->tp : 1.0;
    n->op.elems = elems(v);
    n->entry = cause;
    n->op.implicit = implicit;
}

tp_val *tp_redistribute(interp *I, tp_val *v, tp_placement to, const tp_style *cause, tp_span span, bool implicit)
{
    to = tp_placement_norm(to, v->rank);
    tp_redist_kind k = tp_redist_classify(v->pl, to, v->rank);
    if (k == TP_REDIST_NONE)
        return v;
    if (I->tp == 1 && k != TP_REDIST_INVALID) {
        /* one device: every placement holds the whole tensor, nothing moves */
        tp_val *r = tp_val_copy(I, v);
        r->pl = to;
        return r;
    }

    char a[24], b[24];
    if (k == TP_REDIST_INVALID) {
        tp_diag *g = tp_finding(I, TP_ERROR, cause ? tp_entry_span(cause) : span, "layout-mismatch", v, NULL,
                                "redistribute from %s to %s is not supported (PyTorch raises at the first forward)",
                                tp_pl_str(v->pl, v->rank, a), tp_pl_str(to, v->rank, b));
        if (g)
            tp_diag_help(g, "a Shard can become Replicate or another Shard, never Partial");
        tp_val *r = tp_val_copy(I, v);
        r->pl = to;
        r->poisoned = true;
        return r;
    }
    if (v->is_index) {
        /* PyTorch moves ids like any tensor; a schedule's slices and
         * collectives carry floats only (sched/ops.def) */
        tp_diag *g = tp_finding(I, TP_ERROR, cause ? tp_entry_span(cause) : span, "integer-redistribute", v, NULL,
                                "the %s of integer %s (%s -> %s) is not supported: tprun moves only float tensors "
                                "between layouts", tp_redist_name(k), v->is_position ? "positions" : "token ids",
                                tp_pl_str(v->pl, v->rank, a), tp_pl_str(to, v->rank, b));
        if (g)
            tp_diag_help(g, "keep the ids in the layout they come in (Replicate()): redistribute the embedding's "
                            "output instead, which moves the same rows as floats");
        tp_val *r = tp_val_copy(I, v);
        r->pl = to;
        r->poisoned = true;
        return r;
    }
    bool undone = smell_undone(I, v, to, cause, span);
    tp_placement from = tp_placement_norm(v->pl, v->rank);
    int dim = to.kind == TP_SHARD ? to.dim : from.kind == TP_SHARD ? from.dim : -1;
    if (k == TP_REDIST_LOCAL_SLICE && !undone)
        smell_gather_then_slice(I, v, to.dim, cause, span);
    tp_redist_record c = {k, dim, elems(v), cause, NULL, span, v->id, from, to, v->rank, implicit};
    c.module = I->cur;
    int idx = tp_record_comm(I, c);
    index_comm(I, v->id, idx);
    if (tp_redist_communicates(k))
        smell_repeated_gather(I, v, &I->a->comms[idx], idx);
    if (implicit && tp_redist_communicates(k)) {
        tp_diag *g = tp_finding(I, TP_WARNING, span, "implicit-redistribute", v, NULL,
                                "DTensor sharding propagation inserts an %s here (%s -> %s)",
                                tp_redist_name(k), tp_pl_str(from, v->rank, a), tp_pl_str(to, v->rank, b));
        if (g)
            tp_diag_help(g, "redistribute explicitly in the plan so the cost is visible");
    }
    tp_val *r = tp_val_copy(I, v);
    r->pl = to;
    r->redist_src = v->id;
    r->redist_from = from;
    r->redist_cause = cause;
    r->gv = -1;
    record_reshard(I, k, v, r, from, to, cause, implicit);
    if (to.kind == TP_SHARD)
        r->shard_cause = cause;
    if (tp_placement_is_partial(to))
        r->partial_cause = cause;
    r->gather_comm = k == TP_REDIST_ALL_GATHER ? idx : -1;
    r->gather_dim = dim;
    if (to.kind == TP_SHARD)
        tp_check_shard_divisible(I, r, cause, span);
    return r;
}

/* Rows are reserved when a module is entered, so the table reads in call
 * order (a parent before its children), and completed when it returns. */
int tp_record_boundary(interp *I, tp_module *mod, char *inputs)
{
    tp_analysis *a = I->a;
    a->rows = tp_xgrow(a->rows, a->nrows, &a->caprows, sizeof *a->rows, 256);
    a->rows[a->nrows] = (tp_boundary){tp_xstrdup(mod->fqn[0] ? mod->fqn : "(root)"), tp_xstrdup(mod->type),
                                      mod->style, inputs, NULL};
    return a->nrows++;
}

/* ---- evaluation of forward bodies --------------------------------------- */

typedef struct frame {
    tp_module *mod;
    char **names;
    iv *vals;
    int n, cap;
} frame;

static void frame_set(frame *f, const char *name, iv v)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->names = tp_xrealloc(f->names, (size_t)f->cap * sizeof *f->names);
        f->vals = tp_xrealloc(f->vals, (size_t)f->cap * sizeof *f->vals);
    }
    f->names[f->n] = tp_xstrdup(name);
    f->vals[f->n++] = v;
}

static bool frame_get(const frame *f, const char *name, iv *out)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            *out = f->vals[i];
            return true;
        }
    return false;
}

static void frame_free(frame *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->names[i]);
    free(f->names);
    free(f->vals);
}

static iv call_module(interp *I, tp_module *mod, iv *args, int nargs, char **kwnames, iv *kwargs, int nkw,
                      const tp_node *site);
static iv eval(interp *I, frame *f, const tp_node *e);

static const iv none_iv = {IV_NONE, NULL, NULL, 0, 0, NULL, {NULL}};

static iv fail(interp *I, const tp_node *e, const char *msg)
{
    tp_diag_add(I->d, TP_ERROR, e->span, "model", "%s", msg);
    I->stop = true;
    return none_iv;
}

/* A configuration value or literal as an interpreter value. */
static iv number_iv(tp_cfg_value v)
{
    if (v.s)
        return (iv){IV_STR, NULL, NULL, 0, 0, v.s, {NULL}};
    return v.is_float ? (iv){IV_FLOAT, NULL, NULL, 0, v.f, NULL, {NULL}} : (iv){IV_INT, NULL, NULL, v.i, 0, NULL, {NULL}};
}

static tp_module *member(const tp_module *mod, const char *name)
{
    for (int i = 0; i < mod->nkids; i++)
        if (!strcmp(mod->kids[i]->name, name))
            return mod->kids[i];
    return NULL;
}

/* The primitives that take a tensor first and read the rest from the call
 * itself (configuration values, placements): split, chunk, to_local. */
typedef iv (*tensor_first_op)(interp *I, const tp_node *call, tp_val *x);

static tensor_first_op tensor_first(const frame *f, const tp_node *callee)
{
    if (callee->kind != N_NAME || member(f->mod, callee->name))
        return NULL;
    if (tp_split_is(callee->name))
        return tp_split_apply;
    return tp_to_local_is(callee->name) ? tp_to_local_apply : NULL;
}

static iv eval_call(interp *I, frame *f, const tp_node *e)
{
    const tp_node *callee = e->kids[0];
    tensor_first_op op = tensor_first(f, callee);
    if (op) {
        const tp_node *x = tp_call_pos(e, 0);
        iv v = x ? eval(I, f, x) : none_iv;
        if (v.kind == IV_TENSOR)
            return op(I, e, v.t);
        char msg[64];
        snprintf(msg, sizeof msg, "%s() takes a tensor first", callee->name);
        return I->stop ? none_iv : fail(I, e, msg);
    }
    int nargs = 0, nkw = 0;
    iv args[TP_MAX_IO * 2], kwargs[TP_MAX_IO * 2];
    char *kwnames[TP_MAX_IO * 2];
    if (e->nkids - 1 > TP_MAX_IO * 2)
        return fail(I, e, "too many arguments");
    for (int k = 1; k < e->nkids && !I->stop; k++) {
        iv v = eval(I, f, e->kids[k]->kids[0]);
        if (e->kids[k]->name) {
            kwnames[nkw] = e->kids[k]->name;
            kwargs[nkw++] = v;
        } else {
            args[nargs++] = v;
        }
    }
    if (I->stop)
        return none_iv;
    if (callee->kind == N_NAME) {
        iv local;
        tp_module *sub = member(f->mod, callee->name);
        if (frame_get(f, callee->name, &local) && local.kind == IV_MODULE)
            sub = local.mod;
        if (sub)
            return call_module(I, sub, args, nargs, kwnames, kwargs, nkw, e);
        if (tp_op_is_primitive(callee->name))
            return tp_op_apply(I, e, callee->name, args, nargs, kwnames, kwargs, nkw);
    }
    char *t = tp_expr_text(callee);
    tp_diag_add(I->d, TP_ERROR, callee->span, "model",
                "'%s' is neither a member module of %s nor a primitive op", t, f->mod->type);
    free(t);
    I->stop = true;
    return none_iv;
}

/* a + b, a * b with a tensor operand: two tensors, or a tensor times a
 * number (Gemma's embedding normaliser: h * hidden ** 0.5). */
static iv tensor_operator(interp *I, const tp_node *e, iv a, iv b)
{
    if (a.kind == IV_TENSOR && b.kind == IV_TENSOR)
        return tp_op_binary(I, e, e->op, a.t, b.t);
    iv t = a.kind == IV_TENSOR ? a : b, n = a.kind == IV_TENSOR ? b : a;
    if (e->op != '*' || (n.kind != IV_INT && n.kind != IV_FLOAT))
        return fail(I, e, "a tensor operator needs two tensors, or a tensor and a number to multiply it by");
    return tp_op_scale(I, e, t.t, n.kind == IV_FLOAT ? n.f : (double)n.i);
}

static iv eval(interp *I, frame *f, const tp_node *e)
{
    if (I->stop)
        return none_iv;
    switch (e->kind) {
    case N_NAME: {
        iv v;
        if (frame_get(f, e->name, &v))
            return v;
        tp_module *sub = member(f->mod, e->name);
        if (sub)
            return (iv){IV_MODULE, NULL, sub, 0, 0, NULL, {NULL}};
        if (tp_config_has(I->c, e->name)) {
            tp_cfg_value x;
            if (!tp_config_value(I->c, e->name, e->span, &x)) { I->stop = true; return none_iv; }
            return number_iv(x);
        }
        tp_diag_add(I->d, TP_ERROR, e->span, "model", "unknown name '%s'", e->name);
        I->stop = true;
        return none_iv;
    }
    case N_INT: case N_FLOAT: case N_TRUE: case N_FALSE: case N_STR: case N_BINOP: case N_NEG:
        if (e->kind == N_BINOP) {
            iv a = eval(I, f, e->kids[0]);
            iv b = I->stop ? none_iv : eval(I, f, e->kids[1]);
            if (I->stop)
                return none_iv;
            if (a.kind == IV_TENSOR || b.kind == IV_TENSOR)
                return tensor_operator(I, e, a, b);
        }
        {
            tp_cfg_value x;
            if (!tp_eval_value(I->c, e, &x)) { I->stop = true; return none_iv; }
            return number_iv(x);
        }
    case N_NONE: return none_iv;
    case N_CALL: return eval_call(I, f, e);
    default: return fail(I, e, "unsupported expression in a forward body");
    }
}

/* Bind call arguments to forward(...) parameters, by position then keyword. */
static bool bind_params(interp *I, frame *f, const tp_node *def, iv *args, int nargs, char **kwnames,
                        iv *kwargs, int nkw, const tp_node *site)
{
    int nparams = def->nkids - 1;
    if (nargs > nparams) {
        tp_diag_add(I->d, TP_ERROR, site->span, "model", "%s.forward takes %d argument%s, %d given",
                    f->mod->type, nparams, nparams == 1 ? "" : "s", nargs);
        return false;
    }
    for (int i = 0; i < nparams; i++) {
        const tp_node *prm = def->kids[i];
        if (i < nargs) { frame_set(f, prm->name, args[i]); continue; }
        int k = 0;
        while (k < nkw && strcmp(kwnames[k], prm->name))
            k++;
        frame_set(f, prm->name, k < nkw ? kwargs[k] : none_iv);
    }
    for (int k = 0; k < nkw; k++) {
        bool known = false;
        for (int i = 0; i < nparams; i++)
            known |= !strcmp(def->kids[i]->name, kwnames[k]);
        if (!known) {
            tp_diag_add(I->d, TP_ERROR, site->span, "model", "%s.forward has no parameter '%s'",
                        f->mod->type, kwnames[k]);
            return false;
        }
    }
    return true;
}

/* a, b = split(x, ...): as many names as the tuple has tensors. */
static void unpack(interp *I, frame *f, const tp_node *s)
{
    int ntargets = s->nkids - 1;
    iv v = eval(I, f, s->kids[ntargets]);
    if (I->stop)
        return;
    if (v.kind != IV_TUPLE) {
        fail(I, s->kids[ntargets], "only the tuples split() and chunk() return can be unpacked");
        return;
    }
    if (v.i != ntargets) {
        tp_diag_add(I->d, TP_ERROR, s->span, "model", "%d names unpack %lld tensors: Python raises ValueError (%s "
                    "values to unpack)", ntargets, (long long)v.i, v.i > ntargets ? "too many" : "not enough");
        I->stop = true;
        return;
    }
    for (int k = 0; k < ntargets; k++)
        frame_set(f, s->kids[k]->name, (iv){IV_TENSOR, v.items[k], NULL, 0, 0, NULL, {NULL}});
}

static iv run_body(interp *I, frame *f, const tp_node *block)
{
    for (int i = 0; i < block->nkids && !I->stop; i++) {
        const tp_node *s = block->kids[i];
        switch (s->kind) {
        case N_ASSIGN: frame_set(f, s->name, eval(I, f, s->kids[0])); break;
        case N_RETURN: return eval(I, f, s->kids[0]);
        case N_EXPR_STMT: eval(I, f, s->kids[0]); break;
        case N_UNPACK: unpack(I, f, s); break;
        default: break;
        }
    }
    return none_iv;
}

static char *describe_ivs(iv *v, int n, char **kwnames, iv *kw, int nkw)
{
    tp_buf b;
    tp_buf_init(&b);
    for (int i = 0; i < n + nkw; i++) {
        iv x = i < n ? v[i] : kw[i - n];
        if (i)
            tp_buf_append(&b, ", ");
        if (i >= n)
            tp_buf_appendf(&b, "%s=", kwnames[i - n]);
        if (x.kind == IV_TENSOR) {
            char *d = tp_val_describe(x.t);
            tp_buf_append(&b, d);
            free(d);
        } else {
            tp_buf_append(&b, x.kind == IV_INT ? "int" : x.kind == IV_FLOAT ? "float" : x.kind == IV_STR ? "str" : "None");
        }
    }
    return tp_buf_take(&b);
}

static iv call_module(interp *I, tp_module *mod, iv *args, int nargs, char **kwnames, iv *kwargs, int nkw,
                      const tp_node *site)
{
    tp_module *outer = I->cur;
    I->cur = mod;
    if (++I->depth > 200) {
        I->cur = outer;
        return fail(I, site, "module calls nest more than 200 deep (recursive forward?)");
    }
    iv out = none_iv;
    if (mod->kind == TP_MOD_LIST) {
        /* a list has no hooks of its own: its modules' rows say it all. The
         * largest list holds the transformer layers: the report's bound is
         * per layer, on the size of what flows between them. */
        if (mod->nkids > I->a->graph.nlayers && nargs >= 1 && args[0].kind == IV_TENSOR) {
            tp_graph *g = &I->a->graph;
            g->nlayers = mod->nkids;
            g->layer_input_elems = elems(args[0].t);
            g->layer_input_rank = args[0].t->rank;
            memcpy(g->layer_input_shape, args[0].t->shape, sizeof g->layer_input_shape);
        }
        /* a ModuleList applied as `for layer in layers: h = layer(h, *rest,
         * **kw)` (torchtitan's layer(h, freqs_cis), HF's
         * position_embeddings=): the first argument is threaded from each
         * module's output to the next one's input, the others reach every
         * module unchanged, so each layer's hooks check them anew */
        if (nargs < 1) {
            I->depth--;
            I->cur = outer;
            return fail(I, site, "a repeat() list is applied to the value it threads through its modules, "
                                 "then any arguments every module takes");
        }
        out = args[0];
        for (int i = 0; i < mod->nkids && !I->stop; i++) {
            /* a module's input hook rewrites its arguments: each gets fresh copies */
            iv a[TP_MAX_IO * 2], kw[TP_MAX_IO * 2];
            memcpy(a, args, (size_t)nargs * sizeof *a);
            for (int k = 0; k < nkw; k++)
                kw[k] = kwargs[k];
            a[0] = out;
            out = call_module(I, mod->kids[i], a, nargs, kwnames, kw, nkw, site);
        }
    } else {
        int row = tp_record_boundary(I, mod, describe_ivs(args, nargs, kwnames, kwargs, nkw));
        tp_hook_inputs(I, mod, args, nargs, kwnames, kwargs, nkw, site->span);
        if (tp_module_is_leaf(mod)) {
            out = tp_leaf_forward(I, mod, args, nargs, site->span);
        } else {
            const tp_node *def = tp_module_forward(mod);
            frame f = {mod, NULL, NULL, 0, 0};
            if (!def) {
                tp_diag_add(I->d, TP_ERROR, mod->def->span, "model", "module %s has no forward()", mod->type);
                I->stop = true;
            } else if (bind_params(I, &f, def, args, nargs, kwnames, kwargs, nkw, site)) {
                out = run_body(I, &f, def->kids[def->nkids - 1]);
            } else {
                I->stop = true;
            }
            frame_free(&f);
        }
        I->cur = mod;
        if (!I->stop) {
            out = tp_hook_output(I, mod, out, site->span);
            /* the innermost module that returned the value is its producer:
             * that is where a fix-it can change what it returns */
            if (out.kind == IV_TENSOR && !out.t->producer)
                out.t->producer = mod;
            I->a->rows[row].outputs = describe_ivs(&out, 1, NULL, NULL, 0);
        }
    }
    I->depth--;
    I->cur = outer;
    return out;
}

/* The root forward's parameters are the model inputs: plain, replicated
 * tensors of token ids with the annotated shape. */
static bool make_inputs(interp *I, const tp_node *def, iv *args, int *nargs)
{
    *nargs = 0;
    for (int i = 0; i < def->nkids - 1; i++) {
        const tp_node *prm = def->kids[i];
        if (prm->nkids < 1 || prm->kids[0]->kind != N_LIST || prm->kids[0]->nkids > TP_MAX_RANK) {
            tp_diag_add(I->d, TP_ERROR, prm->span, "model",
                        "annotate the model input with its shape: %s: [batch, seq]", prm->name);
            return false;
        }
        const tp_node *l = prm->kids[0];
        int64_t shape[TP_MAX_RANK];
        const char *names[TP_MAX_RANK];
        for (int d = 0; d < l->nkids; d++) {
            if (!tp_eval_size(I->c, l->kids[d], &shape[d]))
                return false;
            names[d] = l->kids[d]->kind == N_NAME ? l->kids[d]->name : "";
        }
        tp_val *v = tp_val_new(I, l->nkids, shape, names);
        v->is_index = true;
        v->span = prm->span;
        int gv = tp_record_value(I, v, prm->name);     /* may move graph.values */
        I->a->graph.values[gv].input = true;
        args[(*nargs)++] = (iv){IV_TENSOR, v, NULL, 0, 0, NULL, {NULL}};
    }
    return true;
}

/* Where a forward body returns its result (the def when it has no return). */
static tp_span return_span(const tp_node *def)
{
    const tp_node *body = def->kids[def->nkids - 1];
    for (int i = body->nkids - 1; i >= 0; i--)
        if (body->kids[i]->kind == N_RETURN)
            return body->kids[i]->kids[0]->span;
    return def->span;
}

void tp_check(tp_model *m, tp_plan *p, tp_config *c, tp_outer_loss loss, tp_analysis *out)
{
    interp I = {0};
    I.loss = loss;
    I.m = m;
    I.p = p;
    I.c = c;
    I.d = c->diags;
    I.a = out;
    I.tp = tp_plan_tp_size(p);
    memset(out, 0, sizeof *out);
    tp_graph_init(&out->graph, I.tp);
    for (int i = 0; i < m->count; i++)
        for (int k = 0; k < m->all[i]->nparams; k++)
            m->all[i]->params[k].ir_index = -1;
    tp_check_params(&I);
    const tp_node *def = tp_module_forward(m->root);
    iv args[TP_MAX_IO];
    int nargs;
    if (!def) {
        tp_diag_add(I.d, TP_ERROR, m->root->def->span, "model", "the root module %s has no forward()", m->root->type);
    } else if (def->nkids - 1 > TP_MAX_IO) {
        tp_diag_add(I.d, TP_ERROR, def->span, "model", "too many model inputs");
    } else if (make_inputs(&I, def, args, &nargs)) {
        tp_node site = {.kind = N_CALL, .span = def->span};
        iv result = call_module(&I, m->root, args, nargs, NULL, NULL, 0, &site);
        if (!I.stop)
            tp_model_output(&I, result, nargs > 0 ? args[0].t : NULL, return_span(def));   /* the input ids */
    }
    tp_findings_finish(&I);
    for (int i = 0; i < I.nvals; i++)
        free(I.vals[i]);
    free(I.vals);
    for (int i = 0; i < I.nstrings; i++)
        free(I.strings[i]);
    free(I.strings);
    free(I.last_comm_of);
    free(I.prev_comm_of);
}

void tp_analysis_free(tp_analysis *a)
{
    for (int i = 0; i < a->nrows; i++) {
        free(a->rows[i].fqn);
        free(a->rows[i].type);
        free(a->rows[i].inputs);
        free(a->rows[i].outputs);
    }
    free(a->rows);
    free(a->comms);
    free(a->to_locals);
    tp_graph_free(&a->graph);
    memset(a, 0, sizeof *a);
}
