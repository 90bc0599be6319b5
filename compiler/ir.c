/* ir.c: the lowered program's containers (see ir.h). */
#include <stdlib.h>
#include <string.h>
#include "ir.h"
#include "xalloc.h"

/* ORDER OP */
const char *const tp_op_names[TP_OP_COUNT] = {
    "embedding", "matmul", "bias_add", "rmsnorm", "layernorm", "rope", "attention",
    "silu", "gelu", "relu", "add", "mul", "scale", "slice", "positions", "cross_entropy",
    "ce_max", "ce_sumexp", "ce_target", "ce_loss",
    "all_gather", "reduce_scatter", "all_reduce", "all_to_all",
};
_Static_assert(sizeof tp_op_names / sizeof *tp_op_names == TP_OP_COUNT, "tp_op_names out of step with tp_op_kind");

bool tp_op_is_collective(tp_op_kind k)
{
    return k == TP_OP_ALL_GATHER || k == TP_OP_REDUCE_SCATTER || k == TP_OP_ALL_REDUCE || k == TP_OP_ALL_TO_ALL;
}

size_t tp_dtype_size(tp_dtype t) { return t == TP_BF16 ? 2 : 4; }

const char *tp_dtype_name(tp_dtype t)
{
    static const char *const names[] = {[TP_F32] = "f32", [TP_BF16] = "bf16", [TP_I32] = "i32"};
    return names[t];
}

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
    if (ir->nbufs == ir->capbufs) {
        ir->capbufs = ir->capbufs ? 2 * ir->capbufs : 1024;
        ir->bufs = tp_xreallocarray(ir->bufs, (size_t)ir->capbufs, sizeof *ir->bufs);
    }
    ir->bufs[ir->nbufs] = *b;
    return ir->nbufs++;
}

int tp_ir_add_op(tp_ir *ir, const tp_ir_op *op)
{
    if (ir->nops == ir->capops) {
        ir->capops = ir->capops ? 2 * ir->capops : 1024;
        ir->ops = tp_xreallocarray(ir->ops, (size_t)ir->capops, sizeof *ir->ops);
    }
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
