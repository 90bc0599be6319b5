/* batches.h: what each training step reads: its input ids, labels and
 * segments, one slice per micro-batch and data-parallel replica, and the
 * number of labelled tokens its loss is the mean over.
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
 * Labels equal to --ignore-index are not scored (labels.h). The segments
 * (segments.h) come from the ids and, where given, from the attention
 * mask and position ids: streams of the same length, read at the same
 * place.
 *
 * The loss of a step is the sum over every labelled token of the global
 * batch (all micro-batches and replicas) divided by their number, not the
 * mean of the replicas' or micro-batches' means: each run's kernels divide
 * its sum by that number over D (tp_ce_rule's divisor), the micro-batches'
 * sums add up (accum.h), and the replicas' losses and gradients are then
 * averaged as before.
 *
 * No rank holds a stream (tokens.h): a step reads its replica's rows, one
 * pread of S values (S + 1 where the labels are the stream one further on)
 * per stream and row. Before step 1 every value of every stream is
 * checked against its rule (streams.h: ids of the vocabulary, labels of it
 * or the ignore index, masks as tprun reads them), and every step's labelled tokens are counted (a
 * step with none is refused: its loss would be 0/0); the work is split
 * over the job's ranks (tr_batches_check): rank r of W reads its 1/W of
 * the rows, in large chunks, and collectives combine what they found. A
 * rank reads about 1/W of each stream then, and its own rows after. */
#ifndef TPRUN_TRAIN_BATCHES_H
#define TPRUN_TRAIN_BATCHES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"
#include "runtime/train/streams.h"
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
    bool evaluation;             /* the --eval-data streams: messages name their flags */
    int64_t pad_id, eos_id;      /* --pad-id, --eos-id: what the segments are built from (segments.h) */
} tr_batch_shape;

typedef struct tr_batches {
    tr_batch_shape shape;
    tr_tokens streams[TR_STREAM_KINDS];   /* file NULL: not given (--data always is) */
    tr_stream_rules rules;       /* what their values must be (the shape's) */
    int64_t samples;             /* rows of S tokens the stream holds */
    int64_t steps_per_epoch;
    int64_t steps;               /* of the run: shape.steps, or every step of the epochs */
    int64_t *order;              /* with shuffling: epoch order_epoch's permutation of the samples */
    int64_t order_epoch;
    tr_rows rows;                /* the values of the last rows read, of every stream given */
    int64_t rows_room;           /* values each of rows.v holds */
    int32_t *step_ids;           /* one replica's input ids of a step */
    int32_t *step_labels;        /* one replica's labels of a step, the ignored ones -100 */
    int32_t *step_segments;      /* its segments (tpcc --segments) */
    int32_t *step_mask, *step_positions;   /* its attention mask and position ids, where given */
    int64_t *labelled;           /* per step: the labelled tokens of the global batch (tr_batches_check) */
} tr_batches;

/* Opens the streams (paths[k]: stream k's file, NULL where not given;
 * --data's is required) and checks what their headers say: the streams
 * beside --data of its length, and every step (b->steps: shape's, or all
 * the epochs hold) within it. Reads no value. Returns 0, or -1 with a
 * message naming the flag, the file and the fix. */
int tr_batches_open(tr_batches *b, const tr_batch_shape *shape, const char *const paths[TR_STREAM_KINDS],
                    char *err, size_t errlen);
void tr_batches_free(tr_batches *b);

/* Every value of every stream checked against its rule, every step's
 * labelled tokens counted into b->labelled, and a training step without
 * one refused; rank r of c's W reads rows [R·r/W, R·(r+1)/W) of the R the
 * streams hold, and c's collectives combine what the ranks found: the
 * first position that breaks a rule (then read again by every rank, which
 * all say the same) and each sample's labelled tokens. A communicator
 * without host reductions (comm.h) leaves each rank to read all of it.
 * Collective over c: every rank returns the same, *everywhere set where
 * err is every rank's (tp_agree). Returns 0, or -1 with a message naming
 * the file and the position or step. */
int tr_batches_check(tr_batches *b, tp_comm *c, bool *everywhere, char *err, size_t errlen);

/* Step i's micro-batch m of replica d, read: b->step_ids [B, S],
 * b->step_labels (where the loss is scored) and b->step_segments
 * (segments.h: documents and padding from those ids and the masks beside
 * them). Returns 0, or -1
 * with a message (an I/O error; a value that breaks its rule, the file
 * changed since it was checked). */
int tr_batches_read(tr_batches *b, int64_t i, int m, int d, char *err, size_t errlen);
/* That micro-batch into x's schedule inputs: its ids, its segments where
 * the schedule takes them, its labels where its loss reads them. */
int tr_batches_write(tr_batches *b, tr_exec *x, int64_t i, int m, int d, char *err, size_t errlen);
/* What each run of step i divides its sum by: the step's labelled tokens
 * over the D replicas, which average their losses and gradients. */
double tr_batches_divisor(const tr_batches *b, int64_t i);
/* The bytes of values this rank has read from the streams. */
uint64_t tr_batches_bytes_read(const tr_batches *b);

/* The sample the r-th row the run reads is. */
int64_t tr_batches_sample(tr_batches *b, int64_t r);
/* For tr_batches_check (batches_check.c): rows [row, row + n) of every
 * stream given into b->rows, with the token after them where the labels
 * are the stream one further on and it holds one; the rows may run past
 * the stream's end, which ends them. Returns 0 or -1 with a message. */
int tr_batches_read_rows(tr_batches *b, int64_t row, int64_t n, char *err, size_t errlen);
/* Sample k's labels (S of them, the ignored ones -100) into out, from
 * b->rows, which holds it. */
void tr_batches_sample_labels(const tr_batches *b, int64_t k, int32_t *out);
/* first[k] lowered to the first position in b->rows whose value of
 * stream k breaks its rule (streams.h), for every stream given; INT64_MAX
 * stays where none does. */
void tr_batches_first_bad(const tr_batches *b, int64_t first[TR_STREAM_KINDS]);
/* 0 where first[] holds no position; else -1 with the message for the
 * first stream's (--data's before --labels'), its row read again into
 * b->rows. */
int tr_batches_bad(tr_batches *b, const int64_t first[TR_STREAM_KINDS], char *err, size_t errlen);

#endif /* TPRUN_TRAIN_BATCHES_H */
