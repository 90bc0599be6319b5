/* data_split.h: the data-split check (see data_split.c). */
#ifndef TP_SEMA_DATA_SPLIT_H
#define TP_SEMA_DATA_SPLIT_H

#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/plan/plan.h"

/* An error when the plan's train { sampler_dims } gives the ranks of a
 * tensor-parallel group different batches. */
void tp_check_data_split(const tp_model *m, const tp_plan *p, tp_diags *diags);

#endif /* TP_SEMA_DATA_SPLIT_H */
