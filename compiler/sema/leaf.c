/* leaf.c: the leaf modules' forward: Linear (and GPT-2's Conv1D),
 * Embedding and the norms, with the layouts their styles give their
 * parameters (ColwiseParallel: a shard of the output features, or of the
 * embedding dim; RowwiseParallel: partial sums, or masked vocabulary
 * rows) and the nodes they record. */
#include <string.h>
#include "compiler/sema/check_impl.h"

static bool plain_module_gets_dtensor(interp *I, tp_module *mod, tp_val *x, tp_span span)
{
    /* a style other than the hookless Hugging Face ones makes the parameters DTensors */
    if (!x->dtensor || (mod->style && mod->style->kind != TP_STYLE_IDENTITY))
        return false;
    char pl[24];
    tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(x, span), "mixed-tensor", x, NULL,
                            "a DTensor (%s) reaches '%s', whose parameters are plain tensors (no plan entry): "
                            "PyTorch raises 'got mixed torch.Tensor and DTensor'", tp_pl_str(x->pl, x->rank, pl), mod->fqn);
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "'%s' is called here", mod->fqn);
    if (g)
        tp_diag_help(g, "turn the input into a plain tensor (use_local_output=True upstream) or give '%s' a plan entry",
                     mod->fqn);
    return true;
}

/* A styled module receives a DTensor in a placement its computation can't
 * use directly (the input hook compared declared layouts only): DTensor's
 * sharding propagation redistributes it. */
static tp_val *expect_input(interp *I, tp_val *x, tp_placement want, tp_span span)
{
    if (tp_placement_eq(x->pl, want, x->rank))
        return x;
    return tp_redistribute(I, x, want, NULL, span, true);
}

static tp_val *linear_layout(interp *I, tp_module *mod, tp_val **xp, const int64_t *shape, const char *const *names,
                             tp_span span);

/* The leaf functions return the result and leave in *xp the input as the
 * computation reads it (after any implicit redistribution). */
static tp_val *linear_forward(interp *I, tp_module *mod, tp_val **xp, tp_span span)
{
    tp_val *x = *xp;
    tp_param *w = tp_module_param(mod, "weight");
    /* Linear's weight is [out, in], Conv1D's [in, out] */
    int in = mod->kind == TP_MOD_CONV1D ? 0 : 1, out = 1 - in;
    int last = x->rank - 1;
    int64_t shape[TP_MAX_RANK];
    const char *names[TP_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    memcpy(names, x->dimname, sizeof names);
    if (x->shape[last] != w->shape[in] && !x->poisoned) {
        tp_diag_add(I->d, TP_ERROR, span, "model", "'%s' expects %lld input features, gets %lld",
                    mod->fqn, (long long)w->shape[in], (long long)x->shape[last]);
        I->stop = true;
    }
    shape[last] = w->shape[out];
    names[last] = w->dimname[out];
    tp_val *r = linear_layout(I, mod, xp, shape, names, span);
    /* padded vocabulary rows produce logits the loss and the output drop */
    r->logical_last = w->logical[out];
    const tp_style *s = mod->style;
    r->replicated_heads = s && s->kind == TP_STYLE_COLWISE && s->replicate_heads ? s : NULL;
    return r;
}

static tp_val *linear_layout(interp *I, tp_module *mod, tp_val **xp, const int64_t *shape, const char *const *names,
                             tp_span span)
{
    tp_val *x = *xp;
    int last = x->rank - 1;
    const tp_style *s = mod->style;
    if (s && s->kind == TP_STYLE_COLWISE) {
        x = *xp = expect_input(I, x, tp_replicate(), span);
        tp_val *r = tp_result_like(I, x, x->rank, shape, names, span);
        r->pl = tp_shard(last);
        r->shard_cause = s;
        if (s->packed) {
            r->nsegments = mod->nsegments;
            memcpy(r->segments, mod->segments, sizeof r->segments);
        }
        return r;
    }
    if (s && s->kind == TP_STYLE_ROWWISE) {
        x = *xp = expect_input(I, x, tp_shard(last), span);
        tp_val *r = tp_result_like(I, x, x->rank, shape, names, span);
        r->pl = tp_partial();          /* bias: R -> P is a local divide, no communication */
        r->partial_cause = s;
        return r;
    }
    if (plain_module_gets_dtensor(I, mod, x, span)) {
        tp_val *r = tp_result_like(I, x, x->rank, shape, names, span);
        r->poisoned = true;
        return r;
    }
    tp_val *r = tp_result_like(I, x, x->rank, shape, names, span);
    int d = tp_shard_dim(x);
    if (d == last) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(x, span), "layout-mismatch", x, NULL,
                                "'%s' has a full (replicated) weight, but its plain input is sharded on the features it "
                                "contracts (dimension %d, %s)", mod->fqn, last, x->dimname[last]);
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "'%s' is called here", mod->fqn);
        if (g)
            tp_diag_help(g, "shard '%s' with RowwiseParallel() to match its sharded input", mod->fqn);
        r->poisoned = true;
    } else if (tp_placement_is_partial(x->pl) && tp_module_param(mod, "bias")) {
        tp_diag *g = tp_finding(I, TP_ERROR, x->partial_cause ? tp_entry_span(x->partial_cause) : span,
                                "partial-nonlinear", x, NULL, "'%s' adds its bias to a plain tensor of partial sums: the bias is counted %lld times",
                                mod->fqn, (long long)I->tp);
        if (g)
            tp_diag_help(g, "reduce the input first (output_layouts=Replicate() upstream)");
        r->poisoned = true;
    }
    return r;
}

