/* lower.c: the graph as the per-rank program (sched/program.h).
 *
 * Every value the graph kept becomes a buffer with the shape each rank
 * holds, numbered in the order the forward pass made them; a value merged
 * into another (-O1) becomes none: its readers read the value that
 * replaced it.
 * The weight table is the graph's, in order of first use. Names of
 * modules, plan entries and transformer layers become strings. Ranks differ
 * only in which slice they hold, which the schedule writer materialises
 * per rank. */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/model.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/plan.h"
#include "util/xalloc.h"

/* buffer_of[v]: the buffer of value v, or -1 for a merged value */
static void lower_values(const tp_graph *g, tp_ir *ir, int *buffer_of)
{
    for (int v = 0; v < g->nvalues; v++) {
        const tp_gvalue *gv = &g->values[v];
        buffer_of[v] = -1;
        if (gv->redirect >= 0)
            continue;
        tp_ir_buf b = {0};
        b.rank = gv->rank;
        memcpy(b.shape, gv->local, sizeof b.shape);
        b.dtype = gv->dtype;
        b.name = tp_xstrdup(gv->name);
        b.input = gv->input;
        b.output = gv->output;
        b.f32_only = gv->f32_only;
        b.alias_of = -1;
        buffer_of[v] = tp_ir_add_buf(ir, &b);
    }
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].redirect < 0 && g->values[v].alias_of >= 0)
            ir->bufs[buffer_of[v]].alias_of = buffer_of[tp_graph_storage(g, g->values[v].alias_of)];
}

/* Provenance as the program keeps it: strings of the model and plan,
 * which outlive the program. */
static void name_provenance(const tp_graph *g, const tp_gnode *n, tp_ir_op *op)
{
    const tp_module *layer = tp_graph_layer_of(g, n->module);
    op->module = n->module ? n->module->fqn : NULL;
    op->entry = n->entry ? n->entry->pattern : NULL;
    op->layer = layer ? layer->fqn : NULL;
}

static int buffer(const tp_graph *g, const int *buffer_of, int v)
{
    return v < 0 ? -1 : buffer_of[tp_graph_resolve(g, v)];
}

void tp_pass_lower(const tp_graph *g, tp_ir *ir)
{
    int *buffer_of = tp_xmalloc(((size_t)g->nvalues + 1) * sizeof *buffer_of);
    lower_values(g, ir, buffer_of);
    ir->params = tp_xreallocarray(NULL, (size_t)g->nparams + 1, sizeof *ir->params);
    if (g->nparams)    /* a graph without weights has no table to copy (params NULL) */
        memcpy(ir->params, g->params, (size_t)g->nparams * sizeof *ir->params);
    ir->nparams = ir->capparams = g->nparams;
    for (int i = 0; i < g->nnodes; i++) {
        const tp_gnode *n = &g->nodes[i];
        if (n->removed)
            continue;
        tp_ir_op op = n->op;
        name_provenance(g, n, &op);
        for (int o = 0; o < tp_ops[op.kind].nout; o++)
            op.outs[o] = buffer(g, buffer_of, n->op.outs[o]);
        for (int k = 0; k < op.nin; k++)
            op.in[k] = buffer(g, buffer_of, n->op.in[k]);
        tp_ir_add_op(ir, &op);
    }
    ir->world = g->world;
    if (g->param_grad) {
        ir->grad_buf = tp_xreallocarray(NULL, (size_t)g->nparams + 1, sizeof *ir->grad_buf);
        for (int p = 0; p < g->nparams; p++)
            ir->grad_buf[p] = buffer(g, buffer_of, g->param_grad[p]);
    }
    ir->loss_buf = buffer(g, buffer_of, g->loss);
    ir->label_shift = g->label_shift;
    ir->logits_buf = buffer(g, buffer_of, g->logits);
    ir->logits_pl = g->logits_pl;
    ir->logits_vocab = g->logits_vocab;
    ir->nlayers = g->nlayers;
    ir->layer_input_rank = g->layer_input_rank;
    memcpy(ir->layer_input_shape, g->layer_input_shape, sizeof ir->layer_input_shape);
    ir->layer_input_elems = g->layer_input_elems;
    free(buffer_of);
}
