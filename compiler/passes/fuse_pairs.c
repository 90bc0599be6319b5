/* fuse_pairs.c: -O1 on the lowered program: an op and the one right after
 * it that reads its result become one op that reads memory once.
 *
 *  - A residual add followed by the RMSNorm of its result (every decoder
 *    layer's norms but the first, and the final norm) becomes one
 *    add_rmsnorm writing both results: the sum, which the residual stream
 *    and the backward go on reading, and its norm, without reading the sum
 *    back.
 *  - A bias add followed by the gelu of its result (GPT-2's c_fc) becomes
 *    one bias_gelu; the biased value is written too only when something
 *    else reads it (gelu_grad, in a training schedule).
 *  - In the backward, an RMSNorm's input gradient whose one reader is the
 *    add joining it to the residual stream's gradient (rmsnorm_dw may run
 *    between them) becomes an rmsnorm_dx that adds it (its third input),
 *    writing the sum where the add did: the gradient is not written and
 *    read back.
 *
 * On the program rather than the graph, after autodiff: the backward is
 * the pair's, and the checks, which read the graph, see the model's own
 * ops at -O0 and -O1 alike. The fused kernels compute what the pair
 * computes (the second op of the stored first result), so -O0 and -O1
 * give the same numbers. */
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

/* The next op after i that is not dead, or -1. */
static int next_live(const tp_ir *ir, int i)
{
    for (int j = i + 1; j < ir->nops; j++)
        if (!ir->ops[j].dead)
            return j;
    return -1;
}

/* Buffer b's elements, when it is a buffer of its own (not a view). */
static int64_t own_elems(const tp_ir *ir, int b) { return ir->bufs[b].alias_of < 0 ? tp_ir_buf_elems(&ir->bufs[b]) : -1; }

/* By alias root: the last live op that reads its storage, or nops where
 * the program hands it out (an output, a parameter's gradient). Fusing
 * changes only what the second op of a pair reads (and what an
 * rmsnorm_dx reads before its add, which reads it too), so one walk before
 * fusing answers for every pair. */
static int *last_reads(const tp_ir *ir)
{
    int *last = tp_xmalloc(((size_t)ir->nbufs + 1) * sizeof *last);
    for (int b = 0; b < ir->nbufs; b++)
        last[b] = ir->bufs[b].output ? ir->nops : -1;
    for (int i = 0; i < ir->nops; i++)
        for (int k = 0; !ir->ops[i].dead && k < ir->ops[i].nin; k++)
            if (ir->ops[i].in[k] >= 0)
                last[tp_ir_alias_root(ir, ir->ops[i].in[k])] = i;
    const int handed[2] = {ir->loss_buf, ir->logits_buf};
    for (int h = 0; h < 2; h++)
        if (handed[h] >= 0)
            last[tp_ir_alias_root(ir, handed[h])] = ir->nops;
    for (int p = 0; ir->grad_buf && p < ir->nparams; p++)
        if (ir->grad_buf[p] >= 0)
            last[tp_ir_alias_root(ir, ir->grad_buf[p])] = ir->nops;
    return last;
}

/* add then rmsnorm of the sum -> add_rmsnorm [sum, norm] */
static bool fuse_add_norm(tp_ir *ir, tp_ir_op *add, tp_ir_op *norm)
{
    if (add->kind != TP_OP_ADD || norm->kind != TP_OP_RMSNORM || norm->in[0] != add->out)
        return false;
    /* sum and norm in buffers of their own, no broadcast in the add */
    const int64_t elems = own_elems(ir, add->out);
    if (elems < 0 || own_elems(ir, norm->out) != elems || tp_ir_buf_elems(&ir->bufs[add->in[0]]) != elems ||
        tp_ir_buf_elems(&ir->bufs[add->in[1]]) != elems)
        return false;
    const int sum = add->out, y = norm->out;
    norm->kind = TP_OP_ADD_RMSNORM;
    norm->in[0] = add->in[0];
    norm->in[1] = add->in[1];
    norm->nin = 2;
    for (int o = 0; o < TP_MAX_OUTS; o++)
        norm->outs[o] = -1;
    norm->outs[0] = sum;
    norm->outs[1] = y;
    return true;
}

/* bias_add then gelu of its result -> bias_gelu [biased or none, gelu] */
static bool fuse_bias_gelu(tp_ir *ir, const int *last_read, int at, tp_ir_op *bias, tp_ir_op *gelu)
{
    if (bias->kind != TP_OP_BIAS_ADD || gelu->kind != TP_OP_GELU || gelu->in[0] != bias->out)
        return false;
    const int64_t elems = own_elems(ir, bias->out);
    if (elems < 0 || own_elems(ir, gelu->out) != elems)
        return false;
    const int h = bias->out, y = gelu->out;
    gelu->kind = TP_OP_BIAS_GELU;
    gelu->in[0] = bias->in[0];
    gelu->bias = bias->bias;
    gelu->m = bias->m;
    gelu->n = bias->n;
    gelu->scale = bias->scale;
    for (int o = 0; o < TP_MAX_OUTS; o++)
        gelu->outs[o] = -1;
    gelu->outs[0] = last_read[h] > at ? h : -1;
    gelu->outs[1] = y;
    return true;
}

/* rmsnorm_dx (at i) whose one reader is add(dx, r) or add(r, dx) (at j):
 * rmsnorm_dx adds r and writes the add's result. Between the two no op
 * may read dx or the sum, or write r or the sum: the sum is written
 * earlier, r read earlier. */
static bool fuse_norm_dx_add(tp_ir *ir, const int *last_read, int i)
{
    tp_ir_op *dx = &ir->ops[i];
    const int d = dx->out;
    if (dx->kind != TP_OP_RMSNORM_DX || dx->nin != 2 || own_elems(ir, d) < 0 || last_read[d] >= ir->nops)
        return false;
    const int j = last_read[d];
    tp_ir_op *add = &ir->ops[j];
    if (j <= i || add->kind != TP_OP_ADD || add->nin != 2 || (add->in[0] == d) == (add->in[1] == d))
        return false;
    const int r = add->in[add->in[0] == d ? 1 : 0], sum = add->out;
    const int64_t elems = own_elems(ir, d);
    if (own_elems(ir, sum) != elems || tp_ir_buf_elems(&ir->bufs[r]) != elems)
        return false;
    const int r_root = tp_ir_alias_root(ir, r);
    if (tp_ir_alias_root(ir, sum) == d || tp_ir_alias_root(ir, sum) == r_root)
        return false;
    for (int k = i + 1; k < j; k++) {
        const tp_ir_op *op = &ir->ops[k];
        if (!op->dead && (tp_ir_op_reads(ir, op, d) || tp_ir_op_reads(ir, op, sum) ||
                          tp_ir_op_writes(ir, op, r_root) || tp_ir_op_writes(ir, op, sum)))
            return false;
    }
    dx->in[2] = r;
    dx->nin = 3;
    dx->out = sum;
    add->dead = true;
    return true;
}

void tp_pass_fuse_pairs(tp_ir *ir)
{
    int *last_read = last_reads(ir);
    for (int i = 0; i < ir->nops; i++) {
        const int j = next_live(ir, i);
        if (ir->ops[i].dead)
            continue;
        if (fuse_norm_dx_add(ir, last_read, i))
            continue;
        if (j >= 0 && (fuse_add_norm(ir, &ir->ops[i], &ir->ops[j]) ||
                       fuse_bias_gelu(ir, last_read, j, &ir->ops[i], &ir->ops[j])))
            ir->ops[i].dead = true;
    }
    free(last_read);
}
