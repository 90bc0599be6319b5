/* lr.h: the learning rate of each step, as Hugging Face's schedulers
 * (transformers/optimization.py) compute it: base lr times a lambda of the
 * step index i (0 for the first step, the value LambdaLR applies before
 * its first scheduler.step()).
 *   warm-up, i < W:        i / max(1, W)
 *   cosine (get_cosine_schedule_with_warmup, num_cycles 0.5):
 *                          max(0, 0.5 (1 + cos(pi progress))),
 *                          progress = (i - W) / max(1, N - W)
 *   constant (get_constant_schedule_with_warmup): 1 */
#ifndef TPRUN_TRAIN_LR_H
#define TPRUN_TRAIN_LR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_lr_schedule { TR_LR_COSINE, TR_LR_CONSTANT } tr_lr_schedule;

/* The factor for step `step` of `total` with `warmup` warm-up steps. */
double tr_lr_lambda(tr_lr_schedule kind, int64_t step, int64_t warmup, int64_t total);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_LR_H */
