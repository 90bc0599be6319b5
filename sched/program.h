/* program.h: what a schedule describes, before it is written: ops and
 * collectives on buffers, per rank.
 *
 * tpcc's lowering pass makes it from the global graph; the schedule
 * writer (write.h) materialises each rank's list from it. Ranks differ only
 * in which slice they hold, so an op carries the per-rank part as a chunk
 * index (the rank itself). Everything here is the format's own vocabulary:
 * names are strings, borrowed from whoever made the program (they must
 * outlive it), so the writer needs nothing of the compiler. */
#ifndef TP_SCHED_PROGRAM_H
#define TP_SCHED_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>
#include "sched/layout.h"
#include "sched/ops.h"

typedef struct tp_ir_buf {
    int rank;                  /* tensor rank */
    int64_t shape[TP_MAX_RANK];/* local shape (identical on every rank: shards are even) */
    tp_dtype dtype;
    char *name;                /* "model.layers.0.self_attn.q_proj.out" */
    int64_t offset;            /* in the activation arena, bytes */
    bool input, output;        /* a model input, or the logits/loss */
    bool segments;             /* the input of each position's document (tpcc --segments) */
    bool f32_only;             /* float32 whatever the dtype: the loss and its per-token pieces,
                                * attention's log-sum-exp */
    int alias_of;              /* >= 0: a view of that buffer (same storage) */
} tp_ir_buf;

typedef struct tp_ir_op {
    tp_op_kind kind;
    int in[TP_MAX_INS], nin;            /* buffer indices; add/mul: in[1] may broadcast over leading dims */
    /* the buffers written: out (-1 for none), or for a kind with several
     * outputs (tp_ops[kind].nout > 1) outs[0 .. nout), -1 where one is not
     * wanted; out is outs[0], so a walk over outs[0 .. nout) sees every op's */
    union {
        int out;
        int outs[TP_MAX_OUTS];
    };
    int weight, bias;          /* parameter indices (tp_ir.params), -1 for none */
    /* FSDP: 1 + the buffer the weight / the bias is read from, a dp_all_gather's
     * output; 0: the weight region (1-based, so that an op made without it reads
     * the region) */
    int weight_from, bias_from;
    int dim, dim2;             /* slice / gather / scatter / all-to-all dims */
    int parts;                 /* TP_OP_SLICE: number of chunks (index = rank) */
    int64_t start, length;     /* TP_OP_NARROW: the range of dim kept */
    int reduce_max;            /* TP_OP_ALL_REDUCE: max instead of sum */
    int64_t m, n, k;           /* matmul sizes; attention: b, s, h (k = head dim) */
    int64_t heads, groups;     /* attention: local query heads, local kv heads */
    int64_t heads_global;      /* attention: query heads of the model (for the report) */
    int64_t vocab_local;       /* embedding / CE: rows held; start = rank * vocab_local */
    int64_t vocab_logical;     /* cross-entropy: columns that are real (padding dropped) */
    int64_t pos_chunk;         /* rope / positions: offset = rank * pos_chunk */
    int64_t rotary;            /* rope: the leading dims of each head it rotates; 0: all */
    bool masked;               /* embedding: zero rows of ids outside the local range */
    bool unit_offset;          /* rmsnorm: scale by (1 + w) (Gemma) */
    bool gelu_tanh;            /* gelu: the tanh approximation */
    bool inverse;              /* rope: rotate by minus the angle (the backward pass) */
    bool scale_in_dtype;       /* scale: the factor rounded to the schedule's dtype first */
    double scale, eps, theta;  /* attention: scale multiplies q k^T */
    double softcap;            /* attention: score cap, 0 for none; softcap: the cap */
    tp_rope_scaling rope;      /* rope: the frequency scaling */
    int64_t elems;             /* collectives: elements of the full tensor */
    /* provenance, borrowed strings */
    const char *module;        /* FQN of the module that ran it ("" for the root), or NULL */
    const char *entry;         /* the plan entry that caused it, or NULL (the model) */
    const char *layer;         /* FQN of the transformer layer it belongs to, or NULL */
    bool implicit;             /* a redistribution DTensor inserts on its own */
    bool recompute;            /* a forward op run again in the backward (activation recomputation) */
    tp_phase phase;            /* forward, backward or the gradients' synchronisation */
    bool dead;                 /* removed by optimisation */
} tp_ir_op;

typedef struct tp_ir_param {
    const char *name;                 /* the checkpoint tensor (canonical for ties), borrowed */
    int rank;
    int64_t shape[2];                 /* global, padded where the model pads */
    int64_t logical[2];               /* as in the checkpoint */
    tp_placement pl;                  /* Replicate or Shard(d) of the parameter */
    int64_t local[2];                 /* local shape */
    /* consecutive ranks holding the same slice (a kv head replicated over
     * tp / kv_heads ranks); 0 or 1: every rank its own. `shape` then counts
     * each replica: the checkpoint's dimension is shape / replicas */
    int64_t replicas;
    /* packed: rank r holds chunk r of each of these ranges of pl.dim, one
     * after another (a fused projection under packed_colwise); 0: one chunk */
    int nsegments;
    int64_t segments[TP_MAX_SEGMENTS];
} tp_ir_param;

typedef struct tp_ir {
    tp_ir_op *ops; int nops, capops;
    tp_ir_buf *bufs; int nbufs, capbufs;
    tp_ir_param *params; int nparams, capparams;
    int64_t world;             /* tp degree (the mesh size) */
    int loss_buf, logits_buf;  /* -1 when absent */
    int label_shift;           /* the loss's labels: tp_graph's label_shift */
    int *grad_buf;             /* per parameter: its gradient's buffer (tpcc --train), or NULL */
    tp_placement logits_pl;    /* how the logits are laid out across ranks */
    int64_t logits_vocab;      /* their real columns as the checker knows them; 0: unknown */
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
/* The buffer whose storage buffer b is: the root of its chain of views. */
int tp_ir_alias_root(const tp_ir *ir, int b);
/* Whether op reads, or writes, the storage of root buffer root. */
bool tp_ir_op_reads(const tp_ir *ir, const tp_ir_op *op, int root);
bool tp_ir_op_writes(const tp_ir *ir, const tp_ir_op *op, int root);
/* An attention's size (d: 0 batch, 1 seq, 2 heads, 3 head_dim): v, the
 * op's own, or where the lowering left it at 0 the query's shape [batch,
 * seq, heads, head_dim]; 0 when neither says. */
int64_t tp_ir_attention_size(const tp_ir *ir, const tp_ir_op *op, int64_t v, int d);
/* Give every floating-point buffer the schedule's element type (lowering
 * records float32; token ids stay int32), and round the factor of every
 * scale op that multiplies by a tensor of that type. Call before tp_memplan. */
void tp_ir_set_dtype(tp_ir *ir, tp_dtype dtype);

#endif /* TP_SCHED_PROGRAM_H */
