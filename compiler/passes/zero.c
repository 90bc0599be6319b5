/* zero.c: sharded data parallelism's collectives in the program (see
 * passes.h).
 *
 * ZeRO-2 (train { shard = "gradients" }) holds each gradient only as this
 * rank's run over the dp replicas (sched/dp_shard.h). The runtime cannot
 * free what the memory plan placed, so the reduce-scatter is an op here:
 * right after the last op that touches a weight's gradient (its last
 * accumulation, or its tensor-parallel grad_sync), a dp_reduce_scatter
 * reduces it into a buffer of the run's size, which becomes the gradient
 * the schedule leaves (outputs.grads). The whole gradient is then an
 * ordinary activation: its bytes are free for the rest of the backward,
 * and only the runs live to the optimizer.
 *
 * FSDP (shard = "parameters") holds the weights as runs too: each weight
 * is gathered over dp into a buffer just before its first reader in the
 * forward, and again before its first reader in the backward (FSDP2's
 * reshard_after_forward), its readers reading that buffer (weight_from,
 * bias_from), so the memory plan frees a layer's gathered weights after
 * the layer. A weight outside the transformer layers (the embedding, the
 * final norm, the head: FSDP2's root module, which it never reshards after
 * the forward) is gathered once for both. */
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "sched/dp_shard.h"
#include "util/xalloc.h"

static int64_t param_elems(const tp_ir_param *p) { return p->local[0] * (p->rank > 1 ? p->local[1] : 1); }

static int64_t runs_of(const tp_ir *ir, int p, int64_t dp) { return dp * tp_dp_shard_elems(param_elems(&ir->params[p]), dp); }

/* An op to put in: before op `at` (its readers), or after it (the gradient
 * it finished); `at` == nops: at the end. `seq` keeps the order they were
 * planned in. */
typedef struct insertion {
    int at, after, seq;
    tp_ir_op op;
} insertion;

typedef struct plan {
    insertion *list;
    int n, cap;
} plan;

static void plan_add(plan *pl, int at, int after, tp_ir_op op)
{
    pl->list = tp_xgrow(pl->list, pl->n, &pl->cap, sizeof *pl->list, 64);
    pl->list[pl->n] = (insertion){at, after, pl->n, op};
    pl->n++;
}

static int by_place(const void *a, const void *b)
{
    const insertion *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    if (x->after != y->after)
        return x->after - y->after;
    return x->seq - y->seq;
}

/* ---- ZeRO-2: the gradients' reduce-scatters ---- */

/* Per parameter, the last live op that reads or writes (a view of) its
 * gradient; -1 for a gradient no op touches. */
static int *last_touch(const tp_ir *ir)
{
    int *param_of = tp_xmalloc(((size_t)ir->nbufs + 1) * sizeof *param_of);
    int *last = tp_xmalloc(((size_t)ir->nparams + 1) * sizeof *last);
    for (int b = 0; b < ir->nbufs; b++)
        param_of[b] = -1;
    for (int p = 0; p < ir->nparams; p++) {
        param_of[tp_ir_alias_root(ir, ir->grad_buf[p])] = p;
        last[p] = -1;
    }
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead)
            continue;
        for (int k = 0; k < op->nin; k++)
            if (param_of[tp_ir_alias_root(ir, op->in[k])] >= 0)
                last[param_of[tp_ir_alias_root(ir, op->in[k])]] = i;
        for (int o = 0; o < tp_ops[op->kind].nout; o++)
            if (op->outs[o] >= 0 && param_of[tp_ir_alias_root(ir, op->outs[o])] >= 0)
                last[param_of[tp_ir_alias_root(ir, op->outs[o])]] = i;
    }
    free(param_of);
    return last;
}

/* Parameter p's gradient reduced into its run: a new output buffer, the
 * whole gradient no longer one. */
static tp_ir_op reduce_scatter(tp_ir *ir, int p, int64_t dp)
{
    const tp_ir_param *param = &ir->params[p];
    int64_t runs = runs_of(ir, p, dp);
    int whole = ir->grad_buf[p];
    tp_ir_buf run = {.rank = 1, .shape = {runs / dp}, .dtype = TP_F32,
                     .name = tp_xasprintf("%s.grad.dp_run", param->name), .offset = -1, .output = true,
                     .alias_of = -1};
    int r = tp_ir_add_buf(ir, &run);
    ir->bufs[whole].output = false;
    ir->grad_buf[p] = r;
    return (tp_ir_op){.kind = TP_OP_DP_REDUCE_SCATTER, .in = {whole}, .nin = 1, .out = r, .weight = p, .bias = -1,
                      .elems = runs, .phase = TP_PHASE_GRAD_SYNC};
}

