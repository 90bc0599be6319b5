/* log.h: what a training run reports per step: one line on rank 0
 *   step 3/100  loss 4.1234  lr 1.00e-03  grad_norm 1.234  12345 tok/s  45.6 ms
 * (rewritten in place on a terminal, one line each otherwise), and the
 * --log-json record, written at the end:
 *   {"settings": {"lr": .., "schedule": "cosine", ..},
 *    "steps": [{"step": 1, "loss": .., "lr": .., "grad_norm": .., "seconds": ..}, ...]}
 * where "settings" are the optimizer's and the schedule's, as the run
 * applied them (tr_train_settings), with the micro-batches per step and
 * the ignore index; "decay_steps" and "decay_type" with schedule "wsd"
 * only.
 * A step whose update --on-nonfinite skip dropped ends its line with
 * "skipped (not finite)" and carries "skipped": true in the record. A step
 * after which the run evaluated (--eval-data) prints a line
 *   eval after step 3: loss 4.2100  perplexity 67.36
 * and carries "eval_loss" and "eval_perplexity". */
#ifndef TPRUN_TRAIN_LOG_H
#define TPRUN_TRAIN_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tr_step_record {
    int64_t step;          /* from 1 */
    double loss, lr, grad_norm, seconds;
    bool skipped;          /* its update dropped: the loss or the gradient norm was not finite */
    bool evaluated;        /* eval_loss holds the validation loss after it (eval.h) */
    double eval_loss;
} tr_step_record;

/* What the run applied, named as PyTorch and transformers name it. */
typedef struct tr_train_settings {
    double lr, warmup_start_factor, min_lr, beta1, beta2, eps, weight_decay, max_grad_norm;
    int64_t warmup, steps, decay_steps;
    const char *schedule;  /* tp_lr_schedule_names' */
    const char *decay_type;  /* wsd's (tp_lr_decay_names'), with decay_steps; NULL: another schedule's */
    int64_t micro_batches;   /* runs per optimizer step (accum.h) */
    int32_t ignore_index;    /* the label value the loss skips (labels.h) */
    int64_t pad_id, eos_id;  /* the segments' tokens (segments.h); TR_NO_ID: none, not written */
    bool decay_all;
    const char *no_decay;    /* "bias,norm": the names without decay; NULL: by rank (optim.h) */
} tr_train_settings;

typedef struct tr_train_log {
    tr_train_settings settings;
    tr_step_record *steps;
    int64_t n, cap;
} tr_train_log;

void tr_log_add(tr_train_log *log, const tr_step_record *r);
void tr_log_free(tr_train_log *log);

/* The step's line on f; `tty` rewrites one progress line (the last step
 * ends it). */
void tr_log_print(FILE *f, bool tty, const tr_step_record *r, int64_t total, int64_t tokens);

/* The run's summary line after its last step:
 *   trained steps 1-300 in 126.1 s (1218 tok/s): loss 6.2500 -> 3.0251,
 *   eval loss 3.5944 (perplexity 36.40); saved trained
 * `tokens` a step's, `saved` the --save directory or NULL. */
void tr_log_summary(FILE *f, const tr_train_log *log, int64_t tokens, const char *saved);

/* Writes the record atomically. Returns 0 or -1 with a message. */
int tr_log_write_json(const tr_train_log *log, const char *path, char *err, size_t errlen);

#endif /* TPRUN_TRAIN_LOG_H */
