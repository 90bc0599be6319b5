/* recompute.c: activation recomputation (a plan's train { recompute },
 * tpcc --recompute), after autodiff.
 *
 * Autodiff's backward reads the forward's values where the forward left
 * them, so every value a layer's backward reads lives from the forward to
 * the backward, for every layer at once. This pass decides, per
 * transformer layer (tp_graph_layer_of: one module of the largest repeat()
 * list), which of the values the layer computes stay (are saved), and
 * makes the backward compute the others again:
 *
 *   - "full" keeps what crosses the layer's boundary: its input (the
 *     residual stream, made by the layer before), and what the layers
 *     after it read (its output);
 *   - "selective" keeps the outputs of its matmuls (Linear, Conv1D, with a
 *     bias added in place) too, as Megatron's selective recomputation keeps
 *     the projections and recomputes the cheap ops: norms, RoPE,
 *     activations, elementwise ops, and the attention core. The attention's
 *     backward (attention_grad) reads q, k, v, the output and its
 *     gradient (and the log-sum-exp the output's attention writes beside
 *     it, attention_stats.c, after this pass); what selective recomputes
 *     of the attention is its output, which o_proj's weight gradient and
 *     attention_grad read, and with it those statistics.
 *
 * A value the backward reads and the layer does not keep is recomputed,
 * with every value of the layer it is computed from that is not kept: the
 * forward nodes that wrote them, cloned in program order into a block of
 * the backward just before the first backward node that reads one of the
 * layer's recomputed values, each writing a new value. The backward nodes
 * read the new values (a view of a recomputed value becomes the same view
 * of the new one), so the forward's own values die at their last forward
 * reader and the memory plan reuses their bytes.
 *
 * Layout changes inside a layer (the all-gathers and reduce-scatters of
 * sequence parallelism, the all-reduces of Rowwise outputs) are
 * recomputed like any op rather than kept: a collective on the same
 * inputs returns the same bits, and a gathered tensor is tp times the
 * shard it is gathered from, so keeping it would keep the largest
 * activation of the layer. Every rank clones the same nodes in the same
 * order, so the recomputed collectives match across ranks.
 *
 * A recomputed node runs the forward's kernel on the same inputs (the
 * kept values are the forward's own), so it writes the same bits and the
 * gradients are those without recomputation, exactly. The clones are
 * backward nodes (phase) marked recompute, with the provenance of the
 * forward node they repeat. */
#include <stdbool.h>
#include <stdlib.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

/* One layer's recomputation: the first backward node that reads a value
 * the layer recomputes. */
typedef struct block {
    const struct tp_module *layer;
    int at;
} block;

typedef struct recompute {
    tp_graph *g;
    tp_recompute mode;
    int nforward;                          /* the forward's nodes: the leading TP_PHASE_FORWARD ones */
    int nstorage;                          /* values before the pass: what the per-value arrays index */
    const struct tp_module **home;         /* by storage: the layer of its first forward writer */
    bool *local;                           /* by storage: written in its home layer only */
    bool *kept;                            /* by storage: saved for the backward */
    bool *needed;                          /* by storage: recomputed */
    bool *again;                           /* by forward node: cloned into the backward */
    int *copy;                             /* by value: its recomputed counterpart, -1 for none yet */
    block *blocks; int nblocks, capblocks; /* in the order of the layers' first forward nodes */
} recompute;

static const struct tp_module *layer_of_node(const recompute *R, int i)
{
    return tp_graph_layer_of(R->g, R->g->nodes[i].module);
}

static bool live(const tp_gnode *n) { return !n->removed && !n->op.dead; }

static int nout(const tp_gnode *n) { return tp_ops[n->op.kind].nout; }

static int storage(const recompute *R, int v) { return tp_graph_storage(R->g, v); }

/* A value the layers own and do not keep: what recomputation may drop. */
static bool droppable(const recompute *R, int s)
{
    return s >= 0 && s < R->nstorage && R->local[s] && !R->kept[s];
}

