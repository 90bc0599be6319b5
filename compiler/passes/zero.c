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
 * and only the runs live to the optimizer. */
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "sched/dp_shard.h"
#include "util/xalloc.h"

static int root_of(const tp_ir *ir, int b)
{
    while (ir->bufs[b].alias_of >= 0)
        b = ir->bufs[b].alias_of;
    return b;
}

static int64_t param_elems(const tp_ir_param *p) { return p->local[0] * (p->rank > 1 ? p->local[1] : 1); }

/* Per parameter, the last live op that reads or writes (a view of) its
 * gradient; -1 for a gradient no op touches. */
static int *last_touch(const tp_ir *ir)
{
    int *param_of = tp_xmalloc(((size_t)ir->nbufs + 1) * sizeof *param_of);
    int *last = tp_xmalloc(((size_t)ir->nparams + 1) * sizeof *last);
    for (int b = 0; b < ir->nbufs; b++)
        param_of[b] = -1;
    for (int p = 0; p < ir->nparams; p++) {
        param_of[root_of(ir, ir->grad_buf[p])] = p;
        last[p] = -1;
    }
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead)
            continue;
        for (int k = 0; k < op->nin; k++)
            if (param_of[root_of(ir, op->in[k])] >= 0)
                last[param_of[root_of(ir, op->in[k])]] = i;
        for (int o = 0; o < tp_ops[op->kind].nout; o++)
            if (op->outs[o] >= 0 && param_of[root_of(ir, op->outs[o])] >= 0)
                last[param_of[root_of(ir, op->outs[o])]] = i;
    }
    free(param_of);
    return last;
}

/* Parameter p's gradient reduced into its run: a new output buffer, the
 * whole gradient no longer one. */
static tp_ir_op reduce_scatter(tp_ir *ir, int p, int64_t dp)
{
    const tp_ir_param *param = &ir->params[p];
    int64_t c = tp_dp_shard_elems(param_elems(param), dp);
    int whole = ir->grad_buf[p];
    tp_ir_buf run = {.rank = 1, .shape = {c}, .dtype = TP_F32, .name = tp_xasprintf("%s.grad.dp_run", param->name),
                     .offset = -1, .output = true, .alias_of = -1};
    int r = tp_ir_add_buf(ir, &run);
    ir->bufs[whole].output = false;
    ir->grad_buf[p] = r;
    return (tp_ir_op){.kind = TP_OP_DP_REDUCE_SCATTER, .in = {whole}, .nin = 1, .out = r, .weight = p, .bias = -1,
                      .elems = c * dp, .phase = TP_PHASE_GRAD_SYNC};
}

void tp_pass_zero(tp_ir *ir, int64_t dp, tp_dp_shard mode)
{
    if (dp < 2 || mode < TP_DP_SHARD_GRADIENTS || !ir->grad_buf)
        return;
    int *last = last_touch(ir);
    /* the reduce-scatters that follow op i, in parameter order: after[i] for
     * op i, after[nops] at the end (a gradient no op touches) */
    int n = ir->nops;
    int *count = tp_xcalloc((size_t)n + 2, sizeof *count);
    for (int p = 0; p < ir->nparams; p++)
        count[(last[p] < 0 ? n : last[p]) + 1]++;
    for (int i = 0; i <= n; i++)
        count[i + 1] += count[i];
    int *order = tp_xmalloc(((size_t)ir->nparams + 1) * sizeof *order);
    int *fill = tp_xmalloc(((size_t)n + 2) * sizeof *fill);
    for (int i = 0; i <= n; i++)
        fill[i] = count[i];
    for (int p = 0; p < ir->nparams; p++)
        order[fill[last[p] < 0 ? n : last[p]]++] = p;
    tp_ir_op *old = ir->ops;
    ir->ops = NULL;
    ir->nops = ir->capops = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n)
            tp_ir_add_op(ir, &old[i]);
        for (int k = count[i]; k < count[i + 1]; k++) {
            tp_ir_op op = reduce_scatter(ir, order[k], dp);
            tp_ir_add_op(ir, &op);
        }
    }
    free(old);
    free(order);
    free(fill);
    free(count);
    free(last);
}
