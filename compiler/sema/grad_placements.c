/* grad_placements.c: to_local's gradient label against what the ops on
 * the local tensor make its gradient (tpcc --train).
 *
 * to_local(x, grad_placements=P) hands the model a plain local tensor;
 * its backward makes the local gradient a DTensor labelled P with no check
 * (DTensor.from_local) and sends it on to x's producer. What each rank's
 * local gradient is depends on the ops that read the local tensor:
 *  - an op every rank runs the same way passes its result's gradient on;
 *  - a hook-less op multiplying the replicated local tensor by a sharded
 *    weight (transformers 4.56's "local_colwise", a matmul with a weight's
 *    local shard) contributes each rank's share only: Partial(sum);
 *  - anything else (a style's hook labelling it, which reduces in its own
 *    backward; an op on a local shard) contributes the whole gradient, laid
 *    out as x: Replicate, or x's Shard.
 * A share labelled Replicate is torchtitan's chunked cross-entropy before
 * PR #3412: the partial sums go on as the whole gradient and the loss
 * drifts above the single-GPU one (partial-grad). A whole gradient
 * labelled Partial is summed tp times; one labelled with the wrong Shard
 * or Replicate is read as other data (grad-placements). */
#include <stdlib.h>
#include "compiler/plan/plan.h"
#include "compiler/sema/grad_placements.h"
#include "util/xalloc.h"

typedef enum { GRAD_NONE, GRAD_WHOLE, GRAD_PARTIAL, GRAD_MIXED } grad_kind;

static grad_kind join(grad_kind a, grad_kind b)
{
    if (a == GRAD_NONE || a == b)
        return b;
    return b == GRAD_NONE ? a : GRAD_MIXED;
}

static const tp_gvalue *val(const tp_graph *g, int v) { return &g->values[tp_graph_resolve(g, v)]; }
static bool is_float(const tp_graph *g, int v) { return val(g, v)->dtype != TP_I32; }

/* Whether every rank runs n on the same data with the same weights. */
static bool same_on_every_rank(const tp_graph *g, const tp_gnode *n)
{
    bool same = n->op.out < 0 || val(g, n->op.out)->pl[0].kind == TP_REPLICATE;
    for (int k = 0; k < n->op.nin; k++)
        same &= !is_float(g, n->op.in[k]) || val(g, n->op.in[k])->pl[0].kind == TP_REPLICATE;
    for (int p = 0; p < 2; p++) {
        int w = p ? n->op.bias : n->op.weight;
        same &= w < 0 || g->params[w].pl.kind == TP_REPLICATE;
    }
    return same;
}

static bool hookless_sharded(const tp_graph *g, const tp_gnode *n)
{
    const tp_style *s = n->module ? n->module->style : NULL;
    return s && s->hf && s->hf->no_hooks && n->op.weight >= 0 && g->params[n->op.weight].pl.kind != TP_REPLICATE;
}

static bool forward_op(const tp_gnode *n) { return !n->removed && n->op.phase == TP_PHASE_FORWARD; }

/* What node n contributes to the gradient of its input u; kinds[] holds
 * the kinds of every later value. */
static grad_kind contribution(const tp_graph *g, const tp_gnode *n, int u, const grad_kind *kinds)
{
    if (n->kind == TP_GNODE_REDIST)
        return GRAD_WHOLE;
    if (val(g, u)->pl[0].kind == TP_REPLICATE && hookless_sharded(g, n))
        return GRAD_PARTIAL;
    if (n->op.out < 0 || !same_on_every_rank(g, n) || val(g, n->op.out)->dtensor)
        return GRAD_WHOLE;
    int out = tp_graph_resolve(g, n->op.out);
    return out == tp_graph_resolve(g, g->loss) ? GRAD_WHOLE : kinds[out];
}

/* The kind of every plain value's gradient, later nodes first; a view's
 * gradient is its base's too, up to the first DTensor. */
static grad_kind *gradient_kinds(const tp_graph *g)
{
    grad_kind *kinds = tp_xcalloc((size_t)g->nvalues + 1, sizeof *kinds);
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const tp_gnode *n = &g->nodes[i];
        if (!forward_op(n))
            continue;
        for (int k = 0; k < n->op.nin; k++) {
            if (!is_float(g, n->op.in[k]))
                continue;
            grad_kind c = contribution(g, n, n->op.in[k], kinds);
            for (int u = tp_graph_resolve(g, n->op.in[k]); u >= 0; u = g->values[u].alias_of) {
                u = tp_graph_resolve(g, u);
                kinds[u] = join(kinds[u], c);
                if (g->values[u].dtensor)
                    break;
            }
        }
    }
    return kinds;
}

