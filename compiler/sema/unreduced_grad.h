/* unreduced_grad.h: the unreduced-grad check (see unreduced_grad.c). */
#ifndef TP_SEMA_UNREDUCED_GRAD_H
#define TP_SEMA_UNREDUCED_GRAD_H

#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/ir/graph.h"
#include "compiler/plan/plan.h"

/* After autodiff: an error for every weight whose gradient is each rank's
 * share (g->param_partial_at) and which PyTorch holds as a plain tensor. */
void tp_check_unreduced_grads(const tp_model *m, const tp_plan *p, const tp_graph *g, tp_diags *diags);

#endif /* TP_SEMA_UNREDUCED_GRAD_H */
