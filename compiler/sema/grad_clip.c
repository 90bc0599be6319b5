/* grad_clip.c: the grad-clip check.
 *
 * train { max_grad_norm = C } says the script clips with
 * torch.nn.utils.clip_grad_norm_(model.parameters(), C). Over DTensor
 * parameters it is right: the norm of a Shard gradient is a Partial
 * DTensor that is summed over the ranks, a Replicate one counts once, and
 * every rank clips by the same factor. Two layouts break it:
 *   - DTensor and plain parameters together (a norm no style distributed,
 *     beside Colwise/Rowwise weights): torch._foreach_norm, or the
 *     per-tensor path's mul_, raises "got mixed torch.Tensor and DTensor"
 *     at the first step (torch 2.15; torchtitan wraps such modules in its
 *     NoParallel style for this reason);
 *   - plain parameters only, some of them a rank's slice (transformers
 *     4.56's hook-less local styles): each rank's norm counts its own
 *     slices and nothing sums them, so every rank clips by its own factor
 *     and the replicated weights drift apart. */
#include "compiler/sema/grad_clip.h"

/* Whether PyTorch holds the module's parameters as DTensors: a style
 * distributed them (plan/styles.def's params column: Colwise, Rowwise,
 * SequenceParallel and their Hugging Face names), except a hook-less
 * local one. */
static bool dtensor_params(const tp_module *mod)
{
    const tp_style *s = mod->style;
    if (!s || (s->hf && s->hf->no_hooks))
        return false;
    return tp_style_distributes_params(s->kind);
}

/* Where a module's parameters are given their kind: its plan entry, else
 * its declaration in the model. */
static tp_span where(const tp_module *mod)
{
    return mod->style ? tp_entry_span(mod->style) : mod->decl ? mod->decl->span : TP_NO_SPAN;
}

void tp_check_grad_clip(const tp_model *m, const tp_plan *p, const tp_graph *g, tp_diags *diags)
{
    const tp_node *clip = p->train.value_at[TP_TF_MAX_GRAD_NORM];
    if (!tp_train_given(&p->train.values, TP_TF_MAX_GRAD_NORM) || p->train.values.v[TP_TF_MAX_GRAD_NORM] <= 0 ||
        g->world <= 1)
        return;
    const tp_param *dtensor = NULL, *plain = NULL, *sliced = NULL;
    for (int i = 0; i < m->count; i++)
        for (int k = 0; k < m->all[i]->nparams; k++) {
            const tp_param *prm = &m->all[i]->params[k];
            if (prm->tied_to || prm->ir_index < 0)
                continue;
            if (dtensor_params(m->all[i]))
                dtensor = dtensor ? dtensor : prm;
            else if (g->params[prm->ir_index].pl.kind != TP_REPLICATE)
                sliced = sliced ? sliced : prm;
            else
                plain = plain ? plain : prm;
        }
    tp_span at = clip->span;
    tp_diag *d;
    if (dtensor && (plain || sliced)) {
        const tp_param *x = plain ? plain : sliced;
        d = tp_diag_add(diags, TP_ERROR, at, "grad-clip",
                        "clip_grad_norm_(model.parameters(), max_norm) gets DTensor parameters ('%s') and plain "
                        "ones ('%s', which no style distributed): PyTorch raises 'aten._foreach_norm.Scalar got "
                        "mixed torch.Tensor and DTensor' at the first step", dtensor->fqn, x->fqn);
        tp_span s = where(x->owner);
        if (s.file >= 0)
            tp_diag_note_at(d, s, "'%s' keeps its parameters plain", x->owner->fqn);
        tp_diag_help(d, "make every parameter a DTensor: SequenceParallel() on the norms (sequence parallelism, as "
                        "plans/llama-sp.plan), or distribute the other modules' parameters as Replicate() DTensors "
                        "(torchtitan's NoParallel); or clip with a norm that counts each replicated parameter once "
                        "and each sharded one by all its slices");
        return;
    }
    if (!sliced)
        return;
    d = tp_diag_add(diags, TP_ERROR, at, "grad-clip",
                    "clip_grad_norm_(model.parameters(), max_norm) sees plain tensors only, and '%s' is this rank's "
                    "slice: each rank's norm counts its own slices and nothing sums them, so the ranks clip by "
                    "different factors and their replicated weights drift apart", sliced->fqn);
    tp_span s = where(sliced->owner);
    if (s.file >= 0)
        tp_diag_note_at(d, s, "'%s' holds its slice as a plain tensor", sliced->owner->fqn);
    tp_diag_help(d, "use styles that make the parameters DTensors (\"colwise\", \"rowwise\"), whose norms PyTorch "
                    "sums over the ranks; or all-reduce the squared norm of the sharded gradients over the tp group "
                    "yourself, counting each replicated parameter once");
}
