/* dce.c: dead-code removal on the graph.
 *
 * A node whose result nobody reads (a redistribution made redundant by
 * -O1, a gather whose reader was merged away) is marked dead, repeatedly,
 * so its own inputs can become dead too. Values are counted by their
 * storage: a view's reader keeps its source alive. The model's outputs
 * are read after the last op. An op with several outputs lives while one
 * of them is read, and stops computing those nobody reads. Dead nodes
 * stay in the graph (and in the lowered program, flagged) so the report
 * can compare them. */
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

static bool live_node(const tp_gnode *n) { return !n->removed && !n->op.dead; }

/* Whether nobody reads anything node n writes. An output of a kind with
 * several that nobody reads is no longer computed (-1); a node without
 * outputs is kept. */
static bool drop_unread_outputs(const tp_graph *g, tp_gnode *n, const int *readers, int loss)
{
    int nout = tp_ops[n->op.kind].nout, written = 0, read = 0;
    for (int o = 0; o < nout; o++) {
        if (n->op.outs[o] < 0)
            continue;
        int r = tp_graph_storage(g, n->op.outs[o]);
        written++;
        if (readers[r] || g->values[r].output || r == loss)
            read++;
        else if (nout > 1)
            n->op.outs[o] = -1;
    }
    return written > 0 && read == 0;
}

void tp_pass_dce(tp_graph *g)
{
    int *readers = tp_xcalloc((size_t)g->nvalues + 1, sizeof *readers);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; live_node(&g->nodes[i]) && k < g->nodes[i].op.nin; k++)
            readers[tp_graph_storage(g, g->nodes[i].op.in[k])]++;
    int loss = tp_graph_storage(g, g->loss);
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = g->nnodes - 1; i >= 0; i--) {
            tp_gnode *n = &g->nodes[i];
            if (!live_node(n) || !drop_unread_outputs(g, n, readers, loss))
                continue;
            n->op.dead = true;
            changed = true;
            for (int k = 0; k < n->op.nin; k++)
                readers[tp_graph_storage(g, n->op.in[k])]--;
        }
    }
    free(readers);
}
