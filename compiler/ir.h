/* ir.h: the lowered program — ops and collectives on buffers, per rank.
 *
 * The symbolic forward pass (interp.c) records one SPMD program while it
 * checks the plan: every op, every layout change, each on buffers with
 * local shapes. Ranks differ only in which slice they hold, so an op
 * carries the per-rank part as a chunk index (the rank itself) and the
 * schedule writer materialises each rank's list. */
#ifndef TPCC_IR_H
#define TPCC_IR_H

#include <stdbool.h>
#include <stdint.h>
#include "layout.h"

struct tp_module;
struct tp_style;
struct tp_param;

typedef enum tp_dtype { TP_F32, TP_BF16, TP_I32 } tp_dtype;

/* ORDER OP: keep tp_op_names in ir.c in the same order. */
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

typedef struct tp_ir_buf {
    int rank;                  /* tensor rank */
    int64_t shape[TP_MAX_RANK];/* local shape (identical on every rank: shards are even) */
    tp_dtype dtype;
    char *name;                /* "model.layers.0.self_attn.q_proj.out" */
    int64_t offset;            /* in the activation arena, bytes */
    bool input, output;        /* a model input, or the logits/loss */
    bool f32_only;             /* the loss and its per-token pieces: float32 whatever the dtype */
    int alias_of;              /* >= 0: a view of that buffer (same storage) */
} tp_ir_buf;

typedef struct tp_ir_op {
    tp_op_kind kind;
    int in[4], nin;            /* buffer indices; add/mul: in[1] may broadcast over leading dims */
    int out;                   /* buffer index, -1 for none */
    int weight, bias;          /* parameter indices (tp_ir.params), -1 for none */
    int dim, dim2;             /* slice / gather / scatter / all-to-all dims */
    int parts;                 /* TP_OP_SLICE: number of chunks (index = rank) */
    int reduce_max;            /* TP_OP_ALL_REDUCE: max instead of sum */
    int64_t m, n, k;           /* matmul sizes; attention: b, s, h (k = head dim) */
    int64_t heads, groups;     /* attention: local query heads, local kv heads */
    int64_t heads_global;      /* attention: query heads of the model (for the report) */
    int64_t vocab_local;       /* embedding / CE: rows held; start = rank * vocab_local */
    int64_t vocab_logical;     /* cross-entropy: columns that are real (padding dropped) */
    int64_t pos_chunk;         /* rope / positions: offset = rank * pos_chunk */
    bool masked;               /* embedding: zero rows of ids outside the local range */
    double scale, eps, theta;
    int64_t elems;             /* collectives: elements of the full tensor */
    const struct tp_module *module;   /* provenance */
    const struct tp_style *entry;     /* the plan entry that caused it (NULL: the model) */
    bool implicit;             /* a redistribution DTensor inserts on its own */
    bool dead;                 /* removed by optimisation */
} tp_ir_op;

typedef struct tp_ir_param {
    const struct tp_param *param;     /* the checkpoint tensor (canonical for ties) */
    tp_placement pl;                  /* Replicate or Shard(d) of the parameter */
    int64_t local[2];                 /* local shape */
} tp_ir_param;

typedef struct tp_ir {
    tp_ir_op *ops; int nops, capops;
    tp_ir_buf *bufs; int nbufs, capbufs;
    tp_ir_param *params; int nparams, capparams;
    int64_t world;             /* tp degree (the mesh size) */
    int loss_buf, logits_buf;  /* -1 when absent */
    tp_placement logits_pl;    /* how the logits are laid out across ranks */
    int64_t arena_bytes;       /* peak of the activation arena */
    int64_t layer_input_elems; /* elements of a transformer layer's input (b*s*h), 0 if none */
    int layer_input_rank;
    int64_t layer_input_shape[TP_MAX_RANK];
    int nlayers;               /* modules applied by the largest repeat() list */
} tp_ir;

void tp_ir_free(tp_ir *ir);
int tp_ir_add_buf(tp_ir *ir, const tp_ir_buf *b);
int tp_ir_add_op(tp_ir *ir, const tp_ir_op *op);
int64_t tp_ir_buf_elems(const tp_ir_buf *b);
/* Give every floating-point buffer the schedule's element type (lowering
 * records float32; token ids stay int32). Call before tp_memplan. */
void tp_ir_set_dtype(tp_ir *ir, tp_dtype dtype);
size_t tp_dtype_size(tp_dtype t);
const char *tp_dtype_name(tp_dtype t);

#endif /* TPCC_IR_H */
