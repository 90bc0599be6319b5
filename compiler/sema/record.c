/* record.c: recording the global graph while the forward pass runs.
 *
 * Every tensor the symbolic forward pass computes becomes a graph value
 * (the first time an op reads or writes it) with its global shape, its
 * placement and the shape each rank holds; values that only relabel or
 * view a tensor (to_local, a label, view_heads) share their source's value
 * or alias it. Every op and every layout change becomes a node, in the
 * order PyTorch runs them. The passes take it from there (passes/). And
 * every module call becomes a row of the --explain table. */
#include <stdlib.h>
#include <string.h>
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

int tp_record_value(interp *I, tp_val *v, const char *what)
{
    if (v->gv >= 0)
        return v->gv;
    tp_gvalue g = {0};
    g.rank = v->rank;
    for (int d = 0; d < v->rank; d++) {
        g.shape[d] = v->shape[d];
        g.local[d] = tp_local_size(I, v, d);
    }
    g.nmesh = 1;
    g.pl[0] = tp_placement_norm(v->pl, v->rank);
    g.dtensor = v->dtensor;
    g.dtype = v->is_index ? TP_I32 : TP_F32;
    g.alias_of = g.redirect = -1;
    const char *fqn = tp_cur_fqn(I);
    g.name = fqn[0] ? tp_xasprintf("%s.%s", fqn, what) : tp_xstrdup(what);
    return v->gv = tp_graph_add_value(&I->a->graph, &g);
}

void tp_record_view(interp *I, tp_val *view, const tp_val *of)
{
    view->gv = -1;
    if (of->gv < 0)
        return;
    tp_record_value(I, view, "view");
    I->a->graph.values[view->gv].alias_of = of->gv;
}

int tp_record_param(interp *I, tp_param *p)
{
    p = tp_param_canonical(p);
    if (p->ir_index >= 0)
        return p->ir_index;
    tp_ir_param ip = {0};
    ip.name = p->fqn;
    ip.rank = p->rank;
    memcpy(ip.shape, p->shape, sizeof ip.shape);
    memcpy(ip.logical, p->logical, sizeof ip.logical);
    ip.pl = tp_placement_norm(tp_param_placement(p), p->rank);
    ip.replicas = tp_head_replicas(I, p);
    for (int d = 0; d < p->rank; d++)
        ip.local[d] = ip.pl.kind == TP_SHARD && ip.pl.dim == d ? p->shape[d] / I->tp : p->shape[d];
    const tp_module *owner = p->owner;
    if (ip.pl.kind == TP_SHARD && owner->style && owner->style->packed) {
        ip.nsegments = owner->nsegments;
        memcpy(ip.segments, owner->segments, sizeof ip.segments);
    }
    return p->ir_index = tp_graph_add_param(&I->a->graph, &ip);
}

static tp_gnode *record_node(interp *I, tp_gnode_kind kind, tp_op_kind op, tp_val *out, const char *what,
                             tp_val *a, tp_val *b, tp_val *c)
{
    int vout = out ? tp_record_value(I, out, what) : -1;
    tp_val *ins[] = {a, b, c};
    int vin[3], nin = 0;
    for (int i = 0; i < 3; i++)
        if (ins[i])
            vin[nin++] = tp_record_value(I, ins[i], "in");
    tp_gnode *n = tp_graph_add_node(&I->a->graph, kind, op);
    n->op.out = vout;
    for (int i = 0; i < nin; i++)
        n->op.in[n->op.nin++] = vin[i];
    n->module = I->cur;
    return n;
}

tp_gnode *tp_record_op(interp *I, tp_op_kind kind, tp_val *out, const char *what, tp_val *a, tp_val *b, tp_val *c)
{
    return record_node(I, TP_GNODE_OP, kind, out, what, a, b, c);
}

tp_gnode *tp_record_redist(interp *I, tp_op_kind kind, tp_val *v, tp_val *r, const char *what)
{
    tp_gnode *n = record_node(I, TP_GNODE_REDIST, kind, r, what, v, NULL, NULL);
    n->src_id = v->id;
    n->result_id = r->id;
    return n;
}

/* Rows are reserved when a module is entered, so the table reads in call
 * order (a parent before its children), and completed when it returns. */
int tp_record_boundary(interp *I, tp_module *mod, char *inputs)
{
    tp_analysis *a = I->a;
    a->rows = tp_xgrow(a->rows, a->nrows, &a->caprows, sizeof *a->rows, 256);
    a->rows[a->nrows] = (tp_boundary){tp_xstrdup(mod->fqn[0] ? mod->fqn : "(root)"), tp_xstrdup(mod->type),
                                      mod->style, inputs, NULL};
    return a->nrows++;
}
