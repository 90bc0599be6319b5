/* lr.h: the learning rate of each step, as Hugging Face's schedulers
 * (transformers/optimization.py) and PyTorch's (torch.optim.lr_scheduler)
 * compute it: base lr times a lambda of the step index i (0 for the first
 * step, the value the scheduler applies before its first step()).
 *   warm-up, i < W:        F + (1 - F) i / max(1, W)
 *                          F = 0: transformers' warm-up; F > 0: PyTorch's
 *                          LinearLR(start_factor=F, total_iters=W); F = m:
 *                          get_wsd_schedule's (settings.c picks it for wsd)
 *   cosine (get_cosine_schedule_with_warmup, num_cycles 0.5):
 *                          m + (1 - m) max(0, 0.5 (1 + cos(pi progress))),
 *                          progress = (i - W) / max(1, N - W); m = min_lr / lr:
 *                          0 as transformers, or CosineAnnealingLR(eta_min=
 *                          min_lr, T_max=N - W) after the warm-up
 *                          (SequentialLR), get_cosine_with_min_lr_schedule_
 *                          with_warmup
 *   constant (get_constant_schedule_with_warmup): 1
 *   linear (get_linear_schedule_with_warmup): m + (1 - m) max(0, 1 - progress),
 *                          m = min_lr / lr as for the cosine (PyTorch's
 *                          LinearLR(start_factor=1, end_factor=m))
 *   wsd (get_wsd_schedule, num_training_steps N): 1 until the last D steps
 *                          (num_decay_steps), then m + (1 - m) max(0, f(p)),
 *                          p = (i - (N - D)) / max(1, D), f the decay_type's
 *                          shape: 1 - p (linear), 0.5 (1 + cos(pi p))
 *                          (cosine) or 1 - sqrt(p) (1-sqrt); m = min_lr / lr
 *                          (min_lr_ratio)
 * Steps past N are never asked for. */
#ifndef TPRUN_TRAIN_LR_H
#define TPRUN_TRAIN_LR_H

#include <stdint.h>
#include "sched/train_settings.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_lr_shape {
    tp_lr_schedule kind;
    int64_t warmup, total;      /* W and N: warm-up steps, all steps */
    double start_factor;        /* F */
    double floor;               /* m: the decay's lowest factor */
    int64_t decay_steps;        /* D: wsd's decay */
    tp_lr_decay decay;          /* wsd's decay shape */
} tr_lr_shape;

/* The factor for step `step`. */
double tr_lr_lambda(const tr_lr_shape *shape, int64_t step);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_LR_H */
