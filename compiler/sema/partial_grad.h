/* partial_grad.h: the partial-grad check (see partial_grad.c). */
#ifndef TP_SEMA_PARTIAL_GRAD_H
#define TP_SEMA_PARTIAL_GRAD_H

#include "compiler/diag/diag.h"
#include "compiler/ir/graph.h"
#include "compiler/plan/plan.h"

/* Under --train: an error for every plan entry whose hook-less style
 * computes a replicated plain input's gradient as each rank's share, which
 * PyTorch never sums. */
void tp_check_partial_grads(const tp_graph *g, tp_diags *diags);

#endif /* TP_SEMA_PARTIAL_GRAD_H */
