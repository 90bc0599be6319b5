/* dp_shard.h: how the data-parallel replicas of a training schedule hold
 * its state (a plan's train { shard = ... }, a schedule's "dp_shard"): the
 * ZeRO stages, by what each rank keeps only a 1/dp slice of.
 *
 *   none        every replica holds everything; gradients all-reduced
 *   optimizer   ZeRO-1: fp32 master weights and AdamW's two moments in
 *               slices; gradients reduce-scattered, each rank updates its
 *               slice, the updated weights all-gathered
 *   gradients   ZeRO-2: the gradients too
 *   parameters  ZeRO-3, FSDP: the parameters too
 *
 * The slicing is one rule, here, for tpcc --report and tprun alike: each
 * weight's local elements (the rank's tensor-parallel slice, flattened)
 * split into dp runs of tp_dp_shard_elems elements, run d on dp rank d, the
 * last runs short or empty; a rank's runs of every weight lie end to end
 * in its shard region. Plain C, nothing to link but the names. */
#ifndef TP_SCHED_DP_SHARD_H
#define TP_SCHED_DP_SHARD_H

#include <stdint.h>
#include "sched/workspace.h"

typedef enum {
    TP_DP_SHARD_NONE,
    TP_DP_SHARD_OPTIMIZER,
    TP_DP_SHARD_GRADIENTS,
    TP_DP_SHARD_PARAMETERS,
    TP_DP_SHARD_COUNT
} tp_dp_shard;

extern const char *const tp_dp_shard_names[TP_DP_SHARD_COUNT];

/* The mode a name spells, or -1. */
int tp_dp_shard_parse(const char *name);

/* Elements of one dp rank's run of a weight of n local elements: an equal
 * share rounded up to the weight region's alignment, so every run starts
 * aligned as the weights do. */
static inline int64_t tp_dp_shard_elems(int64_t n, int64_t dp)
{
    return tp_weight_region_offset((n + dp - 1) / dp);
}

/* Whether a weight of n local elements is padded to dp runs (its last
 * runs short or empty): its reduced gradient's run then needs a buffer of
 * its own, where an unpadded weight's run stays in its gradient's place. */
static inline int tp_dp_shard_padded(int64_t n, int64_t dp) { return tp_dp_shard_elems(n, dp) * dp != n; }

/* Elements of the reshard staging a dp_reduce_scatter of such a weight's
 * gradient takes: dp runs where the weight is padded (its gradient is
 * copied there, zeros after it), none where the runs tile it. */
static inline int64_t tp_dp_shard_staging_elems(int64_t n, int64_t dp)
{
    return tp_dp_shard_padded(n, dp) ? dp * tp_dp_shard_elems(n, dp) : 0;
}

/* Of that run, the elements rank d really holds (the rest is padding). */
static inline int64_t tp_dp_shard_held(int64_t n, int64_t dp, int64_t d)
{
    int64_t c = tp_dp_shard_elems(n, dp), left = n - d * c;
    return left <= 0 ? 0 : left < c ? left : c;
}

#endif /* TP_SCHED_DP_SHARD_H */
