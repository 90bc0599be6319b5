/* run.h: one tprun job on one rank: load the schedule and this rank's
 * weights, read the inputs, run the forward step, and produce the outputs
 * (logits, loss, summary, profile, trace), gathered on rank 0; or, for a
 * training schedule, hand the loaded weights to the training loop. */
#ifndef TPRUN_RUN_H
#define TPRUN_RUN_H

#include <stddef.h>
#include "runtime/comm/comm.h"
#include "runtime/train/job_options.h"

/* Returns 0, or an exit status with a message (naming this rank) in err.
 * With o->backend "cuda", tp_gpu_init has run and comm is tp_comm_nccl's or
 * tp_comm_staged's. */
int tr_run(const tr_options *o, tp_comm *comm, char *err, size_t errlen);

#endif /* TPRUN_RUN_H */
