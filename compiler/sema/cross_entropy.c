/* cross_entropy.c: the layout rule of cross_entropy(logits, labels),
 * whether the model's forward calls it (the op table's row) or the loss a
 * training loop computes on the logits a model returns (outputs.c): the
 * ordinary loss over whole logits, or under loss_parallel() PyTorch's
 * vocab-parallel loss over logits sharded on the vocabulary. */
#include "compiler/sema/check_impl.h"

/* Plain logits sharded on the vocabulary: each rank would normalise over
 * its own slice. */
static const tp_op_whole whole_vocabulary = {{-1}, "loss-parallel", "cross-entropy normalises over the whole vocabulary"};

/* A [batch, seq] float intermediate of the vocab-parallel loss. */
static tp_val *per_token(interp *I, const tp_val *labels, tp_span span)
{
    tp_val *v = tp_val_new(I, labels->rank, labels->shape, labels->dimname);
    v->span = span;
    return v;
}

/* loss_parallel's forward: three all-reduces (max, sum of exp, target
 * logit) over the vocab shards, as torch/distributed/tensor/parallel/loss.py */
/* All-reduce a per-token piece of the vocab-parallel loss (nothing to do
 * on one rank). */
static void reduce_piece(interp *I, tp_val *v, const char *what, bool max)
{
    if (I->tp == 1)
        return;
    tp_ir_op *op = &tp_record_op(I, TP_OP_ALL_REDUCE, v, what, v, NULL, NULL)->op;
    op->reduce_max = max;
    op->elems = tp_gvalue_local_elems(&I->a->graph.values[v->gv]);
}

static void record_vocab_parallel_ce(interp *I, tp_val *logits, tp_val *labels, tp_val *loss, tp_span span)
{
    int64_t vl = tp_local_size(I, logits, logits->rank - 1);
    tp_val *mx = per_token(I, labels, span), *se = per_token(I, labels, span), *tg = per_token(I, labels, span);
    tp_ir_op *op = &tp_record_op(I, TP_OP_CE_MAX, mx, "ce_max", logits, NULL, NULL)->op;
    op->vocab_local = vl;
    op->vocab_logical = logits->logical_last;
    reduce_piece(I, mx, "ce_max", true);
    op = &tp_record_op(I, TP_OP_CE_SUMEXP, se, "ce_sumexp", logits, mx, NULL)->op;
    op->vocab_local = vl;
    op->vocab_logical = logits->logical_last;
    reduce_piece(I, se, "ce_sumexp", false);
    op = &tp_record_op(I, TP_OP_CE_TARGET, tg, "ce_target", logits, labels, NULL)->op;
    op->vocab_local = vl;
    reduce_piece(I, tg, "ce_target", false);
    op = &tp_record_op(I, TP_OP_CE_LOSS, loss, "loss", se, mx, tg)->op;
    op->in[op->nin++] = tp_record_value(I, labels, "labels");
    tp_val *f32[] = {mx, se, tg, loss};
    for (int i = 0; i < 4; i++)
        I->a->graph.values[f32[i]->gv].f32_only = true;
}

static void record_cross_entropy(interp *I, tp_val *logits, tp_val *labels, tp_val *loss, bool vocab_parallel,
                                 tp_span span)
{
    tp_graph *g = &I->a->graph;
    if (vocab_parallel) {
        record_vocab_parallel_ce(I, logits, labels, loss, span);
    } else {
        tp_ir_op *op = &tp_record_op(I, TP_OP_CROSS_ENTROPY, loss, "loss", logits, labels, NULL)->op;
        op->vocab_logical = logits->logical_last;
        op->vocab_local = tp_local_size(I, logits, logits->rank - 1);
        g->values[loss->gv].f32_only = true;
    }
    g->logits = logits->gv;
    g->logits_pl = tp_placement_norm(logits->pl, logits->rank);
    g->values[logits->gv].output = true;
}

/* Plain logits split over the batch or the positions, with the labels
 * whole: each rank flattens its own rows against every label, which
 * PyTorch's cross_entropy refuses ("Expected input batch_size ... to match
 * target batch_size"). */
