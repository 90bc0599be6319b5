/* grad_clip.h: the grad-clip check (see grad_clip.c). */
#ifndef TP_SEMA_GRAD_CLIP_H
#define TP_SEMA_GRAD_CLIP_H

#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/ir/graph.h"
#include "compiler/plan/plan.h"

/* An error when the plan's train { max_grad_norm } clipping
 * (torch.nn.utils.clip_grad_norm_ over model.parameters()) fails in
 * PyTorch or computes a different norm on each rank. */
void tp_check_grad_clip(const tp_model *m, const tp_plan *p, const tp_graph *g, tp_diags *diags);

#endif /* TP_SEMA_GRAD_CLIP_H */
