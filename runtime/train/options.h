/* options.h: what tprun's command line says about training (tprun
 * --help lists them with their defaults). */
#ifndef TPRUN_TRAIN_OPTIONS_H
#define TPRUN_TRAIN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "runtime/train/lr.h"
#include "runtime/train/segments.h"
#include "runtime/train/streams.h"

#define TR_MAX_EPOCHS 100000

typedef struct tr_train_options {
    const char *streams[TR_STREAM_KINDS];  /* by the flags of streams.h: --data (the token stream),
                                              --attention-mask, --position-ids; NULL: not given
                                              (--labels is the job's: job_options.h) */
    int64_t steps;               /* --steps: 0 when not training */
    int64_t micro_batches;       /* --micro-batches: schedule runs per optimizer step (accum.h) */
    int64_t epochs;              /* --epochs: passes over the data (batches.h), with no --steps all their steps;
                                    0: not given, one */
    bool shuffle;                /* --shuffle-seed given */
    uint64_t shuffle_seed;
    double lr;                   /* peak learning rate */
    int64_t warmup;
    tp_lr_schedule schedule;
    double warmup_start_factor;  /* the warm-up's first factor: 0 (transformers) or LinearLR's start_factor */
    double min_lr;               /* the decay's floor (CosineAnnealingLR's eta_min) */
    int64_t decay_steps;         /* wsd: the last steps, which decay */
    tp_lr_decay decay_type;      /* wsd: their shape */
    double adam_beta1, adam_beta2, adam_epsilon;   /* torch.optim.AdamW's betas and eps */
    double weight_decay;         /* for weights of rank >= 2, or all with decay_all */
    bool decay_all;
    const char *no_decay;        /* --no-decay NAMES: parameters whose name holds one take no decay (optim.h) */
    double max_grad_norm;        /* 0: no clipping */
    int32_t ignore_index;        /* --ignore-index: the label value the loss skips (labels.h) */
    int64_t pad_id, eos_id;      /* --pad-id, --eos-id: the segments' tokens (segments.h); TR_NO_ID: none.
                                    A forward run reads these three too. */
    uint32_t given;              /* bit f (sched/train_settings.h's fields): set on the command line, which
                                    overrides the schedule's train { } value (runtime/train/settings.h) */
    const char *log_json, *grads_out;
    const char *eval[TR_STREAM_KINDS];     /* --eval-data and the streams beside it, by their eval flags
                                              (streams.h): the validation streams (eval.h) */
    int64_t eval_every;          /* --eval-every N: the validation loss after every N-th step and the last */
    const char *save, *resume;   /* Hugging Face checkpoint directories (save.h) */
    int64_t save_every;          /* --save-every N: DIR replaced after every N-th step too; 0: at the end only */
    int64_t save_keep;           /* --save-keep K: DIR and the K - 1 checkpoints before it (DIR.step-S) */
    int64_t max_shard_bytes;     /* --save's model files: one up to this size, else shards */
    bool max_shard_given;
    bool skip_nonfinite;         /* --on-nonfinite skip: drop a step whose loss or gradient norm is not finite,
                                    rather than stop (train.h) */
} tr_train_options;

/* The defaults: torch.optim.AdamW's lr, transformers' max_grad_norm 1.0,
 * weight decay 0.01, cosine with no warm-up (wsd's decay: cosine, as
 * get_wsd_schedule's), shards of 2 GiB, ignore index -100, no pad or eos
 * id; no training. */
tr_train_options tr_train_defaults(void);

/* Where t's segments come from: its pad and EOS ids and its mask streams
 * (segments.h), for the check a forward run and a training run make. */
tr_segment_sources tr_train_segment_sources(const tr_train_options *t);

/* One training option of tprun's command line, by its long name ("no-decay", a stream's
 * flag or evaluation flag of streams.h but "labels" ("data", "attention-mask", "eval-data",
 * "eval-labels", ...), "eval-every", "steps", "epochs", "shuffle-seed", "micro-batches", "lr", "warmup", "warmup-start-factor", "min-lr", "schedule", "decay-steps", "decay-type",
 * "adam-beta1", "adam-beta2", "adam-epsilon", "weight-decay", "decay-all",
 * "max-grad-norm", "ignore-index", "pad-id", "eos-id", "log-json", "grads-out", "save", "save-every", "save-keep", "max-shard-size", "resume",
 * "on-nonfinite"), with its
 * argument (NULL for a flag). Returns 0, or -1 with a message saying what the option takes. */
int tr_train_option(tr_train_options *t, const char *name, const char *arg, char *err, size_t errlen);

#endif /* TPRUN_TRAIN_OPTIONS_H */
