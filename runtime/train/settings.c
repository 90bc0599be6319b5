/* settings.c: see settings.h. */
#include "runtime/train/settings.h"
#include <stdio.h>
#include "util/errmsg.h"

/* Whether setting f comes from the plan: the command line leaves it out. */
static bool from_plan(const tr_train_options *flags, const tp_train_values *plan, tp_train_field f)
{
    return !(flags->given >> f & 1u) && tp_train_given(plan, f);
}

/* Where setting f in force comes from, for a message: "--min-lr" or
 * "the plan's min_lr". */
static const char *origin(const tr_train_options *flags, const tp_train_values *plan, tp_train_field f, char *buf,
                          size_t len)
{
    if (from_plan(flags, plan, f))
        snprintf(buf, len, "the plan's %s", tp_train_key_of(f)->name);
    else
        snprintf(buf, len, "--%s", tp_train_flags[f]);
    return buf;
}

static int check(const tr_train_options *flags, const tp_train_values *plan, const tr_train_options *t, char *err,
                 size_t errlen)
{
    char a[40], b[40];
    if (t->min_lr > t->lr)
        return tp_error(err, errlen, "%s %g is above %s %g: the schedule decays from the peak rate to the floor",
                        origin(flags, plan, TP_TF_MIN_LR, a, sizeof a), t->min_lr,
                        origin(flags, plan, TP_TF_LR, b, sizeof b), t->lr);
    bool wsd = t->schedule == TP_LR_WSD;
    for (tp_train_field f = TP_TF_DECAY_STEPS; f <= TP_TF_DECAY_TYPE; f++)
        if (!wsd && flags->given >> f & 1u)
            return tp_error(err, errlen, "--%s shapes the decay of --schedule wsd (warmup-stable-decay); the schedule "
                            "in force is %s", tp_train_flags[f], tp_lr_schedule_names[t->schedule]);
    if (wsd && !(t->given >> TP_TF_DECAY_STEPS & 1u))
        return tp_error(err, errlen, "--schedule wsd needs --decay-steps N, the last steps, which decay to --min-lr "
                        "(get_wsd_schedule's num_decay_steps), or decay_steps in the plan's train { }");
    if (wsd && t->steps && t->warmup + t->decay_steps > t->steps)   /* steps 0: --epochs, counted later */
        return tp_error(err, errlen, "%s %lld and %s %lld take more steps than --steps %lld: the rate would decay "
                        "before it has warmed up", origin(flags, plan, TP_TF_WARMUP_STEPS, a, sizeof a),
                        (long long)t->warmup, origin(flags, plan, TP_TF_DECAY_STEPS, b, sizeof b),
                        (long long)t->decay_steps, (long long)t->steps);
    return 0;
}

int tr_train_in_force(const tr_train_options *flags, const tp_train_values *plan, tr_train_options *out, char *err,
                      size_t errlen)
{
    tr_train_options t = *flags;
    const double *v = plan->v;
    if (from_plan(flags, plan, TP_TF_LR))
        t.lr = v[TP_TF_LR];
    if (from_plan(flags, plan, TP_TF_BETA1))
        t.adam_beta1 = v[TP_TF_BETA1];
    if (from_plan(flags, plan, TP_TF_BETA2))
        t.adam_beta2 = v[TP_TF_BETA2];
    if (from_plan(flags, plan, TP_TF_EPS))
        t.adam_epsilon = v[TP_TF_EPS];
    if (from_plan(flags, plan, TP_TF_WEIGHT_DECAY))
        t.weight_decay = v[TP_TF_WEIGHT_DECAY];
    if (from_plan(flags, plan, TP_TF_DECAY_ALL))
        t.decay_all = v[TP_TF_DECAY_ALL] != 0;
    if (from_plan(flags, plan, TP_TF_MAX_GRAD_NORM))
        t.max_grad_norm = v[TP_TF_MAX_GRAD_NORM];
    if (from_plan(flags, plan, TP_TF_SCHEDULE))
        t.schedule = (tp_lr_schedule)v[TP_TF_SCHEDULE];
    if (from_plan(flags, plan, TP_TF_WARMUP_STEPS))
        t.warmup = (int64_t)v[TP_TF_WARMUP_STEPS];
    if (from_plan(flags, plan, TP_TF_START_FACTOR))
        t.warmup_start_factor = v[TP_TF_START_FACTOR];
    if (from_plan(flags, plan, TP_TF_MIN_LR))
        t.min_lr = v[TP_TF_MIN_LR];
    if (from_plan(flags, plan, TP_TF_DECAY_STEPS))
        t.decay_steps = (int64_t)v[TP_TF_DECAY_STEPS];
    if (from_plan(flags, plan, TP_TF_DECAY_TYPE))
        t.decay_type = (tp_lr_decay)v[TP_TF_DECAY_TYPE];
    if (from_plan(flags, plan, TP_TF_MICRO_BATCHES))
        t.micro_batches = (int64_t)v[TP_TF_MICRO_BATCHES];
    if (from_plan(flags, plan, TP_TF_NO_DECAY))
        t.no_decay = plan->no_decay;
    if (from_plan(flags, plan, TP_TF_IGNORE_INDEX))
        t.ignore_index = (int32_t)v[TP_TF_IGNORE_INDEX];
    if (from_plan(flags, plan, TP_TF_PAD_ID))
        t.pad_id = (int64_t)v[TP_TF_PAD_ID];
    if (from_plan(flags, plan, TP_TF_EOS_ID))
        t.eos_id = (int64_t)v[TP_TF_EOS_ID];
    /* a flag overrides the plan's opposite too: --decay-all its no_decay, --no-decay its decay_all */
    if (flags->given >> TP_TF_DECAY_ALL & 1u && from_plan(flags, plan, TP_TF_NO_DECAY))
        t.no_decay = NULL;
    if (flags->given >> TP_TF_NO_DECAY & 1u && from_plan(flags, plan, TP_TF_DECAY_ALL))
        t.decay_all = false;
    t.given = flags->given | plan->given;
    if (t.schedule == TP_LR_WSD && !(t.given >> TP_TF_START_FACTOR & 1u))
        t.warmup_start_factor = t.lr > 0 ? t.min_lr / t.lr : 0;   /* min_lr_ratio: get_wsd_schedule's warm-up */
    if (check(flags, plan, &t, err, errlen))
        return -1;
    *out = t;
    return 0;
}

tr_lr_shape tr_train_lr_shape(const tr_train_options *t)
{
    return (tr_lr_shape){.kind = t->schedule, .warmup = t->warmup, .total = t->steps,
                         .start_factor = t->warmup_start_factor, .floor = t->lr > 0 ? t->min_lr / t->lr : 0,
                         .decay_steps = t->decay_steps, .decay = t->decay_type};
}
