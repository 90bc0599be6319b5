/* fuse_norm.c: -O1 on the lowered program: a residual add followed at once
 * by the RMSNorm of its result (every decoder layer's norms but the first,
 * and the final norm) becomes one add_rmsnorm writing both results: the
 * sum, which the residual stream and the backward go on reading, and its
 * norm, without reading the sum back. On the program rather than the
 * graph, after autodiff: the backward is the pair's, and the checks, which
 * read the graph, see the model's own ops at -O0 and -O1 alike. The fused
 * kernels compute what the pair computes (the norm of the stored sum), so
 * -O0 and -O1 give the same numbers. */
#include "compiler/passes/passes.h"

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

void tp_pass_fuse_add_norm(tp_ir *ir)
{
    for (int i = 0; i < ir->nops; i++) {
        tp_ir_op *add = &ir->ops[i];
        const int j = next_live(ir, i);
        if (add->dead || add->kind != TP_OP_ADD || j < 0)
            continue;
        tp_ir_op *norm = &ir->ops[j];
        if (norm->kind != TP_OP_RMSNORM || norm->in[0] != add->out)
            continue;
        /* sum and norm in buffers of their own, no broadcast in the add */
        const int64_t elems = own_elems(ir, add->out);
        if (elems < 0 || own_elems(ir, norm->out) != elems || tp_ir_buf_elems(&ir->bufs[add->in[0]]) != elems ||
            tp_ir_buf_elems(&ir->bufs[add->in[1]]) != elems)
            continue;
        const int sum = add->out, y = norm->out;
        norm->kind = TP_OP_ADD_RMSNORM;
        norm->in[0] = add->in[0];
        norm->in[1] = add->in[1];
        norm->nin = 2;
        for (int o = 0; o < TP_MAX_OUTS; o++)
            norm->outs[o] = -1;
        norm->outs[0] = sum;
        norm->outs[1] = y;
        add->dead = true;
    }
}
