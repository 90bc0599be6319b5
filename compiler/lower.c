/* lower.c: recording the lowered program while the forward pass runs.
 *
 * Every value the symbolic forward pass computes gets a buffer with its
 * local shape; ops that only relabel or view a tensor (to_local, a label,
 * view_heads) share the storage of their source. */
#include <stdlib.h>
#include <string.h>
#include "check_impl.h"
#include "xalloc.h"

int lower_buf(interp *I, tp_val *v, const char *what)
{
    if (v->buf >= 0)
        return v->buf;
    tp_ir_buf b = {0};
    b.rank = v->rank;
    for (int d = 0; d < v->rank; d++)
        b.shape[d] = local_size(I, v, d);
    b.dtype = v->is_index ? TP_I32 : TP_F32;
    const char *fqn = cur_fqn(I);
    b.name = fqn[0] ? tp_xasprintf("%s.%s", fqn, what) : tp_xstrdup(what);
    b.alias_of = -1;
    return v->buf = tp_ir_add_buf(&I->a->ir, &b);
}

void lower_view(interp *I, tp_val *view, const tp_val *of)
{
    if (of->buf < 0) {
        view->buf = -1;
        return;
    }
    view->buf = -1;
    lower_buf(I, view, "view");
    tp_ir_buf *b = &I->a->ir.bufs[view->buf];
    const tp_ir_buf *root = &I->a->ir.bufs[of->buf];
    b->alias_of = root->alias_of >= 0 ? root->alias_of : of->buf;
}

int lower_param(interp *I, tp_param *p)
{
    p = tp_param_canonical(p);
    tp_ir *ir = &I->a->ir;
    if (p->ir_index >= 0)
        return p->ir_index;
    if (ir->nparams == ir->capparams) {
        ir->capparams = ir->capparams ? 2 * ir->capparams : 256;
        ir->params = tp_xreallocarray(ir->params, (size_t)ir->capparams, sizeof *ir->params);
    }
    tp_ir_param *ip = &ir->params[ir->nparams];
    ip->param = p;
    ip->pl = tp_placement_norm(param_placement(p), p->rank);
    for (int d = 0; d < p->rank; d++)
        ip->local[d] = ip->pl.kind == TP_SHARD && ip->pl.dim == d ? p->shape[d] / I->tp : p->shape[d];
    return p->ir_index = ir->nparams++;
}

tp_ir_op *lower_op(interp *I, tp_op_kind kind, tp_val *out, const char *what, tp_val *a, tp_val *b, tp_val *c)
{
    tp_ir_op op = {0};
    op.kind = kind;
    op.weight = op.bias = -1;
    op.out = out ? lower_buf(I, out, what) : -1;
    tp_val *ins[] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (ins[i])
            op.in[op.nin++] = lower_buf(I, ins[i], "in");
    op.module = I->cur;
    op.scale = 1.0;
    int idx = tp_ir_add_op(&I->a->ir, &op);
    return &I->a->ir.ops[idx];
}

static int root_of(const tp_ir *ir, int b)
{
    while (b >= 0 && ir->bufs[b].alias_of >= 0)
        b = ir->bufs[b].alias_of;
    return b;
}

/* Remove ops whose results nobody reads (a redistribution made redundant
 * by -O1). Buffer lifetimes are tp_memplan's, derived from the ops. */
void lower_finish(interp *I)
{
    tp_ir *ir = &I->a->ir;
    int *readers = tp_xcalloc((size_t)ir->nbufs + 1, sizeof *readers);
    for (int i = 0; i < ir->nops; i++)
        for (int k = 0; k < ir->ops[i].nin; k++)
            readers[root_of(ir, ir->ops[i].in[k])]++;
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = ir->nops - 1; i >= 0; i--) {
            tp_ir_op *op = &ir->ops[i];
            if (op->dead || op->out < 0)
                continue;
            int r = root_of(ir, op->out);
            if (readers[r] || ir->bufs[r].output || r == ir->loss_buf)
                continue;
            op->dead = true;
            changed = true;
            for (int k = 0; k < op->nin; k++)
                readers[root_of(ir, op->in[k])]--;
        }
    }
    free(readers);
}
