/* train_settings.c: see train_settings.h. */
#include "sched/train_settings.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const tp_lr_schedule_names[TP_LR_COUNT] = {
    [TP_LR_COSINE] = "cosine", [TP_LR_CONSTANT] = "constant", [TP_LR_LINEAR] = "linear", [TP_LR_WSD] = "wsd"};

const char *const tp_lr_decay_names[TP_DECAY_COUNT] = {
    [TP_DECAY_LINEAR] = "linear", [TP_DECAY_COSINE] = "cosine", [TP_DECAY_1_SQRT] = "1-sqrt"};

#define WORDS(names) names, (int)(sizeof names / sizeof *names)

/* In the order the schedule writes them. */
const tp_train_key tp_train_keys[] = {
    {"lr", TP_TK_REAL, TP_TF_LR, 0, INFINITY, false, NULL, 0, "AdamW's peak learning rate", "learning_rate"},
    {"betas", TP_TK_PAIR, TP_TF_BETA1, 0, 1, true, NULL, 0, "AdamW's betas (beta1, beta2)", "adam_beta1"},
    {"eps", TP_TK_REAL, TP_TF_EPS, 0, INFINITY, false, NULL, 0, "AdamW's eps", "adam_epsilon"},
    {"weight_decay", TP_TK_REAL, TP_TF_WEIGHT_DECAY, 0, INFINITY, false, NULL, 0,
     "AdamW's decoupled weight decay (on matrices only, unless decay_all)", NULL},
    {"decay_all", TP_TK_BOOL, TP_TF_DECAY_ALL, 0, 1, false, NULL, 0,
     "whether weight decay applies to every parameter, norms and biases too, not only matrices", NULL},
    {"max_grad_norm", TP_TK_REAL, TP_TF_MAX_GRAD_NORM, 0, INFINITY, false, NULL, 0,
     "clip_grad_norm_'s max_norm (0: no clipping)", "max_norm"},
    {"schedule", TP_TK_WORD, TP_TF_SCHEDULE, 0, 0, false, WORDS(tp_lr_schedule_names),
     "the learning-rate schedule", "lr_scheduler_type"},
    {"warmup_steps", TP_TK_COUNT, TP_TF_WARMUP_STEPS, 0, INFINITY, false, NULL, 0,
     "the linear warm-up's length in steps", "num_warmup_steps"},
    {"start_factor", TP_TK_REAL, TP_TF_START_FACTOR, 0, 1, false, NULL, 0,
     "the warm-up's first rate as a fraction of lr (LinearLR's start_factor)", NULL},
    {"min_lr", TP_TK_REAL, TP_TF_MIN_LR, 0, INFINITY, false, NULL, 0,
     "the rate the decay falls to (CosineAnnealingLR's eta_min)", "eta_min"},
    {"decay_steps", TP_TK_COUNT, TP_TF_DECAY_STEPS, 0, INFINITY, false, NULL, 0,
     "warmup-stable-decay's decay length in steps", "num_decay_steps"},
    {"decay_type", TP_TK_WORD, TP_TF_DECAY_TYPE, 0, 0, false, WORDS(tp_lr_decay_names),
     "the shape of warmup-stable-decay's decay", NULL},
    {"micro_batches", TP_TK_COUNT, TP_TF_MICRO_BATCHES, 1, 1 << 20, false, NULL, 0,
     "the micro-batches whose gradients one optimizer step sums", "gradient_accumulation_steps"},
    {"no_decay", TP_TK_NAMES, TP_TF_NO_DECAY, 0, 0, false, NULL, 0,
     "the name parts of the parameters without weight decay (all others take it)", NULL},
    {"ignore_index", TP_TK_ID, TP_TF_IGNORE_INDEX, INT32_MIN, INT32_MAX, false, NULL, 0,
     "the label value the loss ignores (CrossEntropyLoss's ignore_index)", NULL},
    {"pad_id", TP_TK_ID, TP_TF_PAD_ID, 0, INT32_MAX, false, NULL, 0,
     "the token of padding, a key no query attends to", "pad_token_id"},
    {"eos_id", TP_TK_ID, TP_TF_EOS_ID, 0, INT32_MAX, false, NULL, 0,
     "the token that ends a document of a packed sequence", "eos_token_id"},
};
const int tp_train_nkeys = (int)(sizeof tp_train_keys / sizeof *tp_train_keys);

