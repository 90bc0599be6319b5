/* fuse.c: -O1 on the graph: elementwise ops that read memory once.
 *
 * A SwiGLU MLP computes act(gate) * up as a silu and a mul: two passes over
 * the ffn-wide activations, and a silu result written and read back. When
 * the silu's result is read by that mul only (either operand) and both
 * operands hold as many elements (no broadcast), the mul becomes a
 * silu_mul of the silu's input and the other operand, and the silu, now
 * unread, goes in the dead-code pass. The graph is the global one before
 * autodiff, so a training schedule differentiates silu_mul itself
 * (silu_mul_grad: both gradients in one pass, silu recomputed rather than
 * kept). What the fused op computes is what the pair computes (the
 * kernels share the SiLU); -O0 keeps the pair. */
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

static bool live(const tp_gnode *n) { return !n->removed && !n->op.dead; }

/* Whether a node between `from` and `to` (exclusive) writes over storage s:
 * an op working in place on the silu's input would change what the fused
 * op reads. */
static bool written_between(const tp_graph *g, int from, int to, int s)
{
    for (int i = from + 1; i < to; i++)
        for (int o = 0; live(&g->nodes[i]) && o < tp_ops[g->nodes[i].op.kind].nout; o++)
            if (g->nodes[i].op.outs[o] >= 0 && tp_graph_storage(g, g->nodes[i].op.outs[o]) == s)
                return true;
    return false;
}

/* The silu node whose result mul operand k is, when fusing it is sound;
 * else -1. */
static int fusable_silu(const tp_graph *g, const tp_gnode *mul, int k, const int *silu_of, const int *readers)
{
    const int v = tp_graph_resolve(g, mul->op.in[k]), s = tp_graph_storage(g, v);
    const int at = silu_of[s];
    if (at < 0 || readers[s] != 1 || g->values[v].output || g->values[s].output)
        return -1;
    const tp_gnode *silu = &g->nodes[at];
    const int x = silu->op.in[0];
    if (tp_gvalue_local_elems(&g->values[tp_graph_resolve(g, mul->op.in[1 - k])]) !=
            tp_gvalue_local_elems(&g->values[v]) ||
        written_between(g, at, (int)(mul - g->nodes), tp_graph_storage(g, x)))
        return -1;
    return at;
}

void tp_pass_fuse(tp_graph *g)
{
    /* by storage value: how many live ops read it (the loss and the model's
     * outputs are read after the last op), and the live silu writing it */
    int *readers = tp_xcalloc((size_t)g->nvalues + 1, sizeof *readers);
    int *silu_of = tp_xmalloc(((size_t)g->nvalues + 1) * sizeof *silu_of);
    for (int v = 0; v < g->nvalues; v++)
        silu_of[v] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const tp_gnode *n = &g->nodes[i];
        for (int k = 0; live(n) && k < n->op.nin; k++)
            readers[tp_graph_storage(g, n->op.in[k])]++;
        /* a silu written into its own storage, not over a view of another */
        if (live(n) && n->op.kind == TP_OP_SILU && g->values[tp_graph_resolve(g, n->op.out)].alias_of < 0)
            silu_of[tp_graph_resolve(g, n->op.out)] = i;
    }
    if (g->loss >= 0)
        readers[tp_graph_storage(g, g->loss)]++;
    if (g->logits >= 0)
        readers[tp_graph_storage(g, g->logits)]++;
    for (int i = 0; i < g->nnodes; i++) {
        tp_gnode *n = &g->nodes[i];
        if (!live(n) || n->kind != TP_GNODE_OP || n->op.kind != TP_OP_MUL)
            continue;
        for (int k = 0; k < 2; k++) {
            int at = fusable_silu(g, n, k, silu_of, readers);
            if (at < 0)
                continue;
            int other = n->op.in[1 - k];
            readers[tp_graph_storage(g, n->op.in[k])]--;
            n->op.kind = TP_OP_SILU_MUL;
            n->op.in[0] = g->nodes[at].op.in[0];
            n->op.in[1] = other;
            readers[tp_graph_storage(g, n->op.in[0])]++;
            break;
        }
    }
    free(readers);
    free(silu_of);
}
