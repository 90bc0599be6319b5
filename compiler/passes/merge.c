/* merge.c: -O1 on the graph: one redistribution per tensor and layout.
 *
 * Two rules, as the forward pass would apply them if it knew: a tensor
 * already moved to a layout is reused (q, k and v each gathering one norm
 * output become one all-gather), and moving a tensor back to the layout
 * it just came from returns the original. Redistributions are matched by
 * the forward pass's tensor identities, not by storage: a relabelled copy
 * of a tensor is another tensor with another layout history. A merged
 * node is marked removed and its result redirected, so every later reader
 * reads the kept value; nodes left without readers go in the dead-code
 * pass. The graph is complete when this runs, so flags on a merged value
 * move to the kept one here. */
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

/* A kept redistribution of one tensor: to which layout, and its result. */
typedef struct kept_move {
    tp_placement to;
    int result;          /* forward-pass id of the result */
    int next;            /* the tensor's next kept move, or -1 */
} kept_move;

typedef struct merger {
    tp_graph *g;
    int *same_as;        /* forward-pass id -> id of the tensor it was merged into, or -1 */
    int *producer;       /* forward-pass id -> kept redistribution node that made it, or -1 */
    int *value_of;       /* forward-pass id -> graph value, for ids redistributions touch */
    int *first_move;     /* forward-pass id -> its first kept move, or -1 */
    int nids;
    kept_move *moves; int nmoves, capmoves;
} merger;

static int canonical_id(const merger *m, int id)
{
    while (m->same_as[id] >= 0)
        id = m->same_as[id];
    return id;
}

/* The result of a kept move of src to `to` (placements as recorded,
 * normalised), or -1. Each tensor's moves are chained, so the lookup costs
 * the few moves of one tensor, not every move so far. */
static int find_move(const merger *m, int src, tp_placement to)
{
    for (int i = m->first_move[src]; i >= 0; i = m->moves[i].next)
        if (m->moves[i].to.kind == to.kind && m->moves[i].to.dim == to.dim)
            return m->moves[i].result;
    return -1;
}

static void remember_move(merger *m, int src, tp_placement to, int result)
{
    m->moves = tp_xgrow(m->moves, m->nmoves, &m->capmoves, sizeof *m->moves, 64);
    m->moves[m->nmoves] = (kept_move){to, result, m->first_move[src]};
    m->first_move[src] = m->nmoves++;
}

/* The id the redistribution n would produce again, or -1. */
static int earlier_result(const merger *m, const tp_gnode *n, int src)
{
    int made_by = m->producer[src];
    if (made_by >= 0 && tp_placement_eq(m->g->nodes[made_by].from, n->to, m->g->values[n->op.in[0]].rank))
        return canonical_id(m, m->g->nodes[made_by].src_id);
    return find_move(m, src, n->to);
}

/* Readers of `from` read `to`; what the forward pass said of `from` (a
 * model output, a float32-only piece of the loss) now holds for `to`. */
static void redirect(tp_graph *g, int from, int to)
{
    tp_gvalue *kept = &g->values[tp_graph_resolve(g, to)];
    kept->output |= g->values[from].output;
    kept->f32_only |= g->values[from].f32_only;
    g->values[from].redirect = to;
}

void tp_pass_merge(tp_graph *g)
{
    merger m = {.g = g};
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].kind == TP_GNODE_REDIST) {
            int hi = g->nodes[i].src_id > g->nodes[i].result_id ? g->nodes[i].src_id : g->nodes[i].result_id;
            if (hi + 1 > m.nids)
                m.nids = hi + 1;
        }
    m.same_as = tp_xmalloc(((size_t)m.nids + 1) * sizeof *m.same_as);
    m.producer = tp_xmalloc(((size_t)m.nids + 1) * sizeof *m.producer);
    m.value_of = tp_xmalloc(((size_t)m.nids + 1) * sizeof *m.value_of);
    m.first_move = tp_xmalloc(((size_t)m.nids + 1) * sizeof *m.first_move);
    for (int i = 0; i < m.nids; i++)
        m.same_as[i] = m.producer[i] = m.value_of[i] = m.first_move[i] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        tp_gnode *n = &g->nodes[i];
        if (n->kind != TP_GNODE_REDIST)
            continue;
        int src = canonical_id(&m, n->src_id);
        if (m.value_of[src] < 0)
            m.value_of[src] = n->op.in[0];
        int again = earlier_result(&m, n, src);
        if (again >= 0) {
            n->removed = true;
            m.same_as[n->result_id] = again;
            redirect(g, n->op.out, m.value_of[again]);
            continue;
        }
        m.producer[n->result_id] = i;
        m.value_of[n->result_id] = n->op.out;
        remember_move(&m, src, n->to, n->result_id);
    }
    free(m.same_as);
    free(m.producer);
    free(m.value_of);
    free(m.first_move);
    free(m.moves);
}
