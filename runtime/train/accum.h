/* accum.h: gradient accumulation, N micro-batches to one optimizer step.
 *
 * Each micro-batch runs the schedule's forward and backward, which write
 * its gradients into the gradient buffers; between runs they are summed
 * in an fp32 accumulator (backend memory, the size of the gradient
 * buffers), and after the last run the buffers hold the sum, rounded once
 * to the storage dtype, where the data-parallel reduction, the norm and
 * the optimizer read them. The loss of each micro-batch is its sum over
 * the step's labelled tokens (batches.h), so the sum over the
 * micro-batches is the mean over the whole step: one step on the
 * concatenated batch, up to the order of the sums. The data-parallel
 * combination runs once per step, after the last micro-batch (with
 * ZeRO-2 and FSDP the schedule's own reduce-scatters run in every
 * micro-batch, as FSDP2's do unless gradient sync is turned off). */
#ifndef TPRUN_TRAIN_ACCUM_H
#define TPRUN_TRAIN_ACCUM_H

#include <stddef.h>
#include "runtime/exec/exec.h"

typedef struct tr_accum {
    tr_exec *x;
    int micro_batches;
    float *sum;          /* backend memory, fp32: each gradient buffer's elements in turn; NULL for one */
} tr_accum;

/* One micro-batch needs nothing; more allocate the accumulator. Returns 0
 * or -1 with a message (the backend has no accumulate_grad, or no memory). */
int tr_accum_init(tr_accum *a, tr_exec *x, int micro_batches, char *err, size_t errlen);
void tr_accum_free(tr_accum *a);

/* After micro-batch m's run: its gradients into the sum, or after the last
 * the sum into the gradient buffers. */
void tr_accum_add(tr_accum *a, int m);

#endif /* TPRUN_TRAIN_ACCUM_H */
