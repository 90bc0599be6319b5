/* options.c: see options.h. */
#include "runtime/train/options.h"
#include <stdio.h>
#include <string.h>
#include "runtime/train/labels.h"
#include "runtime/train/save.h"
#include "runtime/train/segments.h"
#include "util/bytes.h"
#include "util/errmsg.h"
#include "util/number.h"

tr_train_options tr_train_defaults(void)
{
    return (tr_train_options){.lr = 1e-3, .schedule = TP_LR_COSINE, .decay_type = TP_DECAY_COSINE,
                              .adam_beta1 = 0.9, .adam_beta2 = 0.999, .adam_epsilon = 1e-8, .weight_decay = 0.01,
                              .max_grad_norm = 1.0, .save_keep = 1, .max_shard_bytes = TR_SAVE_SHARD_BYTES,
                              .micro_batches = 1, .ignore_index = TR_IGNORE_INDEX, .pad_id = TR_NO_ID,
                              .eos_id = TR_NO_ID};
}

tr_segment_sources tr_train_segment_sources(const tr_train_options *t)
{
    return (tr_segment_sources){.pad_id = t->pad_id, .eos_id = t->eos_id,
                                .attention_mask = t->streams[TR_STREAM_ATTENTION_MASK],
                                .position_ids = t->streams[TR_STREAM_POSITION_IDS]};
}

static int number(const char *name, const char *arg, double *out, char *err, size_t errlen)
{
    if (tp_parse_real(arg, 0, out))
        return tp_error(err, errlen, "--%s takes a non-negative decimal number, not '%s'", name, arg);
    return 0;
}

/* A number from 0 up to `below` (itself excluded where `open`). */
static int fraction(const char *name, const char *arg, double below, bool open, double *out, char *err,
                    size_t errlen)
{
    double v;
    if (tp_parse_real(arg, 0, &v) || (open ? v >= below : v > below))
        return tp_error(err, errlen, "--%s takes a decimal number from 0 to %g (%s), not '%s'", name, below,
                        open ? "excluded" : "included", arg);
    *out = v;
    return 0;
}

static int count(const char *name, const char *arg, int64_t min, int64_t *out, char *err, size_t errlen)
{
    if (tp_parse_int(arg, min, INT64_MAX, out))
        return tp_error(err, errlen, "--%s takes a whole number of steps of at least %lld, not '%s'", name,
                        (long long)min, arg);
    return 0;
}

