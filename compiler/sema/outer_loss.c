/* outer_loss.c: the loss a training loop computes on the logits a model
 * returns (tpcc --train --loss).
 *
 * PyTorch's test Transformer and torchtitan's Llama return their logits;
 * the loss is the caller's. `sum` is PyTorch's tensor-parallel tests'
 * `model(inp).sum().backward()`: the logits summed where every rank holds
 * them whole, so the seed gradient is ones in their layout (autodiff.c).
 * `cross_entropy` is torchtitan's trainer's
 * `cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`: the
 * model's own cross_entropy() on a labels input beside the ids, so it runs
 * as if the forward had called it, vocab-parallel under the plan's
 * loss_parallel(). */
#include "compiler/sema/check_impl.h"

/* output.sum() of logits each rank holds whole: a local sum, no
 * communication (a sharded or padded tensor would sum pieces or padding). */
static void sum_loss(interp *I, tp_val *logits, tp_span span)
{
    logits = tp_logits_output(I, logits, span);
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
 * shaped like the ids (Replicate, plain, as a data loader hands them).
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

void tp_outer_loss_record(interp *I, tp_val *logits, const tp_val *ids, tp_span span)
{
    if (I->loss == TP_LOSS_SUM)
        sum_loss(I, logits, span);
    else
        cross_entropy_loss(I, logits, ids, span);
}
