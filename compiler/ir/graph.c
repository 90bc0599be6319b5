/* graph.c: the global SPMD graph's containers (see graph.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/model.h"
#include "compiler/ir/graph.h"
#include "util/xalloc.h"

void tp_graph_init(tp_graph *g, int64_t world)
{
    memset(g, 0, sizeof *g);
    g->world = world;
    g->loss = g->logits = -1;
    g->label_shift = 1;
}

void tp_graph_free(tp_graph *g)
{
    for (int i = 0; i < g->nvalues; i++)
        free(g->values[i].name);
    free(g->values);
    free(g->nodes);
    free(g->params);
    free(g->param_grad);
    free(g->param_partial_at);
    memset(g, 0, sizeof *g);
}

int tp_graph_add_value(tp_graph *g, const tp_gvalue *v)
{
    g->values = tp_xgrow(g->values, g->nvalues, &g->capvalues, sizeof *g->values, 1024);
    g->values[g->nvalues] = *v;
    return g->nvalues++;
}

int tp_graph_add_param(tp_graph *g, const tp_ir_param *p)
{
    g->params = tp_xgrow(g->params, g->nparams, &g->capparams, sizeof *g->params, 256);
    g->params[g->nparams] = *p;
    return g->nparams++;
}

tp_gnode *tp_graph_add_node(tp_graph *g, tp_gnode_kind kind, tp_op_kind op)
{
    g->nodes = tp_xgrow(g->nodes, g->nnodes, &g->capnodes, sizeof *g->nodes, 1024);
    tp_gnode *n = &g->nodes[g->nnodes++];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->op.kind = op;
    for (int o = 0; o < TP_MAX_OUTS; o++)
        n->op.outs[o] = -1;
    n->op.weight = n->op.bias = -1;
    n->op.scale = 1.0;
    n->src_id = n->result_id = -1;
    return n;
}

int tp_graph_resolve(const tp_graph *g, int v)
{
    while (v >= 0 && g->values[v].redirect >= 0)
        v = g->values[v].redirect;
    return v;
}

int tp_graph_storage(const tp_graph *g, int v)
{
    v = tp_graph_resolve(g, v);
    while (v >= 0 && g->values[v].alias_of >= 0)
        v = tp_graph_resolve(g, g->values[v].alias_of);
    return v;
}

int64_t tp_gvalue_local_elems(const tp_gvalue *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        n *= v->local[i];
    return n;
}

const struct tp_module *tp_graph_layer_of(const tp_graph *g, const struct tp_module *m)
{
    for (; m && m->parent; m = m->parent)
        if (m->parent->kind == TP_MOD_LIST && m->parent->nkids == g->nlayers)
            return m;
    return NULL;
}
