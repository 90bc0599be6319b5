/* partial_grad.c: the partial-grad check (tpcc --train).
 *
 * A replicated tensor that enters an op running differently on each rank
 * (a Colwise linear: each rank's rows of the weight) gets each rank's
 * share of its gradient only. PyTorch sums the shares where the tensor was
 * made a DTensor: a style's from_local(Replicate()) redistributes the
 * Partial gradient to Replicate in backward (an all-reduce), and
 * transformers 5's ColwiseParallel hands the module
 * x.to_local(grad_placements=[Partial()]) so that it does. transformers
 * 4.56's hook-less styles (use_dtensor=False: "local_colwise") multiply
 * the plain input by the plain local weight shard with no hook at all:
 * the share flows back as if it were the whole gradient, a Partial
 * gradient treated as Replicate, as in torchtitan's chunked cross-entropy
 * before its fix (PR #3412). The schedule all-reduces it (autodiff); the
 * training PyTorch runs does not, and its loss drifts above the
 * single-GPU one. */
#include <stdlib.h>
#include "compiler/sema/grad_placements.h"
#include "compiler/sema/partial_grad.h"
#include "util/xalloc.h"

/* The plain replicated float input of node n whose gradient the node
 * computes as a share: n multiplies it by a weight sharded over the
 * ranks. -1 when there is none. */
static int shared_input(const tp_graph *g, const tp_gnode *n)
{
    if (n->kind != TP_GNODE_OP || n->op.weight < 0 || g->params[n->op.weight].pl.kind == TP_REPLICATE)
        return -1;
    for (int k = 0; k < n->op.nin; k++) {
        int v = tp_graph_resolve(g, n->op.in[k]);
        const tp_gvalue *x = &g->values[v];
        if (x->dtype != TP_I32 && !x->dtensor && x->pl[0].kind == TP_REPLICATE)
            return v;
    }
    return -1;
}

static void report(const tp_graph *g, tp_diags *diags, const tp_gnode *n, int v)
{
    const tp_style *s = n->module->style;
    tp_diag *d = tp_diag_add(diags, TP_ERROR, tp_entry_span(s), "partial-grad",
                             "\"%s\" (transformers %s: %s) has no hook: each rank multiplies the plain, "
                             "replicated '%s' by its rows of '%s', so in backward it gets only its share of that "
                             "tensor's gradient, a Partial(sum); nothing sums the shares, and autograd carries "
                             "each rank's partial sum on as the whole gradient (Replicate): every gradient before "
                             "'%s' is silently wrong", s->hf->name, s->hf->version, s->hf->transformers,
                             g->values[v].name, g->params[n->op.weight].name, n->module->fqn);
    tp_diag_help(d, "use \"colwise\" (transformers 5: its hook makes the input a DTensor and hands the module "
                    "to_local(grad_placements=[Partial()]), so the shares are all-reduced in backward); a "
                    "hook-less local style is for inference under torch.no_grad()");
    tp_diag_fixit(d, s->call->span, "\"colwise\"");
}

void tp_check_partial_grads(const tp_analysis *a, tp_diags *diags)
{
    const tp_graph *g = &a->graph;
    bool *labelled = tp_to_local_derived(a);
    /* one finding per plan entry: a pattern is every layer's */
    const tp_style **seen = NULL;
    int nseen = 0, cap = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const tp_gnode *n = &g->nodes[i];
        const tp_style *s = n->module ? n->module->style : NULL;
        if (n->removed || n->op.phase != TP_PHASE_FORWARD || !s || !s->hf || !s->hf->no_hooks)
            continue;
        int v = shared_input(g, n);
        int k = 0;
        while (k < nseen && seen[k] != s)
            k++;
        if (v < 0 || k < nseen || labelled[v])
            continue;
        seen = tp_xgrow(seen, nseen, &cap, sizeof *seen, 8);
        seen[nseen++] = s;
        report(g, diags, n, v);
    }
    free(seen);
    free(labelled);
}
