/* ops.h: the kinds of op a schedule holds and the element types of its
 * buffers: the vocabulary shared by tpcc's lowering, the schedule file,
 * tprun's executor and every backend. The op kinds, their operands and
 * their attributes are defined once, in sched/ops.def. */
#ifndef TP_SCHED_OPS_H
#define TP_SCHED_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include "sched/rope.h"

typedef enum tp_dtype { TP_F32, TP_BF16, TP_I32 } tp_dtype;

/* Which part of a training step an op belongs to (a forward schedule's
 * ops are all TP_PHASE_FORWARD): the schedule's "phase" key. */
typedef enum tp_phase { TP_PHASE_FORWARD, TP_PHASE_BACKWARD, TP_PHASE_GRAD_SYNC, TP_PHASE_COUNT } tp_phase;
extern const char *const tp_phase_names[TP_PHASE_COUNT];   /* "forward", "backward", "grad_sync" */

/* TP_OP_EMBEDDING, TP_OP_MATMUL, ...: the rows of sched/ops.def. */
typedef enum tp_op_kind {
#define OP(NAME, ...) TP_OP_##NAME,
#include "sched/ops.def"
#undef OP
    TP_OP_COUNT
} tp_op_kind;

/* The type of an op attribute, which says how it is read and stored. */
typedef enum tp_attr_type {
    TP_ATTR_SIZE,      /* int64_t in [0, 2^40]: a size, count or offset */
    TP_ATTR_COUNT,     /* int64_t in [1, 2^40]: a size the executor divides by */
    TP_ATTR_DIM,       /* int in [0, TP_MAX_RANK): a tensor dimension */
    TP_ATTR_CHUNK,     /* int in [0, 2^20]: a chunk index or number of chunks */
    TP_ATTR_REAL,      /* double */
    TP_ATTR_BOOL,      /* bool */
    TP_ATTR_REDUCE,    /* int: "sum" is 0, "max" is 1 */
    TP_ATTR_ROPE_TYPE, /* tp_rope_type: "default", "linear", "dynamic", "llama3" */
} tp_attr_type;

typedef struct tp_op_attr {
    const char *key;           /* in the op's JSON object */
    tp_attr_type type;
    size_t field;              /* offsetof the tr_op field it fills (sched/load.h) */
} tp_op_attr;

/* Whether an op takes a weight, or a bias. */
typedef enum tp_operand { TP_OPERAND_NONE, TP_OPERAND_REQUIRED, TP_OPERAND_OPTIONAL } tp_operand;

/* The most outputs an op kind declares (sched/ops.def's OUTS_FLOAT). */
#define TP_MAX_OUTS 3
/* The most buffers an op kind reads (sched/ops.def's in_max:
 * rope_attention_grad's q, k, v, dy, the forward's output and log-sum-exp,
 * segments and positions). */
#define TP_MAX_INS 8

/* The float operands of a kind that hold f32 whatever the schedule's dtype
 * (sched/ops.def's f32 column), as bits: */
#define TP_F32_IN(i) (1u << (i))     /* in[i] */
#define TP_F32_OUT_AT(o) (1u << (16 + (o)))   /* output o (of TP_MAX_OUTS) */
#define TP_F32_OUT TP_F32_OUT_AT(0)            /* the output, or the first of several */
#define TP_F32_LIKE_IN0 (1u << 20)   /* every float operand, where in[0] holds f32 */

/* An op kind's signature and attributes (a row of sched/ops.def). */
typedef struct tp_op_def {
    bool collective;           /* every rank of a group takes part */
    bool data_parallel;        /* the group is the data-parallel one, not the tensor-parallel one */
    int in_min, in_max;        /* buffers listed in "in" */
    unsigned ids;              /* bit i: in[i] holds int32 (ids, labels, positions); the others floats */
    int nout;                  /* buffers written: 1, or a list of nout ("out": [...]) */
    bool out_ids;              /* writes int32 rather than floats */
    tp_operand weight, bias;
    bool in_place;             /* an output may be exactly an input */
    unsigned f32;              /* TP_F32_*: the operands that hold f32 in a bf16 schedule */
    const tp_op_attr *attrs;   /* in the order tpcc writes them */
    int nattrs;
} tp_op_def;

extern const tp_op_def tp_ops[TP_OP_COUNT];
extern const char *const tp_op_names[TP_OP_COUNT];
bool tp_op_is_collective(tp_op_kind k);
/* A collective over the data-parallel replicas (sharded training state). */
bool tp_op_is_dp_collective(tp_op_kind k);
/* The kind called `name`, or TP_OP_COUNT when there is none. */
tp_op_kind tp_op_kind_named(const char *name);

size_t tp_dtype_size(tp_dtype t);
const char *tp_dtype_name(tp_dtype t);

#endif /* TP_SCHED_OPS_H */
