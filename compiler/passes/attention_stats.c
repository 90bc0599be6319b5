/* attention_stats.c: --train, on the lowered program (see passes.h).
 *
 * An attention's gradient needs the softmax P of the forward and each
 * query's D = rowsum(P * dP). Recomputing P's statistics (a row's maximum
 * and denominator) costs the backward a pass over every key, and D one
 * more product; FlashAttention-2's backward instead reads the forward's
 * log-sum-exp, P = exp(score - lse), and D = dy . o from the forward's
 * output. So each attention whose gradient the program computes also
 * writes its log-sum-exp (f32 [batch, heads, seq], one float per query:
 * 1/head_dim of its output's size), and the gradient reads it and the
 * output.
 *
 * Autodiff gives the gradient the attention's output after dy (in[4]),
 * so recomputation (tpcc --recompute) treats it as any value the backward
 * reads: where it clones the attention into the backward, the gradient
 * reads the clone's output, and the statistics kept are the clone's, only
 * until the gradient reads them. */
#include <stdio.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

/* The attention before op `grad` that wrote its in[4]; -1 for none. */
static int forward_of(const tp_ir *ir, int grad)
{
    for (int i = grad - 1; i >= 0; i--)
        if (ir->ops[i].kind == TP_OP_ATTENTION && !ir->ops[i].dead && ir->ops[i].outs[0] == ir->ops[grad].in[4])
            return i;
    return -1;
}

/* A new f32 [batch, heads, seq] buffer for the log-sum-exp of attention
 * f; -1 where its sizes are unknown (which the writer refuses). */
static int lse_buffer(tp_ir *ir, const tp_ir_op *f)
{
    tp_ir_buf b = {.rank = 3, .dtype = TP_F32, .f32_only = true, .offset = -1, .alias_of = -1};
    b.shape[0] = tp_ir_attention_size(ir, f, f->m, 0);
    b.shape[1] = tp_ir_attention_size(ir, f, f->heads, 2);
    b.shape[2] = tp_ir_attention_size(ir, f, f->n, 1);
    if (b.shape[0] <= 0 || b.shape[1] <= 0 || b.shape[2] <= 0)
        return -1;
    b.name = tp_xasprintf("%s.lse", ir->bufs[f->out].name);
    return tp_ir_add_buf(ir, &b);
}

int tp_pass_attention_stats(tp_ir *ir, char *err, size_t errlen)
{
    for (int i = 0; i < ir->nops; i++) {
        if (ir->ops[i].kind != TP_OP_ATTENTION_GRAD || ir->ops[i].dead)
            continue;
        /* autodiff gives every gradient its attention's output: a gradient
         * without one is tpcc's own mistake, refused rather than written */
        const int f = ir->ops[i].nin == 5 ? forward_of(ir, i) : -1;
        if (f < 0) {
            snprintf(err, errlen, "internal error: attention's gradient (op %d) reads no attention's output; "
                                  "please report it with the plan", i);
            return -1;
        }
        if (ir->ops[f].outs[1] < 0) {
            const int lse = lse_buffer(ir, &ir->ops[f]);
            if (lse < 0) {
                snprintf(err, errlen, "internal error: the attention of op %d has no sizes; please report it with "
                                      "the plan", f);
                return -1;
            }
            ir->ops[f].outs[1] = lse;
        }
        tp_ir_op *grad = &ir->ops[i];
        grad->in[grad->nin++] = ir->ops[f].outs[1];
    }
    return 0;
}