static void plan_reduce_scatters(tp_ir *ir, int64_t dp, plan *pl)
{
    int *last = last_touch(ir);
    for (int p = 0; p < ir->nparams; p++)
        plan_add(pl, last[p] < 0 ? ir->nops : last[p], 1, reduce_scatter(ir, p, dp));
    free(last);
}

/* ---- FSDP: the weights' all-gathers ---- */

/* Whether op reads parameter p as its weight or its bias (the dp
 * collectives only name theirs). */
static bool reads_param(const tp_ir_op *op, int p)
{
    return !op->dead && !tp_op_is_dp_collective(op->kind) && (op->weight == p || op->bias == p);
}

/* Parameter p gathered into a new buffer, before op `at`, with that op's
 * phase and provenance. */
static int gather(tp_ir *ir, int p, int64_t dp, int at, const char *suffix, plan *pl)
{
    const tp_ir_op *first = &ir->ops[at];
    tp_ir_buf whole = {.rank = 1, .shape = {runs_of(ir, p, dp)}, .dtype = TP_F32,
                       .name = tp_xasprintf("%s.dp_gathered%s", ir->params[p].name, suffix), .offset = -1,
                       .alias_of = -1};
    int b = tp_ir_add_buf(ir, &whole);
    plan_add(pl, at, 0,
             (tp_ir_op){.kind = TP_OP_DP_ALL_GATHER, .out = b, .weight = p, .bias = -1, .elems = whole.shape[0],
                        .module = first->module, .entry = first->entry, .layer = first->layer,
                        .recompute = first->recompute, .phase = first->phase});
    return b;
}

static void plan_gathers(tp_ir *ir, int64_t dp, plan *pl)
{
    for (int p = 0; p < ir->nparams; p++) {
        int first_forward = -1, first_backward = -1;
        bool in_layer = false;
        for (int i = 0; i < ir->nops; i++) {
            const tp_ir_op *op = &ir->ops[i];
            if (!reads_param(op, p))
                continue;
            in_layer |= op->layer != NULL;
            if (op->phase == TP_PHASE_FORWARD && first_forward < 0)
                first_forward = i;
            if (op->phase != TP_PHASE_FORWARD && first_backward < 0)
                first_backward = i;
        }
        if (first_forward < 0 && first_backward < 0)
            continue;
        /* a root weight, or one only the forward or only the backward reads: one gather */
        bool once = !in_layer || first_forward < 0 || first_backward < 0;
        int at = first_forward >= 0 ? first_forward : first_backward;
        int forward = gather(ir, p, dp, at, "", pl);
        int backward = once ? forward : gather(ir, p, dp, first_backward, ".backward", pl);
        for (int i = 0; i < ir->nops; i++) {
            tp_ir_op *op = &ir->ops[i];
            if (!reads_param(op, p))
                continue;
            int from = 1 + (op->phase == TP_PHASE_FORWARD ? forward : backward);
            if (op->weight == p)
                op->weight_from = from;
            if (op->bias == p)
                op->bias_from = from;
        }
    }
}

void tp_pass_zero(tp_ir *ir, int64_t dp, tp_dp_shard mode)
{
    if (dp < 2 || mode < TP_DP_SHARD_GRADIENTS || !ir->grad_buf)
        return;
    plan pl = {0};
    if (mode == TP_DP_SHARD_PARAMETERS)
        plan_gathers(ir, dp, &pl);
    plan_reduce_scatters(ir, dp, &pl);
    qsort(pl.list, (size_t)pl.n, sizeof *pl.list, by_place);
    tp_ir_op *old = ir->ops;
    int n = ir->nops, next = 0;
    ir->ops = NULL;
    ir->nops = ir->capops = 0;
    for (int i = 0; i <= n; i++) {
        for (; next < pl.n && pl.list[next].at == i && !pl.list[next].after; next++)
            tp_ir_add_op(ir, &pl.list[next].op);
        if (i < n)
            tp_ir_add_op(ir, &old[i]);
        for (; next < pl.n && pl.list[next].at == i && pl.list[next].after; next++)
            tp_ir_add_op(ir, &pl.list[next].op);
    }
    free(old);
    free(pl.list);
}
