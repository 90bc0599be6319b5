/* settings.h: the optimizer's and the learning-rate schedule's settings a
 * training run applies, each from the first that gives it: tprun's flag,
 * the schedule's "train" object (the plan's train { } block), tprun's
 * default (options.h). Checked together before step 1. */
#ifndef TPRUN_TRAIN_SETTINGS_H
#define TPRUN_TRAIN_SETTINGS_H

#include <stddef.h>
#include "runtime/train/lr.h"
#include "runtime/train/options.h"
#include "sched/train_settings.h"

/* *out: `flags` with each setting the command line leaves out taken from
 * `plan` where it gives one; wsd's warm-up starts from its floor, as
 * get_wsd_schedule's does, unless a start factor is given. Returns 0, or
 * -1 with a message for settings that contradict each other (a floor
 * above the peak; wsd without its decay steps, or with more warm-up and
 * decay steps than --steps; --decay-steps or --decay-type with another
 * schedule). */
int tr_train_in_force(const tr_train_options *flags, const tp_train_values *plan, tr_train_options *out, char *err,
                      size_t errlen);

/* The learning-rate schedule of the settings in force. */
tr_lr_shape tr_train_lr_shape(const tr_train_options *t);

#endif /* TPRUN_TRAIN_SETTINGS_H */
