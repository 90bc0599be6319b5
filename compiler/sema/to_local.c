/* to_local.c: to_local(x, grad_placements=(...)) in a forward body,
 * PyTorch's DTensor.to_local (torch/distributed/tensor/_api.py).
 *
 * Forward: the plain local tensor of DTensor x, no communication (a view of
 * x's storage). Backward (_ToTorchTensor.backward): the local gradient is
 * made a DTensor by from_local with grad_placements, without any check, and
 * flows on to x's producer as that layout; without grad_placements, x's own
 * placements with Partial made Replicate. The label is the user's claim
 * about what each rank's local gradient is; grad_placements.c checks it
 * against what the ops on the local tensor make it. */
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/front/config.h"
#include "compiler/sema/op_table.h"
#include "util/xalloc.h"

static bool refuse(interp *I, const tp_node *at, const char *msg)
{
    tp_diag_add(I->d, TP_ERROR, at->span, "model", "%s", msg);
    I->stop = true;
    return false;
}

/* One placement of grad_placements: Replicate(), Shard(d) or Partial(). */
static bool read_placement(interp *I, const tp_node *e, int rank, tp_placement *out)
{
    const char *fn = tp_call_name(e);
    if (fn && !strcmp(fn, "Replicate") && e->nkids == 1) {
        *out = tp_replicate();
        return true;
    }
    const char *reduce = tp_call_partial_op(e);
    if (reduce && strcmp(reduce, "sum"))
        return refuse(I, e, "grad_placements: tpcc models Partial sums only (Partial() is reduce_op=\"sum\")");
    if (reduce) {
        *out = tp_partial();
        return true;
    }
    int64_t d;
    const tp_node *dim = tp_call_shard_dim(e);
    if (dim) {
        if (!tp_eval_int(I->c, dim, &d))
            return refuse(I, e, "Shard(dim) needs an integer dimension");
        if (d < -rank || d >= rank)
            return refuse(I, e, "Shard dimension out of range for the tensor");
        *out = tp_placement_norm(tp_shard((int)d), rank);
        return true;
    }
    return refuse(I, e, "grad_placements holds Replicate(), Shard(dim) or Partial() (a sum)");
}

/* grad_placements=(P,): one placement, the tp mesh dimension's. */
static bool read_grad_placements(interp *I, const tp_node *call, int rank, tp_placement *out, bool *given)
{
    const tp_node *e = tp_call_kw(call, "grad_placements");
    *given = e && e->kind != N_NONE;
    if (!*given)
        return true;
    if (e->kind != N_TUPLE && e->kind != N_LIST)
        return refuse(I, e, "grad_placements is a tuple of placements, one per mesh dimension: (Partial(),)");
    if (e->nkids != 1)
        return refuse(I, e, "grad_placements needs exactly one placement: the DTensor lives on the 1-D tp mesh");
    return read_placement(I, e->kids[0], rank, out);
}

static bool known_arguments(interp *I, const tp_node *call)
{
    if (tp_call_npos(call) != 1)
        return refuse(I, call, "to_local(x, grad_placements=None) takes the DTensor and a keyword only");
    for (int k = 1; k < call->nkids; k++)
        if (call->kids[k]->name && strcmp(call->kids[k]->name, "grad_placements"))
            return refuse(I, call->kids[k], "to_local() has one keyword: grad_placements");
    return true;
}

/* The row of to_local (op_table.c), for the tensor a->args[0]. */
iv tp_to_local_apply(interp *I, const tp_op_row *op, const tp_op_args *a)
{
    (void)op;   /* its one row holds nothing the rule reads */
    const tp_node *call = a->call;
    tp_val *x = a->args[0].t;
    iv out = {IV_NONE, NULL, NULL, 0, 0, NULL, {NULL}};
    tp_to_local rec = {0};
    rec.rank = x->rank;
    rec.forward = tp_placement_norm(x->pl, x->rank);
    if (!known_arguments(I, call) || !read_grad_placements(I, call, x->rank, &rec.declared, &rec.given))
        return out;
    if (!x->dtensor) {
        if (!x->poisoned)
            tp_diag_help(tp_diag_add(I->d, TP_ERROR, call->span, "model",
                                     "to_local() of a plain tensor: it is no DTensor here (PyTorch raises "
                                     "AttributeError: 'Tensor' object has no attribute 'to_local')"),
                         "use the tensor as it is, or have the plan hand it over as a DTensor "
                         "(use_local_output=False)");
        out.kind = IV_TENSOR;
        out.t = x;
        return out;
    }
    if (!rec.given)
        rec.declared = tp_placement_is_partial(rec.forward) ? tp_replicate() : rec.forward;
    tp_record_value(I, x, "out");
    tp_val *r = tp_val_copy(I, x);
    r->dtensor = false;
    r->span = call->span;
    tp_record_view(I, r, x);
    rec.view = r->gv;
    rec.span = call->span;
    rec.module = tp_cur_fqn(I);
    tp_analysis *an = I->a;
    an->to_locals = tp_xgrow(an->to_locals, an->nto_locals, &an->capto_locals, sizeof *an->to_locals, 4);
    an->to_locals[an->nto_locals++] = rec;
    out.kind = IV_TENSOR;
    out.t = r;
    return out;
}
