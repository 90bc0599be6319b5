/* ops.c: names and properties of op kinds and element types (see ops.h). */
#include "sched/ops.h"

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

