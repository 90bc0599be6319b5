/* outputs.c: what the root forward returns becomes the schedule's output.
 *
 * A scalar is the loss: cross_entropy() recorded the logits beside it. A
 * [batch, seq, vocab] tensor is the logits of a model called without
 * labels (PyTorch's test Transformer returns `self.output(h)`, Hugging
 * Face's forward without labels its logits); anything else is an error,
 * as a schedule has no other output. The caller gets what PyTorch hands back: a
 * DTensor, whose full_tensor() is the logits, or a plain tensor, which is
 * the logits only where every rank holds all of them. The schedule's
 * output is that tensor with its placement; tprun gathers a shard.
 *
 * With tpcc --loss, the loss a training loop computes on the logits a
 * model returns is the output instead: PyTorch's test Transformer and
 * torchtitan's Llama return their logits, and the loss is the caller's.
 * `sum` is PyTorch's tensor-parallel tests' `model(inp).sum().backward()`:
 * the logits summed where every rank holds them whole, so the seed
 * gradient is ones in their layout (autodiff.c). `cross_entropy` is
 * torchtitan's trainer's
 * `cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`: the
 * model's own cross_entropy() on a labels input beside the ids, so it runs
 * as if the forward had called it, vocab-parallel under the plan's
 * loss_parallel(). */
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

/* Returned logits as the caller gets them (a Partial DTensor summed by its
 * full_tensor()), recorded as the schedule's logits output; returns them. */
static tp_val *logits_output(interp *I, tp_val *v, tp_span span)
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

/* output.sum() of logits each rank holds whole: a local sum, no
 * communication (a sharded or padded tensor would sum pieces or padding). */
static void sum_loss(interp *I, tp_val *logits, tp_span span)
{
    logits = logits_output(I, logits, span);
    char pl[24];
    if (I->tp > 1 && logits->pl.kind != TP_REPLICATE) {
        tp_diag *g = tp_diag_add(I->d, TP_ERROR, span, "model-output",
                                 "--loss sum needs the logits whole on every rank, and the model returns them %s",
                                 tp_pl_str(logits->pl, logits->rank, pl));
        if (g)
            tp_diag_help(g, "gather them in the plan: output_layouts=Replicate() on the module that produces them");
        return;
    }
    if (logits->logical_last > 0 && logits->logical_last != logits->shape[logits->rank - 1]) {
        tp_diag *g = tp_diag_add(I->d, TP_ERROR, span, "model-output",
                                 "--loss sum over logits padded from %lld to %lld columns would sum the padding",
                                 (long long)logits->logical_last, (long long)logits->shape[logits->rank - 1]);
        if (g)
            tp_diag_help(g, "compile without vocabulary padding (-D vocab_multiple=1)");
        return;
    }
    tp_val *loss = tp_val_new(I, 0, NULL, NULL);
    loss->span = span;
    tp_ir_op *op = &tp_record_op(I, TP_OP_SUM_ROWS, loss, "loss", logits, NULL, NULL)->op;
    op->m = tp_gvalue_local_elems(&I->a->graph.values[logits->gv]);
    op->n = 1;
    op->scale = 1.0;
    tp_gvalue *g = &I->a->graph.values[loss->gv];
    g->f32_only = g->output = true;
    I->a->graph.loss = loss->gv;
}

/* cross_entropy(logits, labels) with the labels a second model input,
 * shaped like the ids (Replicate, plain, as a data loader hands them),
 * and already the next tokens: torchtitan's loader hands input = w[:-1],
 * labels = w[1:] of each window, and its loss does not shift them.
 * torchtitan's trainer runs it under loss_parallel() exactly when the plan
 * leaves the logits a DTensor sharded on the vocabulary (one setting,
 * parallel_dims.loss_parallel_enabled, does both); the plan's own
 * loss_parallel() says so too. */
static void cross_entropy_loss(interp *I, tp_val *logits, const tp_val *ids, tp_span span)
{
    tp_val *labels = tp_val_new(I, ids->rank, ids->shape, ids->dimname);
    labels->is_index = true;
    labels->span = span;
    int gv = tp_record_value(I, labels, "labels");
    I->a->graph.values[gv].input = true;
    I->a->graph.label_shift = 0;
    tp_plan *p = I->p;
    bool declared = p->loss_parallel;
    tp_placement pl = tp_placement_norm(logits->pl, logits->rank);
    if (!declared && logits->dtensor && pl.kind == TP_SHARD && pl.dim == logits->rank - 1) {
        p->loss_parallel = true;
        p->loss_parallel_span = span;
    }
    tp_val *loss = tp_cross_entropy(I, logits, labels, span);
    if (!declared) {
        p->loss_parallel = false;
        p->loss_parallel_span = TP_NO_SPAN;
    }
    if (loss->gv >= 0) {
        I->a->graph.loss = loss->gv;
        I->a->graph.values[loss->gv].output = true;
    }
}

/* The loss outside the model (tpcc --loss) on the logits it returns. */
static void outer_loss(interp *I, tp_val *logits, const tp_val *ids, tp_span span)
{
    if (I->loss == TP_LOSS_SUM)
        sum_loss(I, logits, span);
    else
        cross_entropy_loss(I, logits, ids, span);
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
            outer_loss(I, v, ids, span);
        else
            logits_output(I, v, span);
    } else if (!(v && v->poisoned)) {   /* a poisoned result: its error is reported */
        other_output(I, out, span);
    }
}
