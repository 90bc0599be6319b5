/* ops.h: the kinds of op a schedule holds and the element types of its
 * buffers: the vocabulary shared by tpcc's lowering, the schedule file,
 * tprun's executor and every backend. */
#ifndef TP_SCHED_OPS_H
#define TP_SCHED_OPS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum tp_dtype { TP_F32, TP_BF16, TP_I32 } tp_dtype;

/* ORDER OP: keep tp_op_names in ops.c in the same order. */
typedef enum tp_op_kind {
    TP_OP_EMBEDDING,      /* out[b,s,:] = W[ids[b,s] - vocab_start] (0 outside [vocab_start, +rows) when masked) */
    TP_OP_MATMUL,         /* out[m,n] = x[m,k] . W[n,k]^T                        (nn.Linear) */
    TP_OP_BIAS_ADD,       /* out[m,n] = x[m,n] + scale * b[n] */
    TP_OP_RMSNORM,        /* out = x / sqrt(mean(x^2) + eps) * w   over the last dim */
    TP_OP_LAYERNORM,      /* out = (x - mean) / sqrt(var + eps) * w + b */
    TP_OP_ROPE,           /* rotate-half RoPE on [b,s,h,d], positions pos_offset + s */
    TP_OP_ATTENTION,      /* causal softmax(q k^T / sqrt(d)) v on [b,s,h,d], GQA */
    TP_OP_SILU, TP_OP_GELU, TP_OP_RELU,
    TP_OP_ADD, TP_OP_MUL, /* elementwise, same shape */
    TP_OP_SCALE,          /* out = scale * x (R -> P is a divide by tp) */
    TP_OP_SLICE,          /* out = chunk `index` of `parts` of x along dim (R -> S) */
    TP_OP_POSITIONS,      /* out[b,s] = pos_offset + s (int) */
    TP_OP_CROSS_ENTROPY,  /* loss = mean CE(logits[:, :-1, :vocab], labels[:, 1:]), -100 ignored */
    TP_OP_CE_MAX,         /* vocab-parallel CE: out[b,s] = max over the local vocab columns */
    TP_OP_CE_SUMEXP,      /* out[b,s] = sum exp(logits - max) over local columns (in[1] = max) */
    TP_OP_CE_TARGET,      /* out[b,s] = logits[b,s,label - vocab_start] if in range else 0 */
    TP_OP_CE_LOSS,        /* loss = mean(log(sumexp) + max - target), shifted, -100 ignored */
    TP_OP_ALL_GATHER,     /* along dim */
    TP_OP_REDUCE_SCATTER, /* sum, scattered along dim */
    TP_OP_ALL_REDUCE,     /* sum or max */
    TP_OP_ALL_TO_ALL,     /* from Shard(dim) to Shard(dim2) */
    TP_OP_COUNT
} tp_op_kind;

extern const char *const tp_op_names[TP_OP_COUNT];
bool tp_op_is_collective(tp_op_kind k);

size_t tp_dtype_size(tp_dtype t);
const char *tp_dtype_name(tp_dtype t);

#endif /* TP_SCHED_OPS_H */
