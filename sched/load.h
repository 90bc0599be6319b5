/* sched/load.h: reading a .sched file (docs/schedule.md) for one rank,
 * with every field the executor relies on validated first. */
#ifndef TPRUN_SCHEDULE_LOAD_H
#define TPRUN_SCHEDULE_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sched/layout.h"
#include "sched/ops.h"
#include "sched/dp_shard.h"
#include "sched/train_settings.h"
#include "sched/workspace.h"

typedef struct tr_buf {
    int rank;
    int64_t shape[TP_MAX_RANK];
    tp_dtype dtype;          /* f32 / bf16 activations, i32 ids */
    int64_t offset, bytes;
    int alias_of;
    char *name;
} tr_buf;

typedef struct tr_weight {
    char *name;
    int rank;
    int64_t shape[2], logical[2];   /* global, padded; checkpoint shape */
    int dim;                        /* sharded dim, -1 when replicated */
    /* this rank's ranges along dim, held one after another: one, or one
     * per segment of a packed weight (dim 0 only) */
    int nsegments;
    int64_t offset[TP_MAX_SEGMENTS], length[TP_MAX_SEGMENTS];
    int64_t local_elems;
    int64_t region_offset;          /* in the rank's weight region, elements: a multiple of
                                     * WEIGHT_ALIGN_ELEMS */
    int64_t stored_offset;          /* where tprun keeps it, elements: region_offset, or with
                                     * FSDP its run's place in the runs (sched/dp_shard.h) */
} tr_weight;

/* An op: its operands, then the fields its attributes fill (sched/ops.def
 * says which; the others are 0). */
typedef struct tr_op {
    tp_op_kind kind;
    int in[TP_MAX_INS], nin;
    /* the buffers written: out, or outs[0 .. tp_ops[kind].nout) of a kind
     * with several, -1 where one is not wanted (out is outs[0]) */
    union {
        int out;
        int outs[TP_MAX_OUTS];
    };
    int weight, bias;              /* -1 when absent */
    int weight_buf, bias_buf;      /* FSDP: the buffer they are read from (gathered); -1: the weights */
    int dim, dim2, index, parts, reduce_max;
    int64_t m, n, k, batch, seq, heads, head_dim, kv_heads;
    int64_t vocab_start, vocab_local, vocab_logical, pos_offset;
    int64_t start, length;         /* narrow: the range of dim kept */
    int64_t rotary_dim;            /* rope: the leading dims of each head it rotates */
    bool masked;
    bool unit_offset, gelu_tanh;
    bool inverse;                  /* rope: by minus the angle (the backward) */
    double scale, eps, theta, softcap;
    tp_rope_scaling rope;
    int64_t elems, bytes;          /* collectives: the full tensor */
    char *module, *entry;          /* provenance, for errors and profiles */
    tp_phase phase;                /* forward, backward or grad_sync */
} tr_op;

typedef struct tr_schedule {
    char *producer, *input_hash, *plan;
    int world;                              /* ranks of one tensor-parallel group */
    int data_parallel;                      /* replicas of that group (1: none); the job runs data_parallel x world */
    tp_dp_shard dp_shard;                   /* what the replicas hold in slices (sched/dp_shard.h) */
    tp_train_values train;                  /* the plan's train { } settings, tprun's defaults
                                             * (sched/train_settings.h); none given: given == 0 */
    tp_dtype dtype;
    int64_t arena_bytes;
    tr_buf *bufs; int nbufs;
    int input_ids, labels, loss, logits;   /* buffer indices, -1 when absent */
    int label_shift;                        /* with labels: 1, the loss shifts them (Hugging Face's
                                               models); 0, they are the next tokens already
                                               (tpcc --loss cross_entropy: torchtitan's trainer) */
    int segments;                           /* i32 [batch, seq]: each position's document, -1 for
                                               padding (tpcc --segments); -1 when absent */
    tp_placement logits_pl;
    int64_t vocab;                          /* real logits columns (padding dropped on output) */
    int *grads;                             /* per weight: its gradient's buffer; NULL: no backward */
    int rank;                               /* the rank loaded, within its tensor-parallel group */
    tr_weight *weights; int nweights;
    int64_t weight_elems;                   /* this rank's weight region */
    int64_t stored_elems;                   /* the weights tprun keeps: the region, or with FSDP the runs */
    int dp_rank;                            /* the replica loaded (launch rank / world) */
    tr_op *ops; int nops;
} tr_schedule;

/* Load `path` for launch rank `rank`. world_expected > 0 checks the launch
 * size: data_parallel x world. With data parallelism, rank r runs rank
 * r % world of the schedule (replica r / world).
 * Returns 0, or -1 with a message saying what is wrong and how to fix it. */
int tr_schedule_load(tr_schedule *s, const char *path, int rank, int world_expected, char *err, size_t errlen);
void tr_schedule_free(tr_schedule *s);

int64_t tr_buf_elems(const tr_buf *b);

#endif /* TPRUN_SCHEDULE_LOAD_H */
