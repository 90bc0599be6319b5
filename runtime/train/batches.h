/* batches.h: what each training step reads: its input ids and labels, one
 * slice per micro-batch and data-parallel replica, and the number of
 * labelled tokens its loss is the mean over.
 *
 * The stream (--data) is cut into samples of S tokens, which an epoch
 * visits in the stream's order or, with --shuffle-seed, in a permutation
 * drawn from the seed and the epoch (the same on every rank, so a resumed
 * run sees the samples of the run it resumes). With M micro-batches and D
 * replicas a step takes M·D·B samples, replica d's micro-batch m of step
 * i the B rows after the first ((i·M + m)·D + d)·B the run has read, as
 * one step of batch M·D·B would; an epoch takes as many whole steps as
 * its samples hold (the rest unread, as DistributedSampler's drop_last),
 * and --epochs E lets the run make E passes. Without shuffling and within
 * one epoch, step i's replica d reads the stream at ((i·M + m)·D + d)·B·S.
 * A sample's labels:
 *   - --labels FILE: a second stream of the same length, read at the same
 *     place, in the schedule's convention (label_shift 1: aligned with the
 *     inputs, shifted by the loss, as Hugging Face's `labels`; 0: already
 *     the next tokens, as seed scripts' target_ids);
 *   - else, with label_shift 1, the input ids themselves (the loss shifts
 *     them, as model(input_ids=ids, labels=ids));
 *   - else (label_shift 0) the B·S tokens one further on, llm.c's
 *     DataLoader (x = buf[:-1], y = buf[1:]): every position has its next
 *     token as label, and the stream must hold one token more.
 * Labels equal to --ignore-index are not scored (labels.h).
 *
 * The loss of a step is the sum over every labelled token of the global
 * batch (all micro-batches and replicas) divided by their number, not the
 * mean of the replicas' or micro-batches' means: each run's kernels divide
 * its sum by that number over D (tp_ce_rule's divisor), the micro-batches'
 * sums add up (accum.h), and the replicas' losses and gradients are then
 * averaged as before. Every rank holds the whole stream, so each
 * counts every step's labelled tokens itself, before step 1, and a step
 * with none is refused there (its loss would be 0/0). */
#ifndef TPRUN_TRAIN_BATCHES_H
#define TPRUN_TRAIN_BATCHES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "runtime/exec/exec.h"
#include "runtime/train/tokens.h"

typedef struct tr_batch_shape {
    int64_t batch, seq;          /* one replica's [B, S] */
    int replicas;                /* D */
    int micro_batches;           /* M: runs of the schedule per optimizer step */
    int64_t steps;               /* --steps: every step is checked; 0: every step of the epochs */
    int64_t epochs;              /* --epochs: passes over the samples the run may make (1) */
    bool shuffle;                /* --shuffle-seed given: each epoch in a seeded permutation */
    uint64_t shuffle_seed;
    int label_shift;             /* the schedule's (sched/load.h) */
    int64_t vocab;
    int32_t ignore_index;        /* --ignore-index */
    bool scored;                 /* the loss reads labels: their counts are wanted (not tpcc --loss sum) */
    bool any_step;               /* a step may hold no labelled token (evaluation: the mean is the stream's) */
    int64_t pad_id, eos_id;      /* --pad-id, --eos-id: what the segments are built from (segments.h) */
} tr_batch_shape;

typedef struct tr_batches {
    tr_batch_shape shape;
    const char *data_path, *labels_path;
    tr_tokens data, labels;      /* labels.count 0: no --labels */
    int64_t samples;             /* rows of S tokens the stream holds */
    int64_t steps_per_epoch;
    int64_t steps;               /* of the run: shape.steps, or every step of the epochs */
    int64_t *order;              /* with shuffling: epoch order_epoch's permutation of the samples */
    int64_t order_epoch;
    int32_t *step_ids;           /* one replica's input ids of a step */
    int32_t *step_labels;        /* one replica's labels of a step, the ignored ones -100 */
    int32_t *step_segments;      /* its segments (tpcc --segments) */
    int64_t *labelled;           /* per step: the labelled tokens of the global batch */
} tr_batches;

/* Reads --data (and --labels when labels_path is not NULL), checks that
 * they hold every step (b->steps: shape's, or all the epochs hold), that
 * the labels are classes of the vocabulary or
 * the ignore index, and that every step has a labelled token. Returns 0,
 * or -1 with a message naming the file, the position or step and the fix. */
int tr_batches_open(tr_batches *b, const tr_batch_shape *shape, const char *data_path, const char *labels_path,
                    char *err, size_t errlen);
void tr_batches_free(tr_batches *b);

/* Step i's micro-batch m's input ids [B, S] for replica d (valid until the
 * next call). */
const int32_t *tr_batches_ids(tr_batches *b, int64_t i, int m, int d);
/* Its labels [B, S], the ignored ones -100 (valid until the next call). */
const int32_t *tr_batches_labels(tr_batches *b, int64_t i, int m, int d);
/* Step i's micro-batch m of replica d into x's schedule inputs: its ids,
 * its segments (segments.h: documents and padding from those ids) where
 * the schedule takes them, its labels where its loss reads them. */
void tr_batches_write(tr_batches *b, tr_exec *x, int64_t i, int m, int d);
/* What each run of step i divides its sum by: the step's labelled tokens
 * over the D replicas, which average their losses and gradients. */
double tr_batches_divisor(const tr_batches *b, int64_t i);

#endif /* TPRUN_TRAIN_BATCHES_H */
