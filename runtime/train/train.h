/* train.h: tprun's training loop, for a schedule compiled with tpcc
 * --train (a forward with a loss, the backward, and every weight's
 * gradient in outputs.grads).
 *
 * Step i (from 0) reads tokens [i·B·S, (i+1)·B·S) of the stream as the
 * input ids [B, S] of the schedule's input buffer (with D data-parallel
 * replicas, replica d reads [(i·D + d)·B·S, (i·D + d + 1)·B·S) and the
 * gradients are averaged over the replicas: dp.h), and the same ids as the
 * labels (the loss shifts them, as Hugging Face's does; a summed loss,
 * tpcc --loss sum, has none); runs the forward
 * and the backward; takes the global gradient norm, clips, and applies
 * AdamW at the learning rate of step i (lr.h). The recipe is the one of
 * torch.optim.AdamW + torch.nn.utils.clip_grad_norm_ +
 * transformers.get_cosine_schedule_with_warmup. */
#ifndef TPRUN_TRAIN_TRAIN_H
#define TPRUN_TRAIN_TRAIN_H

#include "runtime/exec/exec.h"
#include "runtime/train/job_options.h"
#include "runtime/train/dp.h"

/* Trains o->train.steps steps on the loaded weights (x's weight region);
 * x runs on groups->tp. A backend storing bf16 trains fp32 master weights
 * (optim.h), which start from `masters`, the weight region as read in
 * fp32 (NULL for fp32 storage, where the weights are their own masters).
 * For --profile: leaves the median step's profile (by its total time) in
 * x->profile, and every step's total time this run took in *step_seconds
 * (malloc'ed, *nsteps of them; the caller frees it), and in *data_bytes
 * the bytes of the data streams this rank read (batches.h). Returns 0, or -1
 * with a message in err. The I/O phases (reading the data and a
 * --resume state, each --save, --grads-out, --log-json) are entered by
 * every rank together and left through tp_agree (comm.h), as is the check
 * of the data's values, split over the ranks: a failure in
 * one, or a step that is not finite, is every rank's, with the same
 * message, and sets *everywhere (no rank waits for another; nothing needs
 * aborting). */
int tr_train(const tr_options *o, tr_dp *groups, tr_exec *x, const float *masters, int64_t vocab,
             double **step_seconds, int *nsteps, uint64_t *data_bytes, bool *everywhere, char *err,
             size_t errlen);

#endif /* TPRUN_TRAIN_TRAIN_H */
