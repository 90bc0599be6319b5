/* program.c: the program's containers (see program.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "sched/program.h"
#include "util/xalloc.h"

int64_t tp_ir_buf_elems(const tp_ir_buf *b)
{
    int64_t n = 1;
    for (int i = 0; i < b->rank; i++)
        n *= b->shape[i];
    return n;
}

int tp_ir_alias_root(const tp_ir *ir, int b)
{
    while (ir->bufs[b].alias_of >= 0)
        b = ir->bufs[b].alias_of;
    return b;
}

bool tp_ir_op_reads(const tp_ir *ir, const tp_ir_op *op, int root)
{
    for (int k = 0; k < op->nin; k++)
        if (op->in[k] >= 0 && tp_ir_alias_root(ir, op->in[k]) == root)
            return true;
    return false;
}

bool tp_ir_op_writes(const tp_ir *ir, const tp_ir_op *op, int root)
{
    for (int o = 0; o < tp_ops[op->kind].nout; o++)
        if (op->outs[o] >= 0 && tp_ir_alias_root(ir, op->outs[o]) == root)
            return true;
    return false;
}

/* v as the nearest value of dtype (fp32, or bf16 rounded to nearest even
 * from fp32, as torch casts). */
static double round_to_dtype(double v, tp_dtype dtype)
{
    float f = (float)v;
    if (dtype != TP_BF16 || !isfinite(f))
        return f;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

void tp_ir_set_dtype(tp_ir *ir, tp_dtype dtype)
{
    for (int i = 0; i < ir->nbufs; i++)
        if (ir->bufs[i].dtype != TP_I32 && !ir->bufs[i].f32_only)
            ir->bufs[i].dtype = dtype;
    for (int i = 0; i < ir->nops; i++)
        if (ir->ops[i].scale_in_dtype)
            ir->ops[i].scale = round_to_dtype(ir->ops[i].scale, dtype);
}

int64_t tp_ir_attention_size(const tp_ir *ir, const tp_ir_op *op, int64_t v, int d)
{
    if (v > 0)
        return v;
    const tp_ir_buf *q = op->nin > 0 ? &ir->bufs[op->in[0]] : NULL;
    return q && q->rank == 4 ? q->shape[d] : 0;
}

int tp_ir_add_buf(tp_ir *ir, const tp_ir_buf *b)
{
    ir->bufs = tp_xgrow(ir->bufs, ir->nbufs, &ir->capbufs, sizeof *ir->bufs, 1024);
    ir->bufs[ir->nbufs] = *b;
    return ir->nbufs++;
}

int tp_ir_add_op(tp_ir *ir, const tp_ir_op *op)
{
    ir->ops = tp_xgrow(ir->ops, ir->nops, &ir->capops, sizeof *ir->ops, 1024);
    ir->ops[ir->nops] = *op;
    return ir->nops++;
}

void tp_ir_free(tp_ir *ir)
{
    for (int i = 0; i < ir->nbufs; i++)
        free(ir->bufs[i].name);
    free(ir->bufs);
    free(ir->ops);
    free(ir->params);
    free(ir->grad_buf);
    memset(ir, 0, sizeof *ir);
}
