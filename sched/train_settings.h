/* train_settings.h: the optimizer's and the learning-rate schedule's
 * settings of a training run, named as PyTorch and transformers name
 * them. A plan's train { } block gives them (compiler/plan/train_values.c),
 * the schedule carries the given ones in its "train" object (write.c,
 * load.c) and tprun takes them as the defaults its flags override
 * (runtime/train/settings.c). tp_train_keys is the one list of them: the
 * key, its kind and range, and the tprun flag of each value. */
#ifndef TP_SCHED_TRAIN_SETTINGS_H
#define TP_SCHED_TRAIN_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The learning-rate schedules (runtime/train/lr.h says what each does). */
typedef enum tp_lr_schedule { TP_LR_COSINE, TP_LR_CONSTANT, TP_LR_LINEAR, TP_LR_WSD, TP_LR_COUNT } tp_lr_schedule;
extern const char *const tp_lr_schedule_names[TP_LR_COUNT];   /* "cosine", "constant", "linear", "wsd" */

/* The shapes of warmup-stable-decay's decay (get_wsd_schedule's decay_type). */
typedef enum tp_lr_decay { TP_DECAY_LINEAR, TP_DECAY_COSINE, TP_DECAY_1_SQRT, TP_DECAY_COUNT } tp_lr_decay;
extern const char *const tp_lr_decay_names[TP_DECAY_COUNT];   /* "linear", "cosine", "1-sqrt" */

/* One value each; betas is two. */
typedef enum tp_train_field {
    TP_TF_LR,
    TP_TF_BETA1,
    TP_TF_BETA2,
    TP_TF_EPS,
    TP_TF_WEIGHT_DECAY,
    TP_TF_DECAY_ALL,
    TP_TF_MAX_GRAD_NORM,
    TP_TF_SCHEDULE,
    TP_TF_WARMUP_STEPS,
    TP_TF_START_FACTOR,
    TP_TF_MIN_LR,
    TP_TF_DECAY_STEPS,
    TP_TF_DECAY_TYPE,
    TP_TF_MICRO_BATCHES,
    TP_TF_NO_DECAY,
    TP_TF_IGNORE_INDEX,
    TP_TF_PAD_ID,
    TP_TF_EOS_ID,
    TP_TF_COUNT
} tp_train_field;

#define TP_TRAIN_NAMES_MAX 256   /* no_decay's names, comma-joined, with the NUL */

/* Values, each as a double: a count or an id is whole, a flag 0 or 1, a
 * word the index of its name; names (no_decay) are a string apart. */
typedef struct tp_train_values {
    double v[TP_TF_COUNT];
    char no_decay[TP_TRAIN_NAMES_MAX];   /* "bias,norm": tprun's --no-decay spelling */
    uint32_t given;            /* bit f: v[f] was given */
} tp_train_values;

static inline bool tp_train_given(const tp_train_values *t, tp_train_field f) { return t->given >> f & 1u; }

typedef enum tp_train_kind {
    TP_TK_REAL,     /* a number */
    TP_TK_COUNT,    /* a whole number of steps */
    TP_TK_BOOL,     /* True or False */
    TP_TK_WORD,     /* one of `words` */
    TP_TK_PAIR,     /* two numbers, fields `field` and `field + 1` */
    TP_TK_ID,       /* a whole number: a token id or a label value */
    TP_TK_NAMES     /* a name or a tuple of names (tp_train_values.no_decay) */
} tp_train_kind;

typedef struct tp_train_key {
    const char *name;          /* in the plan and the schedule: PyTorch's or transformers' name */
    tp_train_kind kind;
    tp_train_field field;
    double min, max;           /* each number's range; max INFINITY: none */
    bool max_excluded;
    const char *const *words;  /* a word's names, nwords of them */
    int nwords;
    const char *is;            /* what it is, for a diagnostic: "AdamW's learning rate" */
    const char *also;          /* the name scripts also give it ("eta_min"), or NULL */
} tp_train_key;

extern const tp_train_key tp_train_keys[];
extern const int tp_train_nkeys;

/* tprun's flag of each value ("lr", "adam-beta1", ...). */
extern const char *const tp_train_flags[TP_TF_COUNT];

/* The key named `name`, or NULL. */
const tp_train_key *tp_train_key_named(const char *name);

/* The key that holds value f (betas both of its two). */
const tp_train_key *tp_train_key_of(tp_train_field f);

/* The key another name of it (tp_train_key's also) means, or NULL. */
const tp_train_key *tp_train_key_also(const char *name);

/* The value tprun's flag `flag` sets, or -1. */
int tp_train_field_of_flag(const char *flag);

/* Whether x is a value of the key: in its range, and whole for a count
 * or an id. */
bool tp_train_in_range(const tp_train_key *k, double x);

/* What the key takes, for a message: "a number of at least 0", "a pair of
 * numbers from 0 to 1 (excluded)", "\"cosine\", \"constant\", ...". */
void tp_train_key_takes(const tp_train_key *k, char *buf, size_t len);

/* The index of `word` among the key's words, or -1. */
int tp_train_word(const tp_train_key *k, const char *word);

/* Whether `name` can be one of no_decay's names: not empty, no comma
 * (the names are joined by commas). */
bool tp_train_name_ok(const char *name);

/* Appends `name` to the comma-joined `names` (TP_TRAIN_NAMES_MAX bytes);
 * false when it would not fit. */
bool tp_train_names_add(char *names, const char *name);

/* The names of a comma-joined list, one a call: the next one's start in
 * *name and its length in *len, *at moved past it and its comma; false
 * at the end.
 *   for (const char *at = names, *name; tp_train_names_next(&at, &name, &len);) */
bool tp_train_names_next(const char **at, const char **name, size_t *len);

#endif /* TP_SCHED_TRAIN_SETTINGS_H */
