/* partial_grad.h: the partial-grad check (see partial_grad.c). */
#ifndef TP_SEMA_PARTIAL_GRAD_H
#define TP_SEMA_PARTIAL_GRAD_H

#include "compiler/sema/check.h"

/* Under --train: an error for every plan entry whose hook-less style
 * computes a replicated plain input's gradient as each rank's share, which
 * PyTorch never sums. An input computed from a to_local() result is that
 * call's to label (tp_check_grad_placements). */
void tp_check_partial_grads(const tp_analysis *a, tp_diags *diags);

#endif /* TP_SEMA_PARTIAL_GRAD_H */
