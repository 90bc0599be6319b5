/* operators.c: a + b and a * b of tensors, and a tensor times a number,
 * with broadcasting and DTensor's pointwise propagation for DTensors; for
 * plain tensors, the layouts each rank combines must agree. */
#include "compiler/front/astutil.h"
#include "compiler/sema/check_impl.h"

/* Align b's dims with a's from the right, as broadcasting does. */
static tp_placement broadcast_pl(const tp_val *from, const tp_val *to)
{
    tp_placement p = tp_placement_norm(from->pl, from->rank);
    if (p.kind == TP_SHARD)
        p.dim += to->rank - from->rank;
    return p;
}

static int nshards(const tp_val *v) { return v->pl.kind == TP_SHARD; }

/* Placement p of a `big`-rank result, seen from an operand of rank r. */
static tp_placement for_operand(tp_placement p, int r, const tp_val *big)
{
    if (p.kind == TP_SHARD)
        p.dim -= big->rank - r;
    return p;
}

/* DTensor's pointwise propagation for + and * (torch/distributed/tensor/
 * _ops/_pointwise_ops.py): a sum of partials stays partial; a partial plus
 * a replicated value keeps the partial (the replicated side is divided
 * locally); a partial times a replicated value is partial; otherwise the
 * operand with the most shards leads (the first on a tie) and the other is
 * redistributed to match, a Partial going to the leader's Shard by a
 * reduce-scatter. Returns the result's placement. */
static tp_placement dtensor_pointwise(interp *I, int op, tp_val **a, tp_val **b, const tp_val *big, tp_span span)
{
    tp_placement A = broadcast_pl(*a, big), B = broadcast_pl(*b, big), target;
    bool pa = tp_placement_is_partial(A), pb = tp_placement_is_partial(B);
    if (pa && pb) {
        if (op == '*')          /* (sum a_i)(sum b_i): one side must be reduced */
            *b = tp_redistribute(I, *b, tp_replicate(), NULL, span, true);
        return tp_partial();
    }
    if ((pa && B.kind == TP_REPLICATE) || (pb && A.kind == TP_REPLICATE)) {
        tp_val **r = pa ? b : a;
        if (op == '+')
            *r = tp_redistribute(I, *r, tp_partial(), NULL, span, true);   /* local divide */
        return tp_partial();
    }
    target = nshards(*b) > nshards(*a) ? B : A;
    *a = tp_redistribute(I, *a, for_operand(target, (*a)->rank, big), NULL, span, true);
    *b = tp_redistribute(I, *b, for_operand(target, (*b)->rank, big), NULL, span, true);
    return target;
}

iv tp_op_scale(interp *I, const tp_node *e, tp_val *x, double factor)
{
    tp_val *out = tp_result_like(I, x, x->rank, x->shape, x->dimname, e->span);
    out->gather_comm = x->gather_comm;
    out->gather_dim = x->gather_dim;
    tp_ir_op *op = &tp_record_op(I, TP_OP_SCALE, out, "scale", x, NULL, NULL)->op;
    op->scale = factor;
    /* the factor is a tensor of the activations' dtype, as Gemma makes its
     * normaliser: torch.tensor(hidden ** 0.5, dtype=h.dtype) */
    op->scale_in_dtype = true;
    return tp_tensor_iv(out);
}

