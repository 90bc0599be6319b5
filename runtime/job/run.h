/* run.h: one tprun job on one rank: load the schedule and this rank's
 * weights, read the inputs, run the forward step, and produce the outputs
 * (logits, loss, summary, profile, trace), gathered on rank 0; or, for a
 * training schedule, hand the loaded weights to the training loop. */
#ifndef TPRUN_RUN_H
#define TPRUN_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include "runtime/comm/comm.h"
#include "runtime/train/job_options.h"

/* Returns 0, or an exit status with a message (naming its rank, where
 * there are several) in err. *everywhere says that every rank returns
 * this failure and message: it came from an I/O phase (loading the
 * schedule, the weights or the inputs, a training run's: train.h) that
 * the ranks leave together (tp_agree), so none waits for another and the
 * job needs no abort. With o->backend "cuda", tp_gpu_init has run and
 * comm is tp_comm_nccl's or tp_comm_staged's. */
int tr_run(const tr_options *o, tp_comm *comm, bool *everywhere, char *err, size_t errlen);

#endif /* TPRUN_RUN_H */