/* A learned position embedding (GPT-2's wpe) looked up at positions() or
 * arange(): positions 0 .. n - 1 need n rows. PyTorch's embedding raises
 * an IndexError past them; tprun would read beyond the weight. A sharded
 * tensor's shape is not its positions' range, nor is a relabelled one's
 * (it repeats them; poisoned, the relabel reported where it happens). */
static void positions_fit(interp *I, const tp_module *mod, const tp_val *ids, const tp_param *w, tp_span span)
{
    if (!ids->is_position || ids->poisoned || tp_shard_dim(ids) >= 0 || ids->rank < 1 ||
        ids->shape[ids->rank - 1] <= w->logical[0])
        return;
    int64_t n = ids->shape[ids->rank - 1];
    tp_diag *g = tp_diag_add(I->d, TP_ERROR, span, "model",
                             "'%s' has %lld positions, but the sequence has %lld: positions %lld and above have no row",
                             mod->fqn, (long long)w->logical[0], (long long)n, (long long)w->logical[0]);
    tp_diag_help(g, "compile with -D seq=%lld or less", (long long)w->logical[0]);
    I->stop = true;
}

static tp_val *embedding_forward(interp *I, tp_module *mod, tp_val **idsp, tp_span span)
{
    tp_val *ids = *idsp;
    tp_param *w = tp_module_param(mod, "weight");
    positions_fit(I, mod, ids, w, span);
    int64_t shape[TP_MAX_RANK];
    const char *names[TP_MAX_RANK];
    memcpy(shape, ids->shape, sizeof shape);
    memcpy(names, ids->dimname, sizeof names);
    if (ids->rank >= TP_MAX_RANK) {
        tp_diag_add(I->d, TP_ERROR, span, "model", "'%s': too many input dimensions", mod->fqn);
        I->stop = true;
        return ids;
    }
    shape[ids->rank] = w->shape[1];
    names[ids->rank] = w->dimname[1];
    const tp_style *s = mod->style;
    if (s && (s->kind == TP_STYLE_COLWISE || s->kind == TP_STYLE_ROWWISE)) {
        ids = *idsp = expect_input(I, ids, tp_replicate(), span);
        tp_val *r = tp_result_like(I, ids, ids->rank + 1, shape, names, span);
        /* Colwise splits the embedding dim; Rowwise splits the vocab and
         * yields rows that still need masking and summing (_MaskPartial) */
        r->pl = s->kind == TP_STYLE_COLWISE ? tp_shard(ids->rank) : tp_mask_partial();
        r->is_index = false;
        r->shard_cause = s;
        r->partial_cause = s;
        return r;
    }
    bool mixed = plain_module_gets_dtensor(I, mod, ids, span);
    tp_val *r = tp_result_like(I, ids, ids->rank + 1, shape, names, span);
    r->is_index = false;
    r->poisoned |= mixed;
    return r;
}

