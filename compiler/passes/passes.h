/* passes.h: from the checked global graph to the per-rank program a
 * schedule describes. tp_passes_run applies them in order; each pass is
 * its own file. */
#ifndef TP_PASSES_PASSES_H
#define TP_PASSES_PASSES_H

#include <stdbool.h>
#include "compiler/ir/graph.h"
#include "compiler/plan/train_block.h"
#include "sched/dp_shard.h"
#include "sched/program.h"

typedef struct tp_passes_opts {
    bool optimize;       /* -O1: merge redistributions of a tensor to one layout, drop undone ones;
                          * fuse silu(x) * y and add + rmsnorm; reduce each gradient's partial
                          * shares once */
    tp_dtype dtype;      /* element type of the schedule's floating-point buffers */
    bool train;          /* --train: the backward pass and every weight's gradient */
    tp_recompute recompute;  /* --train: what each layer's backward recomputes of its forward */
    int64_t data_parallel;   /* --train: the replicas of the tp group (1: none) */
    tp_dp_shard dp_shard;    /* --train: what the replicas hold in slices (sched/dp_shard.h) */
    bool segments;           /* --segments: attention within documents, positions by document */
} tp_passes_opts;

/* Why the backward pass could not be derived: the forward node it was
 * differentiating (-1: none in particular) and what is missing. */
typedef struct tp_autodiff_error {
    int node;
    bool segments;       /* the segments pass refused the model, not the backward */
    bool unsupported;    /* what tpcc cannot differentiate yet, not a model without a gradient */
    char message[400];
} tp_autodiff_error;

/* merge.c: -O1. Marks merged redistribution nodes removed and redirects
 * their results to the kept ones. */
void tp_pass_merge(tp_graph *g);
/* fuse.c: -O1, after merge. A mul of a silu's result (either operand) and
 * a tensor of its size, the silu's only reader, becomes one silu_mul of
 * the silu's input; the silu is left to the dead-code pass. Runs before
 * autodiff, so the backward is silu_mul's own (silu_mul_grad). */
void tp_pass_fuse(tp_graph *g);
/* attention_stats.c: --train, on the lowered program. Each attention
 * whose gradient the program computes writes its log-sum-exp (out[1], a
 * new f32 [batch, heads, seq] buffer), which the attention_grad reads
 * after q, k, v, dy and the attention's output (autodiff's), so the
 * backward takes the softmax from the forward instead of recomputing its
 * statistics. Returns 0, or -1 with err filled (tpcc's own error). */
int tp_pass_attention_stats(tp_ir *ir, char *err, size_t errlen);
/* fuse_pairs.c: -O1, on the lowered program. An op whose next op reads
 * its result becomes, with it, one fused op, and is marked dead: an add
 * and the RMSNorm of the sum one add_rmsnorm writing both results; a bias
 * add and the gelu of its result one bias_gelu, which writes the biased
 * value too where a later op reads it. */
void tp_pass_fuse_pairs(tp_ir *ir);
/* fuse_rope.c: -O1, on the lowered program after --segments. The rope ops
 * of an attention's q and k go into the attention (rope_attention), and
 * their inverses into its gradient (rope_attention_grad), where nothing
 * else reads the rotated q and k or their gradients. */
void tp_pass_fuse_rope(tp_ir *ir);
/* dce.c: marks nodes whose results nobody reads dead (op.dead). */
void tp_pass_dce(tp_graph *g);
/* autodiff.c: --train. Appends the backward to the graph (the loss's
 * gradient, then every node's in reverse, each layout change's
 * conjugate collective) and sets g->param_grad. With merge (-O1), every
 * gradient's partial shares are reduced once; without, where PyTorch
 * reduces them (one all-reduce per module whose hook labelled a plain
 * tensor). Returns 0, or -1 with *err filled. */
int tp_pass_autodiff(tp_graph *g, bool merge, tp_autodiff_error *err);
/* recompute.c: --train, after autodiff. Keeps of each transformer
 * layer's forward what `mode` says (the layer's input; selective: its
 * matmuls' outputs too) and clones the forward nodes that compute the rest
 * of what the backward reads into the backward, before the layer's first
 * backward node that reads them, marked recompute; the backward reads the
 * clones' values. TP_RECOMPUTE_NONE changes nothing. */
void tp_pass_recompute(tp_graph *g, tp_recompute mode);
/* zero.c: --train with data_parallel replicas sharding their gradients
 * (ZeRO-2: mode TP_DP_SHARD_GRADIENTS) or their parameters too (FSDP:
 * TP_DP_SHARD_PARAMETERS). After the last op that touches a weight's
 * gradient, a dp_reduce_scatter reduces it into the rank's run
 * (sched/dp_shard.h), a new buffer that becomes the weight's gradient
 * (ir->grad_buf) and output; the whole gradient stops being an output.
 * With FSDP, a dp_all_gather of each weight into a buffer before its first
 * reader in the forward and again in the backward (once for a weight
 * outside the layers), its readers reading it there (weight_from,
 * bias_from). */
void tp_pass_zero(tp_ir *ir, int64_t dp, tp_dp_shard mode);
/* segments.c: --segments. A segments input (i32 [batch, seq]: each
 * position's document, -1 for padding) that every attention and attention
 * gradient reads, and every positions op; every rope reads the positions
 * by document that a positions op put first in the program computes.
 * Returns 0, or -1 with err filled when the model cannot take them. */
int tp_pass_segments(tp_ir *ir, char *err, size_t errlen);
/* lower.c: the per-rank program: one buffer per value (local shapes), a
 * weight table in order of first use, the live and dead nodes as ops. */
void tp_pass_lower(const tp_graph *g, tp_ir *out);

/* The whole pipeline: merge and fuse (-O1), dead code, the backward and
 * its recomputation (when training), lower, the pairs fused (-O1), the
 * data-parallel reduce-scatters of sharded gradients, the segments input
 * (--segments), the element type,
 * the memory plan (memplan.h). `out`
 * is zeroed first. Returns 0, or -1 when the backward cannot be derived
 * or the segments not taken (*err says why; `out` is then empty). */
int tp_passes_run(tp_graph *g, const tp_passes_opts *opts, tp_ir *out, tp_autodiff_error *err);

#endif /* TP_PASSES_PASSES_H */
