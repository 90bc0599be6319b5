/* clobber.h: an output of a tprun run never replaces one of its inputs. */
#ifndef TPRUN_CLOBBER_H
#define TPRUN_CLOBBER_H

#include <stddef.h>
#include "runtime/job/run.h"

/* -1 with a message naming both options and the file when a file output
 * (--out, --log-json, --grads-out, --profile-json, --trace) is the
 * schedule, a token, label, reference or data file, the checkpoint file,
 * or a tensor or config file of the checkpoint directory, when --save's
 * directory holds one of those inputs, or when --log-json or --grads-out
 * (written after training) cannot be written where they are named; else
 * 0. */
int tr_outputs_spare_inputs(const tr_options *o, char *err, size_t errlen);

#endif /* TPRUN_CLOBBER_H */
