/* outputs.c: what the root forward returns becomes the schedule's output.
 *
 * A scalar is the loss: cross_entropy() recorded the logits beside it. A
 * [batch, seq, vocab] tensor is the logits of a model called without
 * labels (PyTorch's test Transformer returns `self.output(h)`, Hugging
 * Face's forward without labels its logits); anything else is an error,
 * as a schedule has no other output. The caller gets what PyTorch hands back: a
 * DTensor, whose full_tensor() is the logits, or a plain tensor, which is
 * the logits only where every rank holds all of them. The schedule's
 * output is that tensor with its placement; tprun gathers a shard. */
#include "compiler/sema/check_impl.h"

/* A plain tensor of partial sums: every rank returns its own summand, and
 * nothing adds them up. */
static void partial_plain(interp *I, const tp_val *v, tp_span span)
{
    char pl[24];
    tp_diag *g = tp_finding(I, TP_ERROR, v->partial_cause ? tp_entry_span(v->partial_cause) : span, "logits-output",
                            v, NULL, "the model returns its logits as a plain tensor of partial sums (%s): every rank "
                            "returns its own summand, and nothing adds them up", tp_pl_str(v->pl, v->rank, pl));
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "the logits are returned here");
    if (g)
        tp_diag_help(g, "reduce them in the plan: output_layouts=Replicate() on the module that produces them");
}

/* A plain shard: PyTorch returns each rank's piece, which is not the
 * logits, and nothing fails. */
static void shard_plain(interp *I, const tp_val *v, tp_span span)
{
    char pl[24];
    int d = tp_placement_norm(v->pl, v->rank).dim;
    tp_diag *g = tp_finding(I, TP_WARNING, v->shard_cause ? tp_entry_span(v->shard_cause) : span, "logits-output",
                            v, NULL, "the model returns its logits as a plain tensor that is %s (dimension %d, %s): "
                            "PyTorch hands every rank only its own 1/%lld of them, with nothing saying it is a shard; "
                            "tprun gathers the pieces for its output", tp_pl_str(v->pl, v->rank, pl), d,
                            v->dimname[d][0] ? v->dimname[d] : "?", (long long)I->tp);
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "the logits are returned here");
    if (g)
        tp_diag_help(g, "return them whole (output_layouts=Replicate() on the module that produces them) or as a "
                        "DTensor (use_local_output=False), whose full_tensor() gathers them");
}

tp_val *tp_logits_output(interp *I, tp_val *v, tp_span span)
{
    if (I->p->loss_parallel) {
        tp_diag *g = tp_finding(I, TP_WARNING, I->p->loss_parallel_span, "loss-parallel", v, NULL,
                                "loss_parallel() has no effect: the model computes no loss, it returns its logits");
        if (g)
            tp_diag_help(g, "remove loss_parallel()");
    }
    if (tp_placement_is_partial(v->pl) && v->dtensor)
        v = tp_redistribute(I, v, tp_replicate(), v->partial_cause, span, false);   /* the caller's full_tensor() */
    else if (tp_placement_is_partial(v->pl))
        partial_plain(I, v, span);
    else if (v->pl.kind == TP_SHARD && !v->dtensor && I->tp > 1)
        shard_plain(I, v, span);
    tp_graph *g = &I->a->graph;
    int gv = tp_record_value(I, v, "logits");
    g->logits = gv;
    g->logits_pl = tp_placement_norm(v->pl, v->rank);
    g->logits_vocab = v->logical_last > 0 ? v->logical_last : v->shape[2];
    g->values[gv].output = true;
    return v;
}

/* What a model returns that is neither its loss nor its logits: a schedule
 * outputs only those, so anything else would be computed and dropped, and
 * tprun would have nothing to write or compare. */
static void other_output(interp *I, iv out, tp_span span)
{
    char what[32 + 24 * TP_MAX_RANK] = "no tensor";
    if (out.kind == IV_TUPLE)
        snprintf(what, sizeof what, "a tuple");
    else if (out.kind == IV_TENSOR) {
        int n = snprintf(what, sizeof what, "a tensor of shape [");
        for (int d = 0; d < out.t->rank; d++)
            n += snprintf(what + n, sizeof what - (size_t)n, "%s%lld", d ? ", " : "", (long long)out.t->shape[d]);
        snprintf(what + n, sizeof what - (size_t)n, "]");
    }
    tp_diag *g = tp_diag_add(I->d, TP_ERROR, span, "model-output",
                             "the model returns %s: a schedule's output is a scalar loss or logits "
                             "[batch, seq, vocab] whose batch and seq are those of the first input, the token ids",
                             what);
    if (g)
        tp_diag_help(g, "return the loss (cross_entropy()) or the logits (the lm_head's output)");
}

void tp_model_output(interp *I, iv out, const tp_val *ids, tp_span span)
{
    tp_val *v = out.kind == IV_TENSOR ? out.t : NULL;
    if (v && v->rank == 0 && I->loss != TP_LOSS_NONE) {
        tp_diag *g = tp_diag_add(I->d, TP_ERROR, span, "model-output", "--loss %s: the model computes its own loss "
                                 "and returns it; --loss is for a model that returns its logits",
                                 I->loss == TP_LOSS_SUM ? "sum" : "cross_entropy");
        if (g)
            tp_diag_help(g, "drop --loss");
    } else if (v && v->rank == 0) {
        if (v->gv >= 0) {
            I->a->graph.loss = v->gv;
            I->a->graph.values[v->gv].output = true;
        }
    } else if (v && ids && ids->rank >= 2 && v->rank == 3 && v->shape[0] == ids->shape[0] &&
               v->shape[1] == ids->shape[1]) {
        if (I->loss != TP_LOSS_NONE)
            tp_outer_loss_record(I, v, ids, span);
        else
            tp_logits_output(I, v, span);
    } else if (!(v && v->poisoned)) {   /* a poisoned result: its error is reported */
        other_output(I, out, span);
    }
}
