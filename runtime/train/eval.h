/* eval.h: the validation loss of a training run (--eval-data FILE
 * --eval-every N), as transformers' Trainer evaluates every eval_steps:
 * the weights as they stand, no update. The stream is read once in order,
 * in the step's batches (replica d the rows a training step would give
 * it), every whole batch of it; the loss is the mean over the labelled
 * tokens of all of them (each batch's sum over that number, as training
 * divides, summed and averaged over the replicas), and its perplexity
 * exp(loss). Each batch runs the schedule's forward only: the ops up to
 * the one that writes the loss. */
#ifndef TPRUN_TRAIN_EVAL_H
#define TPRUN_TRAIN_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"
#include "runtime/train/batches.h"

typedef struct tr_eval {
    tr_batches batches;
    int64_t labelled;      /* over every batch and replica */
    int forward_ops;       /* the ops up to and with the loss's */
} tr_eval;

/* The evaluation streams (paths, as tr_batches_open's) in `shape`'s
 * batches (its steps, epochs and micro-batches are the evaluation's own).
 * Returns 0, or -1 with a message naming the file (too short for a
 * batch) or the schedule (no loss to evaluate). */
int tr_eval_open(tr_eval *e, const tr_schedule *s, const tr_batch_shape *shape,
                 const char *const paths[TR_STREAM_KINDS], char *err, size_t errlen);
/* Their checks before step 1 (tr_batches_check: tokens outside the
 * vocabulary, bad labels), and a labelled token to evaluate. Collective
 * over c, as tr_batches_check. Returns 0, or -1 with a message. */
int tr_eval_check(tr_eval *e, tp_comm *c, bool *everywhere, char *err, size_t errlen);
void tr_eval_free(tr_eval *e);

/* The validation loss over the whole stream, every rank the same value
 * (`dp` averages it; scratch: one float of backend memory). Returns 0 or
 * -1 with a message. */
int tr_eval_loss(tr_eval *e, tr_exec *x, tp_comm *dp, float *scratch, double *loss, char *err, size_t errlen);

#endif /* TPRUN_TRAIN_EVAL_H */
