/* program.c: the program's containers (see program.h). */
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

void tp_ir_set_dtype(tp_ir *ir, tp_dtype dtype)
{
    for (int i = 0; i < ir->nbufs; i++)
        if (ir->bufs[i].dtype != TP_I32 && !ir->bufs[i].f32_only)
            ir->bufs[i].dtype = dtype;
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
    memset(ir, 0, sizeof *ir);
}
