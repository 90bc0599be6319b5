/* grad_placements.h: to_local's gradient label checked (see grad_placements.c). */
#ifndef TPCC_GRAD_PLACEMENTS_H
#define TPCC_GRAD_PLACEMENTS_H

#include "compiler/sema/check.h"

/* Each to_local() whose grad_placements (or their default) is not what its
 * local gradient is: partial-grad, grad-placements errors at the call. */
void tp_check_grad_placements(const tp_analysis *a, tp_diags *diags);
/* Per graph value: computed from a to_local() result by ops every rank
 * runs the same way, so its gradient ends at that to_local's label.
 * Caller frees. */
bool *tp_to_local_derived(const tp_analysis *a);

#endif /* TPCC_GRAD_PLACEMENTS_H */
