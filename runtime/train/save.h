/* save.h: --save DIR and --resume DIR.
 *
 * --save writes, after the last step, a Hugging Face checkpoint that
 * transformers' from_pretrained and tprun's --weights read:
 *   model.safetensors            the full weights, float32, checkpoint names
 *                                and shapes; above --max-shard-size (default
 *                                2 GiB) model-0000i-of-0000n.safetensors and
 *                                model.safetensors.index.json, as
 *                                save_pretrained(max_shard_size=...) writes them
 *   config.json                  the --weights checkpoint's, read as JSON before
 *                                training and written again (the same object)
 *   optimizer.safetensors        AdamW's moments, full: NAME.exp_avg, NAME.exp_avg_sq
 *   tprun_state.json           {"step": steps taken, "max_steps": --steps,
 *                                 "learning_rate": --lr}
 * into DIR.tmp.PID.XXXXXX, renamed to DIR at the end (an existing
 * directory DIR is moved aside to DIR.old.PID, and removed once the new
 * one is in place; anything else there is refused before training).
 * --resume DIR loads the weights from DIR (it is a --weights), and the
 * moments and the step count from these files. */
#ifndef TPRUN_TRAIN_SAVE_H
#define TPRUN_TRAIN_SAVE_H

#include "runtime/train/gather.h"
#include "runtime/train/optim.h"

#define TR_SAVE_SHARD_BYTES ((int64_t)2 << 30)

/* DIR as --save writes it: without its trailing slashes ("out/" is
 * "out"), malloc'ed; NULL, with a message, for a name that is no
 * directory of its own (".", "..", "/", ""), which --save could not
 * replace as a whole by renames. */
char *tr_save_name(const char *dir, char *err, size_t errlen);

/* Before training: DIR as --save writes it, trailing slashes dropped, in
 * *dest, and the text of the config.json it writes (read from the
 * weights' directory, or the directory of a weights file, as JSON; a
 * symbolic link or anything but a regular file there is refused) in
 * *config (both malloc'ed, or NULL); DIR
 * names a directory of its own (not ".", ".." or "/"), is not a file, and
 * can be created or replaced (its parent exists and is writable).
 * Returns 0 or -1 with a message. */
int tr_save_check(const char *dir, const char *weights, char **dest, char **config, char *err, size_t errlen);

/* Before training, on the rank that writes: DIR.lock (beside DIR, kept
 * there) locked for this run, so that a second run saving to DIR is
 * refused with this one's process id; then what saves killed here left
 * (save.c: DIR.tmp.PID.*, DIR.old.PID of processes that are gone) is
 * removed, or put back where a kill lost DIR. *fd holds the lock until
 * tr_save_unlock. Returns 0 or -1 with a message. */
int tr_save_lock(const char *dir, int *fd, char *err, size_t errlen);
void tr_save_unlock(int fd);

/* What --save writes besides the weights and moments. */
/* The order a run reads its samples in (batches.h): a resumed run that
 * read them otherwise would not see the samples the run it resumes would
 * have. tprun_state.json keeps it as "data". */
typedef struct tr_data_order {
    int64_t samples, samples_per_step, seq;   /* the stream's samples: the shuffle draws from them all */
    bool shuffled;
    uint64_t shuffle_seed;
} tr_data_order;

typedef struct tr_save_spec {
    const char *dir;         /* --save DIR */
    const char *config;      /* config.json's text (tr_save_check) */
    int64_t max_steps;       /* --steps, and --lr: tprun_state.json's */
    double lr;
    int64_t shard_bytes;     /* --max-shard-size */
    int64_t keep;            /* --save-keep: DIR and the keep - 1 checkpoints it held before, as DIR.step-S */
    const char *resume;      /* --resume DIR, never pruned among those */
    tr_data_order order;     /* tprun_state.json's "data" */
} tr_save_spec;

/* Collective, after the last step: weight by weight, the weight and its
 * two moments are gathered to rank 0, which streams each into its file
 * (safetensors_write.h) as it arrives: no rank holds more than one full
 * tensor and its slices, never a whole model or region. Called by the
 * tensor-parallel group of replica 0 only, or, where the optimizer state
 * is sharded (zero.h), by every rank: the replicas first gather the
 * weight's runs. Returns 0 or -1 with a message. */
int tr_save(tr_optim *o, const tr_layouts *l, const tr_save_spec *spec, char *err, size_t errlen);

/* --resume: this rank's slices of the moments into o, and o->step; the
 * data order the run read in is checked against `order` (a checkpoint that
 * records none, from before it was recorded, is taken as it is). Returns 0
 * or -1 with a message. */
int tr_resume(tr_optim *o, const char *dir, const tr_data_order *order, char *err, size_t errlen);

#endif /* TPRUN_TRAIN_SAVE_H */