static tp_val *norm_forward(interp *I, tp_module *mod, tp_val **xp, tp_span span)
{
    tp_val *x = *xp;
    int last = x->rank - 1;
    const tp_style *s = mod->style;
    int64_t features = tp_module_param(mod, "weight")->shape[0];
    if (x->shape[last] != features && !x->poisoned) {
        /* a norm over head_dim (Qwen3's q_norm) meets [b, s, heads, head_dim]: the last dim is the one */
        tp_diag_add(I->d, TP_ERROR, span, "model", "'%s' (%s) normalises %lld features, gets %lld (dimension %d, %s)",
                    mod->fqn, mod->type, (long long)features, (long long)x->shape[last], last, x->dimname[last]);
        I->stop = true;
    }
    if (!s || s->kind != TP_STYLE_SEQUENCE) {
        if (plain_module_gets_dtensor(I, mod, x, span)) {
            tp_val *r = tp_val_copy(I, x);
            r->poisoned = true;
            return r;
        }
        x = *xp = tp_resolve_partial(I, x, mod->type, span);
    }
    if (tp_shard_dim(x) == last) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(x, span), "layout-mismatch", x, NULL,
                                "'%s' (%s) normalises over dimension %d (%s), which is sharded: each rank would "
                                "normalise its own slice of the features", mod->fqn, mod->type, last, x->dimname[last]);
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "'%s' is called here", mod->fqn);
        if (g)
            tp_diag_help(g, "gather the features first, or shard the sequence instead (SequenceParallel)");
        x->poisoned = true;
    }
    return tp_result_like(I, x, x->rank, x->shape, x->dimname, span);
}

static void record_linear(interp *I, tp_module *mod, tp_val *x, tp_val *r)
{
    tp_param *w = tp_module_param(mod, "weight"), *b = tp_module_param(mod, "bias");
    tp_op_kind kind = mod->kind == TP_MOD_CONV1D ? TP_OP_CONV1D : TP_OP_MATMUL;
    tp_ir_op *op = &tp_record_op(I, kind, r, "out", x, NULL, NULL)->op;
    op->weight = tp_record_param(I, w);
    op->m = tp_local_rows(I, x);
    op->k = tp_local_size(I, x, x->rank - 1);
    op->n = tp_local_size(I, r, r->rank - 1);
    if (!b || tp_bias_after_reduce(mod))
        return;
    op = &tp_record_op(I, TP_OP_BIAS_ADD, r, "out", r, NULL, NULL)->op;
    op->bias = tp_record_param(I, b);
    op->m = tp_local_rows(I, r);
    op->n = tp_local_size(I, r, r->rank - 1);
    /* a replicated bias added to a Partial sum is divided by tp (DTensor's
     * addmm rule), so the reduction counts it once */
    op->scale = tp_placement_is_partial(r->pl) ? 1.0 / (double)I->tp : 1.0;
}

static void record_embedding(interp *I, tp_module *mod, tp_val *ids, tp_val *r)
{
    tp_ir_op *op = &tp_record_op(I, TP_OP_EMBEDDING, r, "out", ids, NULL, NULL)->op;
    op->weight = tp_record_param(I, tp_module_param(mod, "weight"));
    op->vocab_local = I->a->graph.params[op->weight].local[0];
    op->masked = r->pl.kind == TP_MASK_PARTIAL;
    op->n = I->a->graph.params[op->weight].local[1];
}

static void record_norm(interp *I, tp_module *mod, tp_val *x, tp_val *r)
{
    tp_param *b = tp_module_param(mod, "bias");
    tp_ir_op *op = &tp_record_op(I, mod->kind == TP_MOD_RMSNORM ? TP_OP_RMSNORM : TP_OP_LAYERNORM, r, "out", x, NULL, NULL)->op;
    op->weight = tp_record_param(I, tp_module_param(mod, "weight"));
    op->bias = b ? tp_record_param(I, b) : -1;
    op->m = tp_local_rows(I, x);
    op->n = tp_local_size(I, x, x->rank - 1);
    op->eps = mod->eps;
    op->unit_offset = mod->unit_offset;
}

iv tp_leaf_forward(interp *I, tp_module *mod, iv *args, int nargs, tp_span span)
{
    if (nargs < 1 || args[0].kind != IV_TENSOR) {
        tp_diag_add(I->d, TP_ERROR, span, "model", "'%s' (%s) takes one tensor argument", mod->fqn, mod->type);
        I->stop = true;
        return tp_none_iv;
    }
    tp_val *x = args[0].t, *r;
    tp_packed_misuse(I, x, mod->fqn, span);
    switch (mod->kind) {
    case TP_MOD_LINEAR:
    case TP_MOD_CONV1D:
        r = linear_forward(I, mod, &x, span);
        record_linear(I, mod, x, r);
        break;
    case TP_MOD_EMBEDDING:
        r = embedding_forward(I, mod, &x, span);
        if (r != x)
            record_embedding(I, mod, x, r);
        break;
    default:
        r = norm_forward(I, mod, &x, span);
        record_norm(I, mod, x, r);
        break;
    }
    return tp_tensor_iv(r);
}