/* One of `names`: "--schedule takes cosine, constant, linear or wsd". */
static int word(const char *name, const char *arg, const char *const *names, int n, int *out, char *err,
                size_t errlen)
{
    for (*out = 0; *out < n; ++*out)
        if (!strcmp(arg, names[*out]))
            return 0;
    char list[200];
    size_t at = 0;
    for (int k = 0; k < n && at < sizeof list; k++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", !k ? "" : k + 1 < n ? ", " : " or ", names[k]);
    return tp_error(err, errlen, "--%s takes %s, not '%s'", name, list, arg);
}

int tr_train_option(tr_train_options *t, const char *name, const char *arg, char *err, size_t errlen)
{
    int field = tp_train_field_of_flag(name);   /* an optimizer or schedule setting: it overrides the plan's */
    if (field >= 0)
        t->given |= 1u << field;
    /* the streams' flags (--labels is the job's, for forward runs too) */
    for (int k = 0; k < TR_STREAM_KINDS; k++) {
        if (k != TR_STREAM_LABELS && !strcmp(name, tr_streams[k].flag + 2)) {
            t->streams[k] = arg;
            return 0;
        }
        if (!strcmp(name, tr_streams[k].eval_flag + 2)) {
            t->eval[k] = arg;
            return 0;
        }
    }
    if (!strcmp(name, "eval-every"))
        return count(name, arg, 1, &t->eval_every, err, errlen);
    else if (!strcmp(name, "log-json"))
        t->log_json = arg;
    else if (!strcmp(name, "grads-out"))
        t->grads_out = arg;
    else if (!strcmp(name, "save"))
        t->save = arg;
    else if (!strcmp(name, "resume"))
        t->resume = arg;
    else if (!strcmp(name, "max-shard-size")) {
        t->max_shard_given = true;
        t->max_shard_bytes = tp_parse_bytes(arg);
        if (t->max_shard_bytes <= 0)
            return tp_error(err, errlen, "--max-shard-size takes a size such as 2GiB, 5GB or 500MB, not '%s'", arg);
    }
    else if (!strcmp(name, "decay-all"))
        t->decay_all = true;
    else if (!strcmp(name, "no-decay")) {
        if (!*arg || strspn(arg, ",") == strlen(arg))
            return tp_error(err, errlen, "--no-decay takes the name parts of the parameters that take no weight "
                            "decay, comma-separated (bias,norm), not '%s'", arg);
        t->no_decay = arg;
    }
    else if (!strcmp(name, "ignore-index")) {
        int64_t v;
        if (tp_parse_int(arg, INT32_MIN, INT32_MAX, &v))
            return tp_error(err, errlen, "--ignore-index takes a whole number (a label value, such as the pad id), "
                            "not '%s'", arg);
        t->ignore_index = (int32_t)v;
    }
    else if (!strcmp(name, "pad-id") || !strcmp(name, "eos-id")) {
        if (tp_parse_int(arg, 0, INT32_MAX, !strcmp(name, "pad-id") ? &t->pad_id : &t->eos_id))
            return tp_error(err, errlen, "--%s takes a token id, a whole number from 0, not '%s'", name, arg);
    }
    else if (!strcmp(name, "steps"))
        return count(name, arg, 1, &t->steps, err, errlen);
    else if (!strcmp(name, "epochs")) {
        if (tp_parse_int(arg, 1, TR_MAX_EPOCHS, &t->epochs))
            return tp_error(err, errlen, "--epochs takes a number of passes over the data from 1 to %d, not '%s'",
                            TR_MAX_EPOCHS, arg);
    }
    else if (!strcmp(name, "shuffle-seed")) {
        int64_t seed;
        if (tp_parse_int(arg, 0, INT64_MAX, &seed))
            return tp_error(err, errlen, "--shuffle-seed takes a whole number from 0 to %lld, not '%s'",
                            (long long)INT64_MAX, arg);
        t->shuffle = true;
        t->shuffle_seed = (uint64_t)seed;
    }
    else if (!strcmp(name, "micro-batches")) {
        if (tp_parse_int(arg, 1, 1 << 20, &t->micro_batches))
            return tp_error(err, errlen, "--micro-batches takes a number of micro-batches per step from 1 to %d, not "
                            "'%s'", 1 << 20, arg);
    }
    else if (!strcmp(name, "save-every"))
        return count(name, arg, 1, &t->save_every, err, errlen);
    else if (!strcmp(name, "save-keep")) {
        if (tp_parse_int(arg, 1, INT64_MAX, &t->save_keep))
            return tp_error(err, errlen, "--save-keep takes a number of checkpoints of at least 1, not '%s'", arg);
    }
    else if (!strcmp(name, "warmup"))
        return count(name, arg, 0, &t->warmup, err, errlen);
    else if (!strcmp(name, "warmup-start-factor"))
        return fraction(name, arg, 1.0, false, &t->warmup_start_factor, err, errlen);
    else if (!strcmp(name, "min-lr"))
        return number(name, arg, &t->min_lr, err, errlen);
    else if (!strcmp(name, "adam-beta1"))
        return fraction(name, arg, 1.0, true, &t->adam_beta1, err, errlen);
    else if (!strcmp(name, "adam-beta2"))
        return fraction(name, arg, 1.0, true, &t->adam_beta2, err, errlen);
    else if (!strcmp(name, "adam-epsilon"))
        return number(name, arg, &t->adam_epsilon, err, errlen);
    else if (!strcmp(name, "lr"))
        return number(name, arg, &t->lr, err, errlen);
    else if (!strcmp(name, "weight-decay"))
        return number(name, arg, &t->weight_decay, err, errlen);
    else if (!strcmp(name, "max-grad-norm"))
        return number(name, arg, &t->max_grad_norm, err, errlen);
    else if (!strcmp(name, "decay-steps"))
        return count(name, arg, 0, &t->decay_steps, err, errlen);
    else if (!strcmp(name, "schedule") || !strcmp(name, "decay-type")) {
        bool schedule = !strcmp(name, "schedule");
        int k;
        if (word(name, arg, schedule ? tp_lr_schedule_names : tp_lr_decay_names,
                 schedule ? TP_LR_COUNT : TP_DECAY_COUNT, &k, err, errlen))
            return -1;
        if (schedule)
            t->schedule = (tp_lr_schedule)k;
        else
            t->decay_type = (tp_lr_decay)k;
    } else if (!strcmp(name, "on-nonfinite")) {
        if (strcmp(arg, "stop") && strcmp(arg, "skip"))
            return tp_error(err, errlen, "--on-nonfinite takes stop or skip, not '%s'", arg);
        t->skip_nonfinite = !strcmp(arg, "skip");
    } else
        return tp_error(err, errlen, "--%s is not a training option", name);
    return 0;
}