/* Each storage's home layer, and whether only that layer writes it. */
static void find_homes(recompute *R)
{
    bool *written = tp_xcalloc((size_t)R->nstorage + 1, sizeof *written);
    for (int i = 0; i < R->nforward; i++) {
        const tp_gnode *n = &R->g->nodes[i];
        if (!live(n))
            continue;
        const struct tp_module *layer = layer_of_node(R, i);
        for (int o = 0; o < nout(n); o++) {
            int s = storage(R, n->op.outs[o]);
            if (s < 0)
                continue;
            if (!written[s]) {
                written[s] = true;
                R->home[s] = layer;
                R->local[s] = layer && !R->g->values[s].input && !R->g->values[s].output;
            } else if (R->home[s] != layer) {
                R->local[s] = false;
            }
        }
    }
    free(written);
}

static bool is_matmul(const tp_gnode *n)
{
    return n->kind == TP_GNODE_OP && (n->op.kind == TP_OP_MATMUL || n->op.kind == TP_OP_CONV1D);
}

/* What each layer keeps: what other layers (or the model around them)
 * read, and under selective its matmuls' outputs. */
static void find_kept(recompute *R)
{
    for (int i = 0; i < R->nforward; i++) {
        const tp_gnode *n = &R->g->nodes[i];
        if (!live(n))
            continue;
        const struct tp_module *layer = layer_of_node(R, i);
        for (int k = 0; k < n->op.nin; k++) {
            int s = storage(R, n->op.in[k]);
            if (s >= 0 && R->home[s] != layer)
                R->kept[s] = true;
        }
        int out = storage(R, n->op.out);
        if (R->mode == TP_RECOMPUTE_SELECTIVE && is_matmul(n) && out >= 0)
            R->kept[out] = true;
    }
}

static block *block_of(recompute *R, const struct tp_module *layer)
{
    for (int b = 0; b < R->nblocks; b++)
        if (R->blocks[b].layer == layer)
            return &R->blocks[b];
    return NULL;
}

/* The values the backward reads and the layers drop, and where each
 * layer's block goes: before the first backward node reading one. */
static void find_needed(recompute *R)
{
    for (int i = 0; i < R->nforward; i++) {    /* the blocks in the layers' order */
        const struct tp_module *layer = layer_of_node(R, i);
        if (layer && live(&R->g->nodes[i]) && !block_of(R, layer)) {
            R->blocks = tp_xgrow(R->blocks, R->nblocks, &R->capblocks, sizeof *R->blocks, 16);
            R->blocks[R->nblocks++] = (block){layer, -1};
        }
    }
    for (int i = R->nforward; i < R->g->nnodes; i++) {
        const tp_gnode *n = &R->g->nodes[i];
        for (int k = 0; k < n->op.nin; k++) {
            int s = storage(R, n->op.in[k]);
            if (!droppable(R, s))
                continue;
            R->needed[s] = true;
            block *b = block_of(R, R->home[s]);
            if (b->at < 0)
                b->at = i;
        }
    }
}

/* The forward nodes that compute the needed values, and the dropped values
 * those read: needed too. Producers come before their readers, so one
 * sweep backwards closes the set. */
static void find_again(recompute *R)
{
    for (int i = R->nforward - 1; i >= 0; i--) {
        const tp_gnode *n = &R->g->nodes[i];
        if (!live(n))
            continue;
        for (int o = 0; o < nout(n); o++) {
            int s = storage(R, n->op.outs[o]);
            R->again[i] |= s >= 0 && droppable(R, s) && R->needed[s];
        }
        if (!R->again[i])
            continue;
        for (int k = 0; k < n->op.nin; k++) {
            int s = storage(R, n->op.in[k]);
            if (droppable(R, s))
                R->needed[s] = true;
        }
    }
}

/* A new value shaped like value v, viewing `alias_of` (-1: its own storage). */
static int clone_value(recompute *R, int v, int alias_of)
{
    tp_gvalue c = R->g->values[v];
    c.name = tp_xasprintf("%s.recomputed", c.name);
    c.alias_of = alias_of;
    c.redirect = -1;
    c.input = c.output = false;
    return tp_graph_add_value(R->g, &c);
}

