/* autodiff.c: the backward pass (tpcc --train), derived from the forward
 * graph.
 *
 * Reverse-mode differentiation of the global graph, partitioned like the
 * forward: every node gets its gradient nodes on the same local shapes,
 * every layout change its conjugate, appended after the forward in
 * reverse program order.
 *
 * A gradient is held as DTensor holds it. A value's gradient has the
 * value's placement, except that a Partial value's gradient is
 * Replicate (the gradient of a sum is the same for every term). What one
 * op contributes to a gradient is either complete in that placement or
 * Partial: a replicated input (or weight) of an op that runs differently
 * on each rank (a Colwise linear's input, a sequence-parallel norm's
 * weight) receives each rank's share only. Contributions are summed per
 * kind; the partial sum is all-reduced once when the gradient is
 * needed whole (Megatron's `f`: an all-reduce of the input gradient), or
 * reduce-scattered when it flows back through an all-gather. The other
 * conjugates: all-reduce <-> identity, reduce-scatter <-> all-gather,
 * local slice <-> all-gather, Replicate -> Partial's divide <-> identity,
 * all-to-all <-> the reverse all-to-all. The losses' gradients need no
 * communication (vocab-parallel: PyTorch's loss_parallel); a summed loss
 * outside the model (tpcc --loss sum) seeds ones in the logits' layout.
 *
 * Weights get their gradients the same way; a replicated weight whose
 * gradient is partial (a norm under sequence parallelism, Qwen3's q/k
 * norms, a bias beside sharded rows) is all-reduced after the backward:
 * the gradient synchronisation PyTorch leaves to the user. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

/* One op's contribution to a gradient. Partial shares are reduced per
 * group: NULL for shares of a tensor PyTorch holds as a DTensor (its
 * autograd sums them before the one redistribution), else the module whose
 * input hook labelled a plain tensor (from_local's backward reduces there,
 * one collective per module). -O1 puts every share in one group. */
typedef struct contrib {
    int value;
    bool partial;
    const void *group;
} contrib;

typedef struct contribs {
    contrib *at;
    int n, cap;
} contribs;

typedef struct autodiff {
    tp_graph *g;
    int nvalues, nforward;  /* the forward graph's values and nodes */
    bool merge;             /* -O1: one reduction per gradient */
    contribs *to_value;     /* by storage value */
    contribs *to_param;     /* by parameter */
    bool *needs;            /* by storage value: it depends on a weight */
    int at;                 /* the forward node differentiated (provenance, errors) */
    tp_autodiff_error *err;
} autodiff;

static int fail_v(autodiff *A, bool unsupported, const char *fmt, va_list ap)
{
    if (!A->err->message[0]) {    /* the first failure is the one reported */
        A->err->node = A->at;
        A->err->unsupported = unsupported;
        vsnprintf(A->err->message, sizeof A->err->message, fmt, ap);
    }
    return -1;
}