static bool positions_line_up(interp *I, const tp_val *logits, const tp_val *labels, tp_span span)
{
    int d = tp_shard_dim(logits), last = logits->rank - 1;
    if (d < 0 || d == last || tp_placement_eq(labels->pl, logits->pl, labels->rank))
        return true;
    int64_t rows = 1, targets = 1;
    for (int i = 0; i < last; i++)
        rows *= tp_local_size(I, logits, i);
    for (int i = 0; i < labels->rank; i++)
        targets *= tp_local_size(I, labels, i);
    char pl[24];
    tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(logits, span), "layout-mismatch", logits, labels,
                            "cross_entropy() gets plain logits that are %s (dimension %d, %s, split over the ranks) "
                            "with the whole labels: PyTorch raises 'Expected input batch_size (%lld) to match target "
                            "batch_size (%lld)'", tp_pl_str(logits->pl, logits->rank, pl), d,
                            logits->dimname[d][0] ? logits->dimname[d] : "?", (long long)rows, (long long)targets);
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "the loss is computed here");
    if (g)
        tp_diag_help(g, "gather the logits before the loss (output_layouts=Replicate() on the module that produces "
                        "them), or keep them sharded on the vocabulary with loss_parallel()");
    return false;
}

/* loss_parallel() only intercepts DTensor ops: plain logits get the
 * ordinary cross-entropy, which is correct when they are whole. */
static void warn_loss_parallel_unused(interp *I, const tp_val *logits, tp_span span)
{
    char a[24];
    tp_diag *g = tp_finding(I, TP_WARNING, I->p->loss_parallel_span, "loss-parallel", logits, NULL,
                            "loss_parallel() has no effect: the logits reach cross_entropy() as a plain tensor "
                            "(%s), and the context only intercepts DTensor ops, so PyTorch computes the ordinary "
                            "cross-entropy (costs nothing, saves nothing)", tp_pl_str(logits->pl, logits->rank, a));
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "the loss is computed here");
    if (g)
        tp_diag_help(g, "remove loss_parallel(), or keep the logits sharded on the vocabulary for it: "
                        "ColwiseParallel(use_local_output=False) on lm_head with the default output_layouts=Shard(-1)");
}

/* loss_parallel() over DTensor logits: PyTorch's vocab-parallel loss,
 * which asserts the logits are sharded on the vocabulary. */
static void vocab_parallel_loss(interp *I, tp_val *logits, tp_val *labels, tp_val *out, tp_span span)
{
    int last = logits->rank - 1;
    if (tp_shard_dim(logits) != last) {
        char a[24];
        tp_diag *g = tp_finding(I, TP_ERROR, I->p->loss_parallel_span, "loss-parallel", logits, NULL,
                                "loss_parallel() should be enabled only when the input tensor is sharded on dimension %d; "
                                "the logits are a DTensor %s", last, tp_pl_str(logits->pl, logits->rank, a));
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "the loss is computed here");
        if (g)
            tp_diag_help(g, "keep the lm_head output sharded: ColwiseParallel(use_local_output=False) "
                            "with the default output_layouts=Shard(-1)");
    }
    if (labels->dtensor || labels->pl.kind != TP_REPLICATE)
        tp_finding(I, TP_ERROR, span, "loss-parallel", labels, NULL, "loss_parallel() needs replicated labels");
    record_cross_entropy(I, logits, labels, out, true, span);
}

tp_val *tp_cross_entropy(interp *I, tp_val *logits, tp_val *labels, tp_span span)
{
    tp_plan *p = I->p;
    int last = logits->rank - 1;
    tp_val *out = tp_val_new(I, 0, NULL, NULL);
    out->span = span;
    for (int i = 0; i < labels->rank && i < last; i++)
        tp_grown_meet(I, logits->shape[i], labels->shape[i], span, "cross_entropy()", "labels");
    if (p->loss_parallel && logits->dtensor) {
        vocab_parallel_loss(I, logits, labels, out, span);
        return out;
    }
    if (p->loss_parallel)
        warn_loss_parallel_unused(I, logits, span);
    logits = tp_resolve_partial(I, logits, "cross_entropy", span);
    if (logits->dtensor) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(logits, span), "mixed-tensor", logits, NULL,
                                "the logits reach cross_entropy() as a DTensor while the labels are a plain tensor: "
                                "PyTorch raises 'got mixed torch.Tensor and DTensor'");
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "the loss is computed here");
        if (g)
            tp_diag_help(g, "add loss_parallel() to the plan, or return plain logits (use_local_output=True)");
        if (g && tp_shard_dim(logits) == last)
            tp_fix_append_item(g, p, "loss_parallel()");
        return out;
    }
    tp_check_whole(I, "cross_entropy", &whole_vocabulary, logits, span);
    if (!positions_line_up(I, logits, labels, span))
        out->poisoned = true;
    record_cross_entropy(I, logits, labels, out, false, span);
    return out;
}
