/* train_block.h: a plan's train { } block: what the training script does
 * around the model that neither the model nor the styles say.
 *
 *   train {
 *       sampler_dims = ("dp",)   # DistributedSampler(num_replicas=mesh["dp"].size(),
 *                                #                    rank=mesh["dp"].get_local_rank())
 *       max_grad_norm = 1.0      # clip_grad_norm_(model.parameters(), 1.0) after backward()
 *       shard = "optimizer"      # ZeRO-1 over the data-parallel dimensions
 *       recompute = "full"       # torchtitan's apply_ac, Megatron's --recompute-granularity
 *       lr = 3e-4                # AdamW(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
 *       betas = (0.9, 0.95)
 *       schedule = "wsd"         # get_wsd_schedule(num_warmup_steps=100, num_decay_steps=200)
 *       warmup_steps = 100
 *       decay_steps = 200
 *   }
 *
 * sampler_dims: the mesh dimensions the data sampler gives ranks different
 * batches over (a name or a tuple of names); without it, the data-parallel
 * dimensions, as tprun feeds them. max_grad_norm (the max_norm of
 * torch.nn.utils.clip_grad_norm_ over model.parameters(), 0 for none) and
 * the optimizer's and the schedule's settings are train_values.h's: they
 * go into the schedule as tprun's defaults.
 * shard: what the data-parallel replicas hold in 1/dp slices
 * (sched/dp_shard.h: "none", the default, "optimizer", "gradients",
 * "parameters"); it becomes the schedule's dp_shard. A data-parallel mesh
 * dimension named as a sharded one ("fsdp", "dp_shard", ...) with nothing
 * sharded is an error: the plan would silently replicate.
 * recompute: activation checkpointing of the transformer layers, "none"
 * (the default), "full" or "selective" (passes/recompute.c says what each
 * keeps); tpcc --recompute overrides it. */
#ifndef TPCC_TRAIN_BLOCK_H
#define TPCC_TRAIN_BLOCK_H

#include <stdbool.h>
#include "grammar/ast.h"
#include "compiler/front/config.h"
#include "sched/dp_shard.h"
#include "sched/layout.h"
#include "sched/train_settings.h"

/* What a training step keeps of each transformer layer's forward for its
 * backward, and recomputes in the backward instead (passes/recompute.c). */
typedef enum tp_recompute {
    TP_RECOMPUTE_NONE,         /* everything the backward reads */
    TP_RECOMPUTE_FULL,         /* the layer's input only */
    TP_RECOMPUTE_SELECTIVE,    /* the layer's input and its matmuls' outputs */
    TP_RECOMPUTE_COUNT
} tp_recompute;
extern const char *const tp_recompute_names[TP_RECOMPUTE_COUNT];   /* "none", "full", "selective" */

/* The mode a name means; false for none of tp_recompute_names. */
bool tp_recompute_parse(const char *name, tp_recompute *out);

typedef struct tp_train_spec {
    const tp_node *block;                   /* NULL: the plan has none */
    const tp_node *sampler;                 /* the sampler_dims value; NULL: not given */
    bool sampler_over[TP_MAX_MESH_DIMS];    /* per mesh dimension: batches differ along it */
    tp_train_values values;                 /* the optimizer's and the schedule's keys (train_values.h) */
    const tp_node *value_at[TP_TF_COUNT];   /* where each is written (given, or refused); NULL: absent */
    const tp_node *shard;                   /* the shard value; NULL: not given */
    tp_dp_shard shard_mode;                 /* TP_DP_SHARD_NONE unless given */
    tp_recompute recompute;                 /* TP_RECOMPUTE_NONE when not given */
} tp_train_spec;

struct tp_plan;

/* Read the plan's train { } block (at most one) into p->train; errors for
 * an unknown key, a malformed value or a dimension the mesh lacks. */
void tp_train_block_read(struct tp_plan *p, const tp_node *file, tp_config *c);

/* With --train: a data-parallel dimension named as a sharded one
 * ("fsdp", "dp_shard", ...) in a plan that shards nothing (no shard key)
 * is an error. A forward compile refuses the dimension already. */
void tp_train_check_shard_names(const struct tp_plan *p, tp_diags *d);

/* A train { } block in a model file is an error: it describes a plan's
 * training script. */
void tp_train_block_reject_in_model(const tp_node *model_file, tp_diags *d);

#endif /* TPCC_TRAIN_BLOCK_H */
