/* unreduced_grad.c: the unreduced-grad check (tpcc --train).
 *
 * A replicated weight used by an op that runs differently on each rank (a
 * norm on a sequence shard, a q/k norm on a rank's heads, a bias beside
 * sharded rows) gets each rank's share of its gradient only; autodiff
 * records where (graph.param_partial_at) and the schedule all-reduces it.
 * PyTorch does the same when the weight is a DTensor: a style distributed
 * it (Colwise, Rowwise, SequenceParallel and their Hugging Face names), and
 * DTensor reduces the Partial gradient. A weight left a plain tensor keeps
 * each rank's share in .grad, nothing sums them, and the replicas drift
 * apart step by step; transformers' "replicated_with_grad_allreduce" is the
 * one style that keeps it plain and all-reduces .grad with a hook. */
#include <stdlib.h>
#include <string.h>
#include "compiler/sema/check_impl.h"
#include "compiler/sema/unreduced_grad.h"
#include "util/xalloc.h"

/* Whether PyTorch sums the ranks' shares of the gradients of the module's
 * parameters. */
static bool torch_reduces_grads(const tp_style *s)
{
    if (!s)
        return false;
    if (tp_style_distributes_params(s->kind))
        return true;     /* the style made them DTensors */
    return s->hf && !strcmp(s->hf->name, "replicated_with_grad_allreduce");
}

/* The input (or output) of node n that is not replicated: why it runs
 * differently on each rank. -1 when the weight alone is. */
static int sharded_operand(const tp_graph *g, const tp_gnode *n)
{
    for (int k = 0; k < n->op.nin; k++) {
        const tp_gvalue *v = &g->values[tp_graph_resolve(g, n->op.in[k])];
        if (v->dtype != TP_I32 && v->pl[0].kind != TP_REPLICATE)
            return tp_graph_resolve(g, n->op.in[k]);
    }
    if (n->op.out >= 0 && g->values[tp_graph_resolve(g, n->op.out)].pl[0].kind != TP_REPLICATE)
        return tp_graph_resolve(g, n->op.out);
    return -1;
}

/* Where the finding goes: the plan entry of the weight's module, else the
 * module's declaration in the model. */
static tp_span where(const tp_module *mod, const tp_plan *p)
{
    if (mod->style)
        return tp_entry_span(mod->style);
    return mod->decl ? mod->decl->span : (tp_span){p->file_id, 1, 1, 0, 0};
}

static void help(tp_diag *d, const tp_module *mod)
{
    const tp_style *s = mod->style;
    if (s && s->hf) {
        tp_diag_help(d, "make the entry of '%s' \"replicated_with_grad_allreduce\" (its hook all-reduces the "
                        "gradient), or \"sequence_parallel\" when the module is a norm on the sequence shard",
                     mod->fqn);
        if (s->kind == TP_STYLE_IDENTITY && s->call->kind == N_STR)   /* a hook-less style: the same forward */
            tp_diag_fixit(d, s->call->span, "\"replicated_with_grad_allreduce\"");
        return;
    }
    tp_diag_help(d, "put SequenceParallel() (or the style that matches its input) on '%s' so PyTorch makes its "
                    "parameters Replicate DTensors and reduces their gradients; otherwise all-reduce their .grad "
                    "over the tp group after backward()", mod->fqn);
}

static void report(const tp_graph *g, const tp_plan *p, tp_diags *diags, const tp_module *mod, const tp_param *prm,
                   int at)
{
    const tp_gnode *n = &g->nodes[at];
    int v = sharded_operand(g, n);
    char pl[24];
    tp_diag *d;
    if (v >= 0)
        d = tp_diag_add(diags, TP_ERROR, where(mod, p), "unreduced-grad",
                        "'%s' is a plain tensor in PyTorch, but each rank computes only its share of its gradient: "
                        "'%s' runs on '%s', which is %s; nothing sums the shares, so the replicas of the weight "
                        "diverge from the first optimizer step", prm->fqn, n->module ? n->module->fqn : mod->fqn,
                        g->values[v].name, tp_pl_str(g->values[v].pl[0], g->values[v].rank, pl));
    else
        d = tp_diag_add(diags, TP_ERROR, where(mod, p), "unreduced-grad",
                        "'%s' is a plain tensor in PyTorch, but each rank computes only its share of its gradient "
                        "(its op runs on sharded operands); nothing sums the shares, so the replicas of the weight "
                        "diverge from the first optimizer step", prm->fqn);
    if (n->entry && n->entry != mod->style)
        tp_diag_note_at(d, tp_entry_span(n->entry), "the layout comes from this entry");
    help(d, mod);
}

void tp_check_unreduced_grads(const tp_model *m, const tp_plan *p, const tp_graph *g, tp_diags *diags)
{
    if (!g->param_partial_at)
        return;
    /* one finding per location: a pattern entry (or a repeated block's
     * declaration) is every layer's */
    tp_span *seen = NULL;
    int nseen = 0, cap = 0;
    for (int i = 0; i < m->count; i++) {
        const tp_module *mod = m->all[i];
        if (torch_reduces_grads(mod->style))
            continue;
        for (int k = 0; k < mod->nparams; k++) {
            const tp_param *prm = &mod->params[k];
            int ip = prm->tied_to ? prm->tied_to->ir_index : prm->ir_index;
            if (ip < 0 || g->param_partial_at[ip] < 0)
                continue;
            tp_span at = where(mod, p);
            int s = 0;
            while (s < nseen && !(seen[s].file == at.file && seen[s].offset == at.offset))
                s++;
            if (s < nseen)
                continue;
            seen = tp_xgrow(seen, nseen, &cap, sizeof *seen, 8);
            seen[nseen++] = at;
            report(g, p, diags, mod, prm, g->param_partial_at[ip]);
        }
    }
    free(seen);
}