/* What a recomputed node or the backward reads for value v: the
 * recomputed value (or the same view of it) where v's storage is
 * recomputed, else v. With `make`, a storage not yet recomputed gets its
 * new value (for the recomputed node that writes it). */
static int mapped(recompute *R, int v, bool make)
{
    int r = tp_graph_resolve(R->g, v), s = storage(R, v);
    if (r < 0 || r >= R->nstorage || s >= R->nstorage || !R->needed[s])
        return v;
    if (R->copy[s] < 0) {
        if (!make)
            return v;
        R->copy[s] = clone_value(R, s, -1);
    }
    if (r == s)
        return R->copy[s];
    if (R->copy[r] < 0)
        R->copy[r] = clone_value(R, r, R->copy[s]);
    return R->copy[r];
}

static tp_gnode *append(tp_graph *g, const tp_gnode *n)
{
    tp_gnode *out = tp_graph_add_node(g, n->kind, n->op.kind);
    *out = *n;
    return out;
}

/* The layer's recomputed nodes, in program order, from the forward nodes
 * kept in `forward`. */
static void emit_block(recompute *R, const tp_gnode *forward, const struct tp_module *layer)
{
    for (int i = 0; i < R->nforward; i++) {
        if (!R->again[i] || tp_graph_layer_of(R->g, forward[i].module) != layer)
            continue;
        tp_gnode n = forward[i];
        for (int k = 0; k < n.op.nin; k++)
            n.op.in[k] = mapped(R, n.op.in[k], false);
        for (int o = 0; o < nout(&n); o++)
            if (n.op.outs[o] >= 0)
                n.op.outs[o] = mapped(R, n.op.outs[o], true);
        n.op.phase = TP_PHASE_BACKWARD;
        n.op.recompute = true;
        append(R->g, &n);
    }
}

/* The node table again: the forward, then the backward with each layer's
 * block before its first reader, every backward read of a dropped value
 * redirected to its recomputed counterpart. */
static void rebuild(recompute *R)
{
    tp_graph *g = R->g;
    tp_gnode *old = g->nodes;
    int nold = g->nnodes;
    g->nodes = NULL;
    g->nnodes = g->capnodes = 0;
    for (int i = 0; i < R->nforward; i++)
        append(g, &old[i]);
    for (int i = R->nforward; i < nold; i++) {
        for (int b = 0; b < R->nblocks; b++)
            if (R->blocks[b].at == i)
                emit_block(R, old, R->blocks[b].layer);
        tp_gnode n = old[i];
        for (int k = 0; k < n.op.nin; k++)
            n.op.in[k] = mapped(R, n.op.in[k], false);
        append(g, &n);
    }
    free(old);
}

void tp_pass_recompute(tp_graph *g, tp_recompute mode)
{
    if (mode == TP_RECOMPUTE_NONE || !g->nlayers)
        return;
    recompute R = {.g = g, .mode = mode, .nstorage = g->nvalues};
    while (R.nforward < g->nnodes && g->nodes[R.nforward].op.phase == TP_PHASE_FORWARD)
        R.nforward++;
    size_t n = (size_t)g->nvalues + 1;
    R.home = tp_xcalloc(n, sizeof *R.home);
    R.local = tp_xcalloc(n, sizeof *R.local);
    R.kept = tp_xcalloc(n, sizeof *R.kept);
    R.needed = tp_xcalloc(n, sizeof *R.needed);
    R.again = tp_xcalloc((size_t)R.nforward + 1, sizeof *R.again);
    find_homes(&R);
    find_kept(&R);
    find_needed(&R);
    find_again(&R);
    R.copy = tp_xreallocarray(NULL, n, sizeof *R.copy);
    for (int v = 0; v < g->nvalues; v++)
        R.copy[v] = -1;
    rebuild(&R);
    free(R.home);
    free(R.local);
    free(R.kept);
    free(R.needed);
    free(R.again);
    free(R.copy);
    free(R.blocks);
}