iv tp_op_binary(interp *I, const tp_node *e, int op, tp_val *a, tp_val *b)
{
    tp_span span = e->span;
    const char *opname = op == '+' ? "add" : op == '*' ? "mul" : "op";
    if (op != '+' && op != '*') {
        tp_diag_add(I->d, TP_ERROR, span, "model", "tensors support only + and *");
        I->stop = true;
        return tp_none_iv;
    }
    tp_packed_misuse(I, a, opname, span);
    tp_packed_misuse(I, b, opname, span);
    tp_val *big = a->rank >= b->rank ? a : b, *small = big == a ? b : a;
    for (int i = 1; i <= small->rank; i++)
        tp_grown_meet(I, big->shape[big->rank - i], small->shape[small->rank - i], span,
                      op == '+' ? "an add" : "a mul", "a tensor");
    tp_val *out = tp_result_like(I, big, big->rank, big->shape, big->dimname, span);
    out->poisoned = a->poisoned || b->poisoned;
    char pa[24], pb[24];
    if (a->dtensor != b->dtensor) {
        tp_val *plain = a->dtensor ? b : a, *dt = a->dtensor ? a : b;
        const tp_style *ps = dt->producer ? dt->producer->style : NULL;
        tp_diag *g = tp_finding(I, TP_ERROR, ps ? tp_entry_span(ps) : span, "mixed-tensor", a, b,
                                "%s of a DTensor (%s, from '%s') and a plain tensor (%s): PyTorch raises "
                                "'got mixed torch.Tensor and DTensor'", opname, tp_pl_str(dt->pl, dt->rank, pa),
                                dt->producer ? dt->producer->fqn : "an op", tp_pl_str(plain->pl, plain->rank, pb));
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "the %s is here", opname);
        if (g && plain->producer)
            tp_diag_note_at(g, plain->producer->style ? tp_entry_span(plain->producer->style) : plain->span,
                            "the plain tensor comes from '%s'", plain->producer->fqn);
        if (g)
            tp_diag_help(g, "make both operands the same kind: use_local_output=True on the DTensor's producer, "
                            "or use_local_output=False on the other");
        /* an explicit use_local_output=False on the DTensor's producer is the
         * edit that makes both plain */
        if (g && ps && tp_call_kw(ps->call, "use_local_output") &&
            tp_call_kw(ps->call, "use_local_output")->kind == N_FALSE)
            tp_fix_set_kwarg(g, ps->call, "use_local_output", "True");
        out->poisoned = true;
        return tp_tensor_iv(out);
    }
    tp_placement A = broadcast_pl(a, big), B = broadcast_pl(b, big);
    if (a->dtensor) {
        out->pl = dtensor_pointwise(I, op, &a, &b, big, span);
        tp_record_op(I, op == '+' ? TP_OP_ADD : TP_OP_MUL, out, opname, a, b, NULL);
        return tp_tensor_iv(out);
    }
    /* Plain tensors: each rank combines its local pieces, so the truths
     * must agree (a product of a partial sum with a replicated factor is
     * still a partial sum). */
    bool ok = tp_placement_eq(A, B, big->rank);
    if (ok && op == '*' && tp_placement_is_partial(A))
        ok = false;                        /* (sum a_i)(sum b_i) != sum a_i b_i */
    if (!ok && op == '*' && (tp_placement_is_partial(A) != tp_placement_is_partial(B)) &&
        (A.kind == TP_REPLICATE || B.kind == TP_REPLICATE)) {
        out->pl = tp_partial();
        ok = true;
    }
    if (!ok) {
        tp_val *odd = small->pl.kind != TP_REPLICATE ? small : big;
        tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(odd, span), "layout-mismatch", a, b,
                                "%s of two plain tensors that are laid out differently on the ranks (%s and %s): %s",
                                opname, tp_pl_str(A, big->rank, pa), tp_pl_str(B, big->rank, pb),
                                (A.kind == TP_SHARD || B.kind == TP_SHARD) ? "the local shapes differ, or broadcast silently"
                                                                      : "the partial sums are counted tp times");
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "the %s is here", opname);
        if (g && a->producer)
            tp_diag_note_at(g, a->producer->style ? tp_entry_span(a->producer->style) : a->span,
                            "left operand (%s) from '%s'", pa, a->producer->fqn);
        if (g && b->producer)
            tp_diag_note_at(g, b->producer->style ? tp_entry_span(b->producer->style) : b->span,
                            "right operand (%s) from '%s'", pb, b->producer->fqn);
        if (g)
            tp_diag_help(g, "give both operands the same layout, e.g. the same output_layouts on both producers");
        out->poisoned = true;
    }
    tp_record_op(I, op == '+' ? TP_OP_ADD : TP_OP_MUL, out, opname, a, b, NULL);
    return tp_tensor_iv(out);
}