bool *tp_to_local_derived(const tp_analysis *a)
{
    const tp_graph *g = &a->graph;
    bool *from = tp_xcalloc((size_t)g->nvalues + 1, sizeof *from);
    for (int i = 0; i < a->nto_locals; i++)
        from[tp_graph_resolve(g, a->to_locals[i].view)] = true;
    for (int v = 0; v < g->nvalues; v++)    /* views come after their bases */
        if (g->values[v].alias_of >= 0 && from[tp_graph_resolve(g, g->values[v].alias_of)])
            from[v] = true;
    for (int i = 0; i < g->nnodes; i++) {
        const tp_gnode *n = &g->nodes[i];
        if (!forward_op(n) || n->kind != TP_GNODE_OP || n->op.out < 0 || !same_on_every_rank(g, n) ||
            val(g, n->op.out)->dtensor)
            continue;
        for (int k = 0; k < n->op.nin; k++)
            if (from[tp_graph_resolve(g, n->op.in[k])])
                from[tp_graph_resolve(g, n->op.out)] = true;
    }
    return from;
}

static void report(tp_diags *diags, const tp_to_local *t, grad_kind got, tp_placement actual)
{
    char decl[32], act[32], fwd[32];
    tp_placement_str(t->declared, decl, sizeof decl);
    tp_placement_str(actual, act, sizeof act);
    tp_placement_str(t->forward, fwd, sizeof fwd);
    char *label = t->given ? tp_xasprintf("grad_placements=(%s,)", decl)
                           : tp_xasprintf("to_local() without grad_placements (the DTensor's own placement, %s)", decl);
    tp_diag *d;
    if (got == GRAD_MIXED) {
        d = tp_diag_add(diags, TP_ERROR, t->span, "partial-grad",
                        "a gradient partly Partial: the local tensor of this to_local() goes both to an op that "
                        "gives each rank a share of its gradient (a weight's local shard, no hook) and to ops that "
                        "give the whole gradient; the sum is neither, and %s mislabels part of it", label);
        tp_diag_help(d, "call to_local() once per use: grad_placements=(Partial(),) for the hook-less sharded op, "
                        "the default for the others");
    } else if (got == GRAD_PARTIAL) {
        d = tp_diag_add(diags, TP_ERROR, t->span, "partial-grad",
                        "a gradient left Partial but treated as %s: the local tensor of this to_local() is multiplied "
                        "by a weight's local shard with no hook, so in backward each rank holds only its share of "
                        "its gradient, a Partial(sum); %s labels the shares as the whole gradient, nothing sums "
                        "them, and every gradient before this point is silently wrong (as torchtitan's chunked "
                        "cross-entropy before PR #3412)", decl, label);
        tp_diag_help(d, "label the gradient as it is: to_local(..., grad_placements=(Partial(),)), whose backward "
                        "then sums the shares; or give the op a style whose hook reduces them (\"colwise\", "
                        "ColwiseParallel())");
    } else {
        d = tp_diag_add(diags, TP_ERROR, t->span, "grad-placements",
                        "%s mislabels the gradient: each rank's local gradient of this to_local() is %s, %s, so %s",
                        label, act,
                        actual.kind == TP_REPLICATE ? "the whole gradient on every rank" : "its shard of the whole gradient",
                        tp_placement_is_partial(t->declared)
                            ? "the redistribution back to the DTensor's layout sums the ranks' copies: every "
                              "gradient before this point is tp times too large"
                            : "DTensor reads it as another layout (PyTorch fails on the gradient's shape, or "
                              "computes with the wrong data)");
        tp_diag_help(d, "write grad_placements=(%s,), or leave it out (the default is the DTensor's own placement, %s)",
                     act, fwd);
    }
    free(label);
}

void tp_check_grad_placements(const tp_analysis *a, tp_diags *diags)
{
    const tp_graph *g = &a->graph;
    if (g->world <= 1 || !a->nto_locals)
        return;
    grad_kind *kinds = gradient_kinds(g);
    for (int i = 0; i < a->nto_locals; i++) {
        const tp_to_local *t = &a->to_locals[i];
        bool again = false;     /* one finding per call: a repeat()ed layer calls it once per layer */
        for (int j = 0; j < i; j++)
            again |= a->to_locals[j].span.file == t->span.file && a->to_locals[j].span.offset == t->span.offset;
        grad_kind got = kinds[tp_graph_resolve(g, t->view)];
        if (again || got == GRAD_NONE)
            continue;
        tp_placement actual = tp_placement_is_partial(t->forward) ? tp_replicate() : t->forward;
        if (got == GRAD_PARTIAL)
            actual = tp_partial();
        if (got == GRAD_MIXED || !tp_placement_eq(actual, t->declared, t->rank))
            report(diags, t, got, actual);
    }
    free(kinds);
}
