/* interp.c: the symbolic forward pass (see check.h): the walk.
 *
 * Walks the root module's forward body statement by statement. A module
 * call runs the style's input hook, the module's own forward (or the leaf
 * op), then the output hook, exactly in PyTorch's order, so labels and
 * redistributions happen where they happen at run time. An op call runs
 * the apply function of its row in the op table (op_table.c).
 *
 * The walk is the top of sema/'s calls: it calls the handlers (hooks.c,
 * leaf.c, op_table.c's rows, operators.c, outputs.c, params.c) and the
 * services below them (values.c, record.c, findings.c, grown.c), and no
 * file of sema/ calls it. */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/op_table.h"
#include "util/xalloc.h"

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

static iv fail(interp *I, const tp_node *e, const char *msg)
{
    tp_diag_add(I->d, TP_ERROR, e->span, "model", "%s", msg);
    I->stop = true;
    return tp_none_iv;
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

/* A tensor's method written op(x, ...) (split, chunk, to_local): x is
 * evaluated, and the rule reads the rest of the call itself. */
static iv call_method(interp *I, frame *f, const tp_node *e, const tp_op_row *op)
{
    const tp_node *x = tp_call_pos(e, 0);
    iv v = x ? eval(I, f, x) : tp_none_iv;
    if (v.kind == IV_TENSOR)
        return op->apply(I, op, &(tp_op_args){e, &v, 1, NULL, NULL, 0});
    char msg[64];
    snprintf(msg, sizeof msg, "%s() takes a tensor first", op->name);
    return I->stop ? tp_none_iv : fail(I, e, msg);
}

/* A call: of a member module (a module-valued local standing for one), or
 * else of the op its name finds in the op table. */
static iv eval_call(interp *I, frame *f, const tp_node *e)
{
    const tp_node *callee = e->kids[0];
    const tp_op_row *op = callee->kind == N_NAME ? tp_op_find(callee->name) : NULL;
    if (op && op->call == TP_CALL_METHOD && !member(f->mod, callee->name))
        return call_method(I, f, e, op);
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
        return tp_none_iv;
    if (callee->kind == N_NAME) {
        iv local;
        tp_module *sub = member(f->mod, callee->name);
        if (frame_get(f, callee->name, &local) && local.kind == IV_MODULE)
            sub = local.mod;
        if (sub)
            return call_module(I, sub, args, nargs, kwnames, kwargs, nkw, e);
        if (op && op->call == TP_CALL_FUNCTION)
            return op->apply(I, op, &(tp_op_args){e, args, nargs, kwnames, kwargs, nkw});
    }
    char *t = tp_expr_text(callee);
    tp_diag_add(I->d, TP_ERROR, callee->span, "model",
                "'%s' is neither a member module of %s nor a primitive op", t, f->mod->type);
    free(t);
    I->stop = true;
    return tp_none_iv;
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
        return tp_none_iv;
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
            if (!tp_config_value(I->c, e->name, e->span, &x)) { I->stop = true; return tp_none_iv; }
            return number_iv(x);
        }
        tp_diag_add(I->d, TP_ERROR, e->span, "model", "unknown name '%s'", e->name);
        I->stop = true;
        return tp_none_iv;
    }
    case N_INT: case N_FLOAT: case N_TRUE: case N_FALSE: case N_STR: case N_BINOP: case N_NEG:
        if (e->kind == N_BINOP) {
            iv a = eval(I, f, e->kids[0]);
            iv b = I->stop ? tp_none_iv : eval(I, f, e->kids[1]);
            if (I->stop)
                return tp_none_iv;
            if (a.kind == IV_TENSOR || b.kind == IV_TENSOR)
                return tensor_operator(I, e, a, b);
        }
        {
            tp_cfg_value x;
            if (!tp_eval_value(I->c, e, &x)) { I->stop = true; return tp_none_iv; }
            return number_iv(x);
        }
    case N_NONE: return tp_none_iv;
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
        frame_set(f, prm->name, k < nkw ? kwargs[k] : tp_none_iv);
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
        frame_set(f, s->kids[k]->name, tp_tensor_iv(v.items[k]));
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
    return tp_none_iv;
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
    iv out = tp_none_iv;
    if (mod->kind == TP_MOD_LIST) {
        /* a list has no hooks of its own: its modules' rows say it all. The
         * largest list holds the transformer layers: the report's bound is
         * per layer, on the size of what flows between them. */
        if (mod->nkids > I->a->graph.nlayers && nargs >= 1 && args[0].kind == IV_TENSOR) {
            tp_graph *g = &I->a->graph;
            g->nlayers = mod->nkids;
            g->layer_input_elems = tp_val_elems(args[0].t);
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
            if (out.kind == IV_TENSOR)
                tp_check_positions_source(I, mod, out.t, site->span);
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
        args[(*nargs)++] = tp_tensor_iv(v);
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
    tp_grown_finish(&I);
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
