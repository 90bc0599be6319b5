/* layout.c: what every op rule does to a value's layout, whichever op it
 * is (the primitives, the leaf modules, the tensor operators and the
 * loss): a result inheriting its input's layout facts, the plan entry a
 * finding points at, a Partial input resolved before a non-linear op, and
 * the dimensions an op needs whole. */
#include "compiler/sema/check_impl.h"

/* The dimension v is sharded on, or -1. */
int tp_shard_dim(const tp_val *v)
{
    tp_placement p = tp_placement_norm(v->pl, v->rank);
    return p.kind == TP_SHARD ? p.dim : -1;
}

/* A fresh result with x's layout facts (placement, DTensor-ness, poison). */
tp_val *tp_result_like(interp *I, const tp_val *x, int rank, const int64_t *shape, const char *const *names,
                       tp_span span)
{
    tp_val *r = tp_val_new(I, rank, shape, names);
    r->pl = x->pl;
    r->dtensor = x->dtensor;
    r->poisoned = x->poisoned;
    r->shard_cause = x->shard_cause;
    r->partial_cause = x->partial_cause;
    r->logical_last = x->logical_last;
    r->replicated_heads = x->replicated_heads;
    r->heads_diag = x->heads_diag;
    r->span = span;
    return r;
}

/* The plan entry behind a value's layout, else the model location. */
tp_span tp_cause_span(const tp_val *x, tp_span span)
{
    if (x->shard_cause)
        return tp_entry_span(x->shard_cause);
    return x->partial_cause ? tp_entry_span(x->partial_cause) : span;
}

/* A Partial value reaching a non-linear op: DTensor all-reduces it
 * implicitly; a plain tensor computes nonsense. */
tp_val *tp_resolve_partial(interp *I, tp_val *x, const char *op, tp_span span)
{
    if (!tp_placement_is_partial(x->pl))
        return x;
    if (x->dtensor)
        return tp_redistribute(I, x, tp_replicate(), NULL, span, true);
    tp_diag *g = tp_finding(I, TP_ERROR, x->partial_cause ? tp_entry_span(x->partial_cause) : span, "partial-nonlinear", x,
                            NULL, "%s is applied to a plain tensor holding partial sums: every rank transforms its "
                            "summand, and the results no longer add up", op);
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "%s is applied here", op);
    if (g)
        tp_diag_help(g, "reduce first: output_layouts=Replicate() (all-reduce) or Shard(d) (reduce-scatter)");
    x = tp_val_copy(I, x);
    x->pl = tp_replicate();
    x->poisoned = true;
    return x;
}

/* An op that needs some dimensions whole on every rank: a shard of one of
 * them is the error `whole` names. */
bool tp_check_whole(interp *I, const char *op, const tp_op_whole *whole, tp_val *x, tp_span span)
{
    int d = tp_shard_dim(x);
    for (int i = 0; i < 3 && whole->dims[i]; i++)
        if (d >= 0 && d == x->rank + whole->dims[i]) {
            tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(x, span), whole->check, x, NULL,
                                    "%s() gets a %s sharded on dimension %d (%s): %s",
                                    op, x->dtensor ? "DTensor" : "plain tensor", d, x->dimname[d], whole->why);
            if (g && span.file >= 0)
                tp_diag_note_at(g, span, "%s() is called here", op);
            if (g)
                tp_diag_help(g, "all-gather dimension %d before this op, e.g. PrepareModuleInput(..., desired_input_layouts=(Replicate(),))", d);
            x->poisoned = true;
            return false;
        }
    return true;
}
