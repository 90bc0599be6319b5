/* zero.h: ZeRO-1 (a schedule with "dp_shard": "optimizer"): the
 * optimizer's state held in 1/dp slices over the data-parallel replicas.
 *
 * Each weight's local elements split into dp runs (sched/dp_shard.h), run
 * d on dp rank d. A step reduce-scatters each gradient over dp (the
 * replicas' sum of run d arrives on rank d, then / dp: the mean over the
 * global batch, as the replicated all-reduce gives it), AdamW updates each
 * rank's runs only (its fp32 masters and moments exist for those only),
 * and the updated weights are all-gathered back into every replica's
 * weight region. The traffic is a replicated all-reduce's: a ring
 * all-reduce is a reduce-scatter and an all-gather.
 *
 * A weight that divides into dp runs has its reduced run written back in
 * its gradient's place (the rest of that buffer is then stale: nothing
 * reads it); one that does not is padded: its collectives go through
 * `pad`, dp runs of the widest weight, whose padding carries values nobody
 * reads, and its reduced run lives in `grads`.
 *
 * ZeRO-2 ("dp_shard": "gradients") is the same but for the reduction: the
 * schedule's own dp_reduce_scatter ops leave each gradient as its run
 * (outputs.grads), the whole gradient freed in the backward already.
 * FSDP ("parameters") keeps only the runs of the weights too (the
 * executor's weights are the runs: sched/load.h's stored_offset), which
 * the schedule's dp_all_gather ops gather where the model reads them: the
 * updated runs are never gathered here. */
#ifndef TPRUN_TRAIN_ZERO_H
#define TPRUN_TRAIN_ZERO_H

#include <stdbool.h>
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"

typedef struct tr_zero {
    tr_exec *x;
    tp_comm *dp;         /* the replicas of this rank's tensor-parallel slice */
    bool scheduled;      /* ZeRO-2, FSDP: the schedule reduces the gradients into their runs */
    bool fsdp;           /* FSDP: the executor keeps only each weight's run */
    int64_t *offset;     /* per weight: its run's offset in the shard region */
    int64_t elems;       /* the shard region: every weight's run, end to end */
    int64_t widest;      /* the longest run */
    int64_t *padded_at;  /* per weight: its reduced run's offset in `grads`; -1: in its gradient's place */
    int64_t padded;      /* elements of `grads`: the padded weights' runs */
    void *pad;           /* backend memory: dp runs of the widest, fp32 */
    void *tail;          /* backend memory: one run of the widest, fp32 */
    void *grads;         /* backend memory: the padded weights' reduced runs (the gradients' dtype) */
} tr_zero;

/* The runs of every weight of x's schedule over the dp group. Returns 0,
 * or -1 with a message (backend memory). */
int tr_zero_init(tr_zero *z, tr_exec *x, tp_comm *dp, char *err, size_t errlen);
void tr_zero_free(tr_zero *z);

/* Weight w's run on this rank: its first local element and how many
 * elements it really holds (0 for a run past a short weight's end). */
int64_t tr_zero_first(const tr_zero *z, int w);
int64_t tr_zero_held(const tr_zero *z, int w);

/* This rank's run of weight w's reduced gradient. */
float *tr_zero_grad(const tr_zero *z, int w);

/* This rank's run of weight w as the executor stores it (the weights'
 * dtype): inside the whole local slice, or with FSDP all there is. */
void *tr_zero_weight_run(const tr_zero *z, int w);

/* Collective over dp: every gradient reduce-scattered into its run
 * (tr_zero_grad) and divided by dp. ZeRO-1 only: ZeRO-2's schedule has
 * done it. */
int tr_zero_reduce_grads(tr_zero *z, char *err, size_t errlen);

/* Collective over dp: every weight's updated runs gathered into the
 * weight region of every replica (not with FSDP, whose schedule gathers
 * them where the model reads them). */
int tr_zero_gather_weights(tr_zero *z, char *err, size_t errlen);

/* Collective over dp: weight w's reduced gradient, its runs gathered, as
 * float32 into `host` (its local elements; --grads-out writes those). */
int tr_zero_grad_to_host(tr_zero *z, int w, float *host, char *err, size_t errlen);

/* Collective over dp: weight w's runs of fp32 state held in runs
 * (`shards`, backend memory) gathered into `host`, its local elements:
 * one weight at a time, so that saving never holds a whole region. */
int tr_zero_unshard_weight(tr_zero *z, const float *shards, int w, float *host, char *err, size_t errlen);

/* Collective over dp: FSDP's fp32 weight w, its stored runs gathered into
 * `host` (its local elements). */
int tr_zero_unshard_stored(tr_zero *z, int w, float *host, char *err, size_t errlen);

/* This rank's runs of fp32 state laid out like the weight region (`full`:
 * host memory when from_host, else backend memory) into `shards`. */
void tr_zero_take_runs(const tr_zero *z, const float *full, float *shards, bool from_host);

#endif /* TPRUN_TRAIN_ZERO_H */