const char *const tp_train_flags[TP_TF_COUNT] = {
    [TP_TF_LR] = "lr", [TP_TF_BETA1] = "adam-beta1", [TP_TF_BETA2] = "adam-beta2", [TP_TF_EPS] = "adam-epsilon",
    [TP_TF_WEIGHT_DECAY] = "weight-decay", [TP_TF_DECAY_ALL] = "decay-all", [TP_TF_MAX_GRAD_NORM] = "max-grad-norm",
    [TP_TF_SCHEDULE] = "schedule", [TP_TF_WARMUP_STEPS] = "warmup", [TP_TF_START_FACTOR] = "warmup-start-factor",
    [TP_TF_MIN_LR] = "min-lr", [TP_TF_DECAY_STEPS] = "decay-steps", [TP_TF_DECAY_TYPE] = "decay-type",
    [TP_TF_MICRO_BATCHES] = "micro-batches", [TP_TF_NO_DECAY] = "no-decay", [TP_TF_IGNORE_INDEX] = "ignore-index",
    [TP_TF_PAD_ID] = "pad-id", [TP_TF_EOS_ID] = "eos-id"};

const tp_train_key *tp_train_key_named(const char *name)
{
    for (int k = 0; k < tp_train_nkeys; k++)
        if (!strcmp(tp_train_keys[k].name, name))
            return &tp_train_keys[k];
    return NULL;
}

const tp_train_key *tp_train_key_of(tp_train_field f)
{
    int k = tp_train_nkeys - 1;
    while (k > 0 && tp_train_keys[k].field > f)   /* the table is in field order */
        k--;
    return &tp_train_keys[k];
}

const tp_train_key *tp_train_key_also(const char *name)
{
    for (int k = 0; k < tp_train_nkeys; k++)
        if (tp_train_keys[k].also && !strcmp(tp_train_keys[k].also, name))
            return &tp_train_keys[k];
    return NULL;
}

int tp_train_field_of_flag(const char *flag)
{
    for (int f = 0; f < TP_TF_COUNT; f++)
        if (!strcmp(tp_train_flags[f], flag))
            return f;
    return -1;
}

bool tp_train_in_range(const tp_train_key *k, double x)
{
    if (!isfinite(x) || x < k->min || x > k->max || (k->max_excluded && x == k->max))
        return false;
    return (k->kind != TP_TK_COUNT && k->kind != TP_TK_ID) || x == floor(x);
}

void tp_train_key_takes(const tp_train_key *k, char *buf, size_t len)
{
    if (k->kind == TP_TK_BOOL) {
        snprintf(buf, len, "True or False");
        return;
    }
    if (k->kind == TP_TK_WORD) {
        size_t at = 0;
        for (int w = 0; w < k->nwords && at < len; w++)
            at += (size_t)snprintf(buf + at, len - at, "%s\"%s\"", !w ? "" : w + 1 < k->nwords ? ", " : " or ",
                                   k->words[w]);
        return;
    }
    if (k->kind == TP_TK_NAMES) {
        snprintf(buf, len, "a name or a tuple of names, such as (\"bias\", \"norm\"), none empty or with a comma");
        return;
    }
    const char *what = k->kind == TP_TK_COUNT ? "a whole number of steps"
                       : k->kind == TP_TK_ID  ? "a whole number"
                       : k->kind == TP_TK_PAIR ? "a pair of numbers (a, b), each"
                                               : "a number";
    const int digits = k->kind == TP_TK_COUNT || k->kind == TP_TK_ID ? 10 : 6;   /* whole ones in full */
    if (isinf(k->max))
        snprintf(buf, len, "%s of at least %.*g", what, digits, k->min);
    else
        snprintf(buf, len, "%s from %.*g to %.*g (%s)", what, digits, k->min, digits, k->max,
                 k->max_excluded ? "excluded" : "included");
}

int tp_train_word(const tp_train_key *k, const char *word)
{
    for (int w = 0; w < k->nwords; w++)
        if (!strcmp(k->words[w], word))
            return w;
    return -1;
}

bool tp_train_name_ok(const char *name)
{
    return *name && !strchr(name, ',');
}

bool tp_train_names_next(const char **at, const char **name, size_t *len)
{
    if (!**at)
        return false;
    *name = *at;
    *len = strcspn(*at, ",");
    *at += *len + ((*at)[*len] == ',');
    return true;
}

bool tp_train_names_add(char *names, const char *name)
{
    size_t at = strlen(names), n = strlen(name);
    if (at + (at ? 1 : 0) + n + 1 > TP_TRAIN_NAMES_MAX)
        return false;
    if (at)
        names[at++] = ',';
    memcpy(names + at, name, n + 1);
    return true;
}