/* The model has no backward (no loss, a weight without a gradient). */
static int fail(autodiff *A, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(autodiff *A, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(A, false, fmt, ap);
    va_end(ap);
    return -1;
}

/* The backward exists, and tpcc cannot derive it yet. */
static int refuse(autodiff *A, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(autodiff *A, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(A, true, fmt, ap);
    va_end(ap);
    return -1;
}

static int storage(const autodiff *A, int v) { return tp_graph_storage(A->g, v); }
static const tp_gvalue *value(const autodiff *A, int v) { return &A->g->values[tp_graph_resolve(A->g, v)]; }
static int64_t local_elems(const autodiff *A, int v) { return tp_gvalue_local_elems(value(A, v)); }

static int64_t global_elems(const autodiff *A, int v)
{
    const tp_gvalue *x = value(A, v);
    int64_t n = 1;
    for (int d = 0; d < x->rank; d++)
        n *= x->shape[d];
    return n;
}

static void push(contribs *c, int v, bool partial, const void *group)
{
    c->at = tp_xgrow(c->at, c->n, &c->cap, sizeof *c->at, 4);
    c->at[c->n++] = (contrib){v, partial, group};
}

/* ---- values and nodes of the backward ---- */

/* A new value shaped like `like` (a copy of the template), named after it. */
static int new_value(autodiff *A, const tp_gvalue *like, const char *what)
{
    tp_gvalue v = *like;
    v.dtensor = v.input = v.output = v.f32_only = false;
    v.dtype = TP_F32;
    v.alias_of = v.redirect = -1;
    v.name = tp_xasprintf("%s.%s", like->name, what);
    return tp_graph_add_value(A->g, &v);
}

/* The template of value v's gradient: v's shapes. */
static tp_gvalue like_value(const autodiff *A, int v) { return *value(A, v); }

/* The template of parameter p's gradient. */
static tp_gvalue like_param(const autodiff *A, int p)
{
    const tp_ir_param *ip = &A->g->params[p];
    tp_gvalue v = {0};
    v.rank = ip->rank;
    for (int d = 0; d < ip->rank; d++) {
        v.shape[d] = ip->shape[d];
        v.local[d] = ip->local[d];
    }
    v.nmesh = 1;
    v.pl[0] = ip->pl;
    v.name = (char *)ip->name;    /* a template's name is only read */
    return v;
}

/* A node of the backward: provenance from the forward node it differentiates. */
static tp_ir_op *emit(autodiff *A, tp_op_kind kind, int out, int nin, const int *in)
{
    const tp_gnode *fwd = A->at >= 0 ? &A->g->nodes[A->at] : NULL;
    const struct tp_module *module = fwd ? fwd->module : NULL;
    const struct tp_style *entry = fwd ? fwd->entry : NULL;
    tp_gnode *n = tp_graph_add_node(A->g, TP_GNODE_OP, kind);
    n->module = module;
    n->entry = entry;
    n->op.phase = fwd ? TP_PHASE_BACKWARD : TP_PHASE_GRAD_SYNC;
    n->op.out = out;
    for (int i = 0; i < nin; i++)
        n->op.in[n->op.nin++] = in[i];
    return &n->op;
}

/* out = a + b (shaped like the template) */
static int add(autodiff *A, const tp_gvalue *like, int a, int b)
{
    int out = new_value(A, like, "grad_sum");
    emit(A, TP_OP_ADD, out, 2, (int[]){a, b});
    return out;
}

/* ---- contributions ---- */

/* Whether every rank runs node n on the same data: then each rank's
 * gradient of a replicated input is the whole gradient. */
static bool runs_replicated(const autodiff *A, const tp_gnode *n)
{
    for (int k = 0; k < n->op.nin; k++)
        if (value(A, n->op.in[k])->dtype != TP_I32 && value(A, n->op.in[k])->pl[0].kind != TP_REPLICATE)
            return false;
    if (n->op.out >= 0 && value(A, n->op.out)->pl[0].kind != TP_REPLICATE)
        return false;
    if (n->op.weight >= 0 && A->g->params[n->op.weight].pl.kind != TP_REPLICATE)
        return false;
    return n->op.bias < 0 || A->g->params[n->op.bias].pl.kind == TP_REPLICATE;
}

/* Whether what node n contributes to the gradient of a tensor placed `pl`
 * is each rank's share only. */
static bool partial_share(const autodiff *A, const tp_gnode *n, tp_placement pl)
{
    return A->g->world > 1 && pl.kind == TP_REPLICATE && !runs_replicated(A, n);
}

static void to_value(autodiff *A, const tp_gnode *n, int v, int grad)
{
    int s = storage(A, v);
    if (s < 0 || s >= A->nvalues || !A->needs[s])
        return;
    bool shared = A->merge || value(A, v)->dtensor;
    push(&A->to_value[s], grad, partial_share(A, n, value(A, v)->pl[0]), shared ? NULL : n->module);
}

static void to_param(autodiff *A, int p, int grad, bool partial)
{
    if (partial && A->g->param_partial_at[p] < 0)
        A->g->param_partial_at[p] = A->at;
    push(&A->to_param[p], grad, partial, NULL);
}

/* The contributions of a list summed: the complete ones first (the entry
 * returned, -1 when there are none), then one partial sum per group. */
static int collect(autodiff *A, contribs *c, const tp_gvalue *like)
{
    contribs sums = {0};
    int whole = -1;
    for (int i = 0; i < c->n; i++) {
        contrib x = c->at[i];
        if (!x.partial) {
            whole = whole < 0 ? x.value : add(A, like, whole, x.value);
            continue;
        }
        int k = 0;
        while (k < sums.n && sums.at[k].group != x.group)
            k++;
        if (k == sums.n)
            push(&sums, x.value, true, x.group);
        else
            sums.at[k].value = add(A, like, sums.at[k].value, x.value);
    }
    c->n = 0;
    if (whole >= 0)
        push(c, whole, false, NULL);
    for (int k = 0; k < sums.n; k++)
        push(c, sums.at[k].value, true, sums.at[k].group);
    free(sums.at);
    return whole;
}

/* A partial sum all-reduced (Partial -> Replicate). */
static int reduced(autodiff *A, const tp_gvalue *like, int partial)
{
    int out = new_value(A, like, "grad_reduced");
    emit(A, TP_OP_ALL_REDUCE, out, 1, &partial)->elems = tp_gvalue_local_elems(like);
    return out;
}

/* Gradient v as a tensor of like's shape: itself, or a view of it when it
 * is held under another shape (the heads view of a projection's output). */
static int in_shape_of(autodiff *A, int v, const tp_gvalue *like)
{
    const tp_gvalue *got = value(A, v);
    if (got->rank == like->rank && !memcmp(got->local, like->local, sizeof got->local))
        return v;
    int view = new_value(A, like, "grad_view");
    A->g->values[view].alias_of = v;
    return view;
}

/* The whole gradient of a list: each group's partial sum all-reduced,
 * added to the complete ones; -1 when nothing contributed. A gradient held
 * under another shape (a view's) becomes a view of the template's shape. */
static int complete(autodiff *A, contribs *c, const tp_gvalue *like)
{
    int whole = collect(A, c, like);
    for (int k = 0; k < c->n; k++)
        if (c->at[k].partial) {
            int r = reduced(A, like, c->at[k].value);
            whole = whole < 0 ? r : add(A, like, whole, r);
        }
    if (whole < 0)
        return -1;
    whole = in_shape_of(A, whole, like);
    c->n = 0;
    push(c, whole, false, NULL);
    return whole;
}

/* The gradient of forward value v, whole; -1 when none flows to it. */
static int grad_of(autodiff *A, int v)
{
    tp_gvalue like = like_value(A, storage(A, v));
    return complete(A, &A->to_value[storage(A, v)], &like);
}

/* ---- the rules ---- */

static bool needs(const autodiff *A, int v) { return A->needs[storage(A, v)]; }

/* A gradient shaped like forward value v, computed by `kind` from `in`;
 * contributed to v. Returns the new op. */
static tp_ir_op *input_grad(autodiff *A, const tp_gnode *n, int v, tp_op_kind kind, int nin, const int *in)
{
    tp_gvalue like = like_value(A, v);
    int out = new_value(A, &like, "grad");
    tp_ir_op *op = emit(A, kind, out, nin, in);
    to_value(A, n, v, out);
    return op;
}

/* A weight's gradient computed by `kind` from `in`. */
static tp_ir_op *weight_grad(autodiff *A, const tp_gnode *n, int p, tp_op_kind kind, int nin, const int *in)
{
    tp_gvalue like = like_param(A, p);
    int out = new_value(A, &like, "grad");
    tp_ir_op *op = emit(A, kind, out, nin, in);
    to_param(A, p, out, partial_share(A, n, A->g->params[p].pl));
    return op;
}

/* The forward op's attributes on a backward op (norm, attention, rope). */
static void same_attrs(tp_ir_op *op, const tp_ir_op *f)
{
    tp_ir_op keep = *op;
    *op = *f;
    op->kind = keep.kind;
    memcpy(op->outs, keep.outs, sizeof op->outs);
    op->nin = keep.nin;
    memcpy(op->in, keep.in, sizeof op->in);
    op->weight = keep.weight;
    op->bias = keep.bias;
    op->phase = keep.phase;
    op->dead = false;
}

static void linear(autodiff *A, const tp_gnode *n, int dy)
{
    const tp_ir_op *f = &n->op;
    int x = f->in[0];
    bool conv = f->kind == TP_OP_CONV1D;
    if (needs(A, x)) {
        /* dy . W for a Linear (W [n,k]) is conv1d's product; dy . W^T for a Conv1D (W [k,n]) matmul's */
        tp_ir_op *op = input_grad(A, n, x, conv ? TP_OP_MATMUL : TP_OP_CONV1D, 1, &dy);
        op->weight = f->weight;
        op->m = f->m, op->n = f->k, op->k = f->n;
    }
    tp_ir_op *op = weight_grad(A, n, f->weight, TP_OP_MATMUL_TN, 2, conv ? (int[]){x, dy} : (int[]){dy, x});
    op->m = f->m;
    op->n = conv ? f->k : f->n;
    op->k = conv ? f->n : f->k;
}

/* sum_rows of a gradient over the rows a smaller operand was broadcast to */
static tp_ir_op *sum_rows(autodiff *A, const tp_gnode *n, int v, int dy)
{
    tp_ir_op *op = input_grad(A, n, v, TP_OP_SUM_ROWS, 1, &dy);
    op->n = local_elems(A, v);
    op->m = local_elems(A, dy) / op->n;
    return op;
}

static void elementwise(autodiff *A, const tp_gnode *n, int dy)
{
    int a = n->op.in[0], b = n->op.in[1];
    bool broadcast = local_elems(A, b) != local_elems(A, a);
    if (n->op.kind == TP_OP_ADD) {
        if (needs(A, a))
            to_value(A, n, a, dy);
        if (needs(A, b) && broadcast)
            sum_rows(A, n, b, dy);
        else if (needs(A, b))
            to_value(A, n, b, dy);
        return;
    }
    if (needs(A, a))
        input_grad(A, n, a, TP_OP_MUL, 2, (int[]){dy, b});
    if (needs(A, b) && broadcast) {
        tp_gvalue like = like_value(A, a);
        int full = new_value(A, &like, "grad_product");
        emit(A, TP_OP_MUL, full, 2, (int[]){dy, a});
        sum_rows(A, n, b, full);
    } else if (needs(A, b)) {
        input_grad(A, n, b, TP_OP_MUL, 2, (int[]){dy, a});
    }
}

static void norm(autodiff *A, const tp_gnode *n, int dy)
{
    const tp_ir_op *f = &n->op;
    bool rms = f->kind == TP_OP_RMSNORM;
    int x = f->in[0];
    if (needs(A, x)) {
        tp_ir_op *op = input_grad(A, n, x, rms ? TP_OP_RMSNORM_DX : TP_OP_LAYERNORM_DX, 2, (int[]){x, dy});
        same_attrs(op, f);
        op->weight = f->weight;
    }
    same_attrs(weight_grad(A, n, f->weight, rms ? TP_OP_RMSNORM_DW : TP_OP_LAYERNORM_DW, 2, (int[]){x, dy}), f);
    if (f->bias >= 0) {
        tp_ir_op *op = weight_grad(A, n, f->bias, TP_OP_SUM_ROWS, 1, &dy);
        op->m = f->m, op->n = f->n;
    }
}

static void bias_add(autodiff *A, const tp_gnode *n, int dy)
{
    const tp_ir_op *f = &n->op;
    /* in place (out is x): x's gradient before the add is dy itself */
    if (storage(A, f->in[0]) != storage(A, f->out))
        to_value(A, n, f->in[0], dy);
    /* A replicated bias divided by tp onto a partial sum is DTensor's way
     * to count it once: its gradient is the whole sum of dy, on every rank */
    bool onto_partial = tp_placement_is_partial(value(A, f->out)->pl[0]);
    tp_gvalue like = like_param(A, f->bias);
    int out = new_value(A, &like, "grad");
    tp_ir_op *op = emit(A, TP_OP_SUM_ROWS, out, 1, &dy);
    op->m = f->m, op->n = f->n;
    op->scale = onto_partial ? 1.0 : f->scale;
    to_param(A, f->bias, out, !onto_partial && partial_share(A, n, A->g->params[f->bias].pl));
}

/* The loss: dlogits with d loss = 1, no communication. */
static void loss_backward(autodiff *A, const tp_gnode *n)
{
    const tp_ir_op *f = &n->op;
    if (f->kind == TP_OP_SUM_ROWS) {    /* output.sum() of whole logits: output.sum().backward() seeds ones */
        input_grad(A, n, f->in[0], TP_OP_ONES, 0, NULL);
        return;
    }
    if (f->kind == TP_OP_CROSS_ENTROPY) {
        same_attrs(input_grad(A, n, f->in[0], TP_OP_CROSS_ENTROPY_GRAD, 2, f->in), f);
        return;
    }
    /* ce_loss(sumexp, max, target, labels): the logits are what ce_sumexp read */
    int sumexp = storage(A, f->in[0]);
    for (int i = A->at - 1; i >= 0; i--) {
        const tp_gnode *s = &A->g->nodes[i];
        if (s->removed || s->op.kind != TP_OP_CE_SUMEXP || storage(A, s->op.out) != sumexp)
            continue;
        tp_ir_op sumexp_op = s->op;
        int logits = sumexp_op.in[0];
        same_attrs(input_grad(A, n, logits, TP_OP_CE_GRAD, 4, (int[]){logits, f->in[1], f->in[0], f->in[3]}),
                   &sumexp_op);
        return;
    }
    fail(A, "the vocab-parallel loss has no ce_sumexp before it");
}

/* One op for the gradients of the forward's first `ngrads` inputs, from
 * those inputs and dy (attention's q, k and v; silu_mul's a and b), and
 * where reads_out the forward's output after dy: out[k] is input k's, -1
 * where that input needs none. */
static void joint_grads(autodiff *A, const tp_gnode *n, tp_op_kind kind, int ngrads, int dy, bool reads_out)
{
    const tp_ir_op *f = &n->op;
    int grads[TP_MAX_OUTS], in[TP_MAX_INS];
    bool any = false;
    for (int k = 0; k < TP_MAX_OUTS; k++) {
        grads[k] = -1;
        if (k < ngrads && needs(A, f->in[k])) {
            tp_gvalue like = like_value(A, f->in[k]);
            grads[k] = new_value(A, &like, "grad");
            any = true;
        }
    }
    if (!any)
        return;
    memcpy(in, f->in, (size_t)ngrads * sizeof *in);
    int nin = ngrads;
    in[nin++] = dy;
    if (reads_out)
        in[nin++] = f->out;
    tp_ir_op *op = emit(A, kind, -1, nin, in);
    memcpy(op->outs, grads, sizeof grads);
    same_attrs(op, f);
    for (int k = 0; k < ngrads; k++)
        if (grads[k] >= 0)
            to_value(A, n, f->in[k], grads[k]);
}

static int op_backward(autodiff *A, const tp_gnode *n, int dy)
{
    const tp_ir_op *f = &n->op;
    switch (f->kind) {
    case TP_OP_EMBEDDING: {
        tp_ir_op *op = weight_grad(A, n, f->weight, TP_OP_EMBEDDING_GRAD, 2, (int[]){f->in[0], dy});
        op->masked = f->masked;
        op->vocab_local = f->vocab_local;
        return 0;
    }
    case TP_OP_MATMUL:
    case TP_OP_CONV1D: linear(A, n, dy); return 0;
    case TP_OP_BIAS_ADD: bias_add(A, n, dy); return 0;
    case TP_OP_RMSNORM:
    case TP_OP_LAYERNORM: norm(A, n, dy); return 0;
    case TP_OP_ROPE: {
        int in[2] = {dy, f->nin > 1 ? f->in[1] : -1};
        tp_ir_op *op = input_grad(A, n, f->in[0], TP_OP_ROPE, f->nin, in);
        same_attrs(op, f);
        op->inverse = true;
        return 0;
    }
    /* attention's reads its output too (D = dy . o, and beside it the
     * forward's log-sum-exp, attention_stats.c) */
    case TP_OP_ATTENTION: joint_grads(A, n, TP_OP_ATTENTION_GRAD, 3, dy, true); return 0;
    case TP_OP_SILU_MUL: joint_grads(A, n, TP_OP_SILU_MUL_GRAD, 2, dy, false); return 0;
    case TP_OP_SILU:
    case TP_OP_GELU:
    case TP_OP_RELU:
    case TP_OP_SOFTCAP: {
        tp_op_kind g = f->kind == TP_OP_SILU ? TP_OP_SILU_GRAD : f->kind == TP_OP_GELU ? TP_OP_GELU_GRAD
                     : f->kind == TP_OP_RELU ? TP_OP_RELU_GRAD : TP_OP_SOFTCAP_GRAD;
        same_attrs(input_grad(A, n, f->in[0], g, 2, (int[]){f->in[0], dy}), f);
        return 0;
    }
    case TP_OP_ADD:
    case TP_OP_MUL: elementwise(A, n, dy); return 0;
    case TP_OP_SCALE: same_attrs(input_grad(A, n, f->in[0], TP_OP_SCALE, 1, &dy), f); return 0;
    case TP_OP_NARROW: same_attrs(input_grad(A, n, f->in[0], TP_OP_NARROW_GRAD, 1, &dy), f); return 0;
    default:
        return refuse(A, "tpcc cannot differentiate %s yet: it would need %s's gradient rule", tp_op_names[f->kind],
                      tp_op_names[f->kind]);
    }
}

/* A layout change's conjugate, on the gradient of its result. */
static int redist_backward(autodiff *A, const tp_gnode *n)
{
    const tp_ir_op *f = &n->op;
    int src = f->in[0];
    tp_gvalue like = like_value(A, src);
    contribs *c = &A->to_value[storage(A, f->out)];
    if (f->kind == TP_OP_ALL_GATHER) {
        /* the partial sum of the gathered DTensor is reduce-scattered; the
         * plain tensor's shares, all-reduced where PyTorch reduces them, and
         * the whole gradient are sliced */
        tp_gvalue result = like_value(A, storage(A, f->out));
        int whole = collect(A, c, &result);
        for (int k = 0; k < c->n; k++) {
            if (!c->at[k].partial)
                continue;
            if (c->at[k].group) {
                int r = reduced(A, &result, c->at[k].value);
                whole = whole < 0 ? r : add(A, &result, whole, r);
                continue;
            }
            /* the collectives split dim f->dim of the gathered tensor's
             * shape, which a gradient held as a view may not have */
            int in = in_shape_of(A, c->at[k].value, &result);
            int out = new_value(A, &like, "grad");
            tp_ir_op *op = emit(A, TP_OP_REDUCE_SCATTER, out, 1, &in);
            op->dim = f->dim, op->elems = global_elems(A, src);
            push(&A->to_value[storage(A, src)], out, false, NULL);
        }
        if (whole >= 0) {
            whole = in_shape_of(A, whole, &result);
            int out = new_value(A, &like, "grad");
            tp_ir_op *op = emit(A, TP_OP_SLICE, out, 1, &whole);
            op->dim = f->dim, op->parts = (int)A->g->world;
            push(&A->to_value[storage(A, src)], out, false, NULL);
        }
        return 0;
    }
    int dy = grad_of(A, f->out);
    if (dy < 0)
        return 0;
    int out = dy;
    switch (f->kind) {
    case TP_OP_ALL_REDUCE:       /* Partial -> Replicate: each term's gradient is the sum's */
    case TP_OP_SCALE:            /* Replicate -> Partial (a divide by tp): the same tensor, split */
        break;
    case TP_OP_REDUCE_SCATTER:   /* Partial -> Shard: gather the gradient whole */
    case TP_OP_SLICE: {          /* Replicate -> Shard */
        out = new_value(A, &like, "grad");
        tp_ir_op *op = emit(A, TP_OP_ALL_GATHER, out, 1, &dy);
        op->dim = f->dim, op->elems = global_elems(A, src);
        break;
    }
    case TP_OP_ALL_TO_ALL: {
        out = new_value(A, &like, "grad");
        tp_ir_op *op = emit(A, TP_OP_ALL_TO_ALL, out, 1, &dy);
        op->dim = f->dim2, op->dim2 = f->dim, op->elems = f->elems;
        break;
    }
    default:
        return refuse(A, "tpcc cannot differentiate the redistribution %s yet: it would need its conjugate "
                         "collective", tp_op_names[f->kind]);
    }
    push(&A->to_value[storage(A, src)], out, false, NULL);
    return 0;
}

/* Which values depend on a weight, in program order. */
static void mark_needs(autodiff *A)
{
    for (int i = 0; i < A->nforward; i++) {
        const tp_gnode *n = &A->g->nodes[i];
        if (n->removed || n->op.dead || n->op.out < 0 || value(A, n->op.out)->dtype == TP_I32)
            continue;
        bool needs = n->op.weight >= 0 || n->op.bias >= 0;
        for (int k = 0; k < n->op.nin; k++)
            needs |= A->needs[storage(A, n->op.in[k])];
        if (needs)
            A->needs[storage(A, n->op.out)] = true;
    }
}

static int refuse_unsupported_weights(autodiff *A)
{
    for (int p = 0; p < A->g->nparams; p++)
        if (A->g->params[p].replicas > 1)
            return refuse(A, "weight %s is replicated over %lld ranks (tpcc_replicate_heads): its gradient would need "
                             "a reduction within each group of replicas, which --train does not do yet",
                        A->g->params[p].name, (long long)A->g->params[p].replicas);
    return 0;
}

static int backward(autodiff *A)
{
    int loss = storage(A, A->g->loss);
    for (int i = A->nforward - 1; i >= 0; i--) {
        A->at = i;
        tp_gnode n = A->g->nodes[i];       /* a copy: emitting grows the node table */
        if (n.removed || n.op.dead || n.op.out < 0)
            continue;
        if (storage(A, n.op.out) == loss) {
            loss_backward(A, &n);
            continue;
        }
        if (!A->to_value[storage(A, n.op.out)].n)
            continue;
        if (n.kind == TP_GNODE_REDIST ? redist_backward(A, &n) : op_backward(A, &n, grad_of(A, n.op.out)))
            return -1;
    }
    return A->err->message[0] ? -1 : 0;
}

/* Every weight's gradient, whole (partial ones all-reduced: the gradient
 * synchronisation), kept to the end of the step. */
static int weight_grads(autodiff *A)
{
    A->g->param_grad = tp_xreallocarray(NULL, (size_t)A->g->nparams + 1, sizeof *A->g->param_grad);
    for (int p = 0; p < A->g->nparams; p++) {
        tp_gvalue like = like_param(A, p);
        int grad = complete(A, &A->to_param[p], &like);
        if (grad < 0)
            return fail(A, "weight %s receives no gradient", A->g->params[p].name);
        A->g->values[grad].output = true;
        A->g->param_grad[p] = grad;
    }
    return 0;
}

int tp_pass_autodiff(tp_graph *g, bool merge, tp_autodiff_error *err)
{
    err->node = -1;
    err->message[0] = '\0';
    autodiff A = {g, g->nvalues, g->nnodes, merge, NULL, NULL, NULL, g->nnodes - 1, err};
    if (g->loss < 0) {
        A.at = -1;
        snprintf(err->message, sizeof err->message, "the model computes no loss, it returns its logits: --train "
                 "needs a loss; add --loss sum (output.sum().backward(), as PyTorch's tests) or --loss cross_entropy "
                 "(against labels, as torchtitan's trainer), or return cross_entropy(logits, labels) from the "
                 "root forward");
        return -1;
    }
    A.to_value = tp_xcalloc((size_t)g->nvalues + 1, sizeof *A.to_value);
    A.to_param = tp_xcalloc((size_t)g->nparams + 1, sizeof *A.to_param);
    A.needs = tp_xcalloc((size_t)g->nvalues + 1, sizeof *A.needs);
    g->param_partial_at = tp_xreallocarray(NULL, (size_t)g->nparams + 1, sizeof *g->param_partial_at);
    for (int p = 0; p < g->nparams; p++)
        g->param_partial_at[p] = -1;
    mark_needs(&A);
    int rc = refuse_unsupported_weights(&A);
    if (!rc)
        rc = backward(&A);
    A.at = -1;   /* the synchronisation belongs to no forward node */
    if (!rc)
        rc = weight_grads(&A);
    for (int v = 0; v < A.nvalues; v++)
        free(A.to_value[v].at);
    for (int p = 0; p < g->nparams; p++)
        free(A.to_param[p].at);
    free(A.to_value);
    free(A.to_param);
    free(A.needs);
    return rc;
}
