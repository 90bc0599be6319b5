/* ops.c: names and properties of op kinds and element types (see ops.h),
 * generated from sched/ops.def. */
#include <stdint.h>
#include <string.h>
#include "sched/load.h"      /* tr_op, whose fields the attributes fill */
#include "sched/ops.h"

const char *const tp_op_names[TP_OP_COUNT] = {
#define OP(NAME, name, ...) [TP_OP_##NAME] = #name,
#include "sched/ops.def"
#undef OP
};

/* The words of the table's columns. */
#define COMPUTE false, false
#define COLLECTIVE true, false
#define DP_COLLECTIVE true, true
#define IDS(i) (1u << (i))
#define NO_IDS 0u
#define OUT_FLOAT 1, false
#define OUT_IDS 1, true
#define OUTS_FLOAT(n) n, false
#define NONE TP_OPERAND_NONE
#define REQUIRED TP_OPERAND_REQUIRED
#define OPTIONAL TP_OPERAND_OPTIONAL
#define IN_PLACE true
#define APART false
#define NO_F32 0u
#define F32_IN(i) TP_F32_IN(i)
#define F32_OUT TP_F32_OUT
#define F32_OUT_AT(o) TP_F32_OUT_AT(o)
#define F32_LIKE_IN0 TP_F32_LIKE_IN0
#define RANKED ATTR          /* to the reader, a rank-dependent value is like any other */

/* The C type each attribute type is stored in: the reader writes the
 * field through its offset, so a row naming a field of another type must
 * not compile. */
#define STORED_SIZE int64_t
#define STORED_COUNT int64_t
#define STORED_DIM int
#define STORED_CHUNK int
#define STORED_REAL double
#define STORED_BOOL bool
#define STORED_REDUCE int
#define STORED_ROPE_TYPE tp_rope_type
#define ATTR(key, type, field, value) \
    _Static_assert(_Generic(((tr_op *)0)->field, STORED_##type: 1, default: 0), "tr_op." #field " is not a " #type);
#define NOUT(...) NOUT_(__VA_ARGS__)   /* the output count of the out column's words */
#define NOUT_(n, ids) (n)
#define TR_OP_INPUTS ((int)(sizeof ((tr_op *)0)->in / sizeof *((tr_op *)0)->in))
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    attrs _Static_assert((in_max) <= TR_OP_INPUTS, #name " reads more buffers than tr_op holds");                \
    _Static_assert(NOUT(out) <= TP_MAX_OUTS, #name " writes more buffers than tr_op holds");                     \
    _Static_assert(((f32) & (TP_F32_OUT - 1)) >> (in_max) == 0, #name " keeps f32 an input it does not read"); \
    _Static_assert(((f32) >> 16 & 0xfu) >> NOUT(out) == 0, #name " keeps f32 an output it does not write");
#include "sched/ops.def"
#undef OP
#undef ATTR

/* Each kind's attributes, ended by a NULL key so that a kind without any
 * still has an array. */
#define ATTR(key, type, field, value) {#key, TP_ATTR_##type, offsetof(tr_op, field)},
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    static const tp_op_attr name##_attrs[] = {attrs {NULL, 0, 0}};
#include "sched/ops.def"
#undef OP
#undef ATTR

const tp_op_def tp_ops[TP_OP_COUNT] = {
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    [TP_OP_##NAME] = {role, in_min, in_max, ids, out, weight, bias, place, f32, name##_attrs,                    \
                      (int)(sizeof name##_attrs / sizeof *name##_attrs) - 1},
#include "sched/ops.def"
#undef OP
};

const char *const tp_phase_names[TP_PHASE_COUNT] = {
    [TP_PHASE_FORWARD] = "forward", [TP_PHASE_BACKWARD] = "backward", [TP_PHASE_GRAD_SYNC] = "grad_sync"};

bool tp_op_is_collective(tp_op_kind k) { return tp_ops[k].collective; }

bool tp_op_is_dp_collective(tp_op_kind k) { return tp_ops[k].data_parallel; }

tp_op_kind tp_op_kind_named(const char *name)
{
    int k = 0;
    while (k < TP_OP_COUNT && strcmp(tp_op_names[k], name))
        k++;
    return (tp_op_kind)k;
}

size_t tp_dtype_size(tp_dtype t) { return t == TP_BF16 ? 2 : 4; }

const char *tp_dtype_name(tp_dtype t)
{
    static const char *const names[] = {[TP_F32] = "f32", [TP_BF16] = "bf16", [TP_I32] = "i32"};
    return names[t];
}
