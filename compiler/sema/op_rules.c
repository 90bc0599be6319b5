/* op_rules.c: layout rules of the primitive ops and leaf modules.
 *
 * Rules are data where they can be: each primitive names the dimensions it
 * needs whole on every rank (a norm's features, RoPE's positions,
 * attention's sequence), whether it is linear (a Partial input stays
 * Partial), whether PyTorch's implementation accepts a DTensor and the
 * keyword arguments it takes (its attributes: rope's theta). Shape
 * changes (head split and merge) are small functions. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

typedef struct op_rule {
    const char *name;
    int ntensors;          /* tensor inputs */
    bool linear;           /* f(sum of parts) = sum of f(parts): Partial passes through */
    bool dtensor_ok;       /* false: the op mixes its input with plain tensors (cos/sin, arange) */
    int whole[3];          /* dims counted from the end (-1 = last) that must not be sharded */
    const char *check;     /* check name when a whole dim is sharded */
    const char *why;       /* ... and why */
    tp_op_kind lowers_to;  /* the schedule op; TP_OP_COUNT: a view of its input */
    const char *const *keywords;   /* keyword arguments it takes; NULL: none */
} op_rule;

static const char *const rope_kw[] = {"theta", "scaling", "factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings", "partial_rotary_factor", "beta_fast",
                                      "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate",
                                      "max_position_embeddings", NULL};
/* scale= as SDPA's (default head_dim ** -0.5); softcap= as FlashAttention's
 * (0 or absent: none); sliding_window= as transformers' (checked against seq) */
static const char *const attention_kw[] = {"causal", "scale", "softcap", "sliding_window", NULL};
static const char *const gelu_kw[] = {"approximate", NULL};

/* Hugging Face's activation names (transformers' ACT2FN) that tpcc
 * computes, for activation(x, name): a model file passes config.json's
 * hidden_act. Any other name is an error. */
static const struct hf_activation {
    const char *name;
    tp_op_kind kind;
    bool tanh;             /* GELU's tanh approximation */
} hf_activations[] = {
    {"silu", TP_OP_SILU, false},         {"swish", TP_OP_SILU, false},
    {"relu", TP_OP_RELU, false},         {"gelu", TP_OP_GELU, false},
    {"gelu_python", TP_OP_GELU, false},  {"gelu_new", TP_OP_GELU, true},
    {"gelu_pytorch_tanh", TP_OP_GELU, true}, {"gelu_python_tanh", TP_OP_GELU, true},
};
#define NACTIVATIONS ((int)(sizeof hf_activations / sizeof *hf_activations))

/* rope() without theta=: Hugging Face's default rope_theta (LlamaConfig,
 * Qwen2Config). Model files pass theta= from their config. */
#define ROPE_THETA_DEFAULT 10000.0

static const op_rule rules[] = {
    {"silu", 1, false, true, {0}, NULL, NULL, TP_OP_SILU, NULL},
    {"gelu", 1, false, true, {0}, NULL, NULL, TP_OP_GELU, gelu_kw},
    {"relu", 1, false, true, {0}, NULL, NULL, TP_OP_RELU, NULL},
    {"dropout", 1, true, true, {0}, NULL, NULL, TP_OP_COUNT, NULL},      /* inference: identity */
    {"view_heads", 1, true, true, {0}, NULL, NULL, TP_OP_COUNT, NULL},
    {"merge_heads", 1, true, true, {-1}, "layout-mismatch", "heads can only be merged with whole head_dim", TP_OP_COUNT,
     NULL},
    {"rope", 1, true, false, {-3, -1}, "layout-mismatch",
     "RoPE needs per-rank positions for a sequence shard (its cos/sin cover the global positions) and whole head_dim pairs",
     TP_OP_ROPE, rope_kw},
    {"attention", 3, false, true, {-3, -1}, "layout-mismatch",
     "attention over a sequence shard only sees its own keys", TP_OP_ATTENTION, attention_kw},
    {"positions", 1, false, false, {-1}, "layout-mismatch",
     "positions of a sequence shard would restart at 0 on every rank", TP_OP_POSITIONS, NULL},
    {"arange", 0, false, false, {0}, NULL, NULL, TP_OP_POSITIONS, NULL},
    {"cross_entropy", 2, false, false, {-1}, "loss-parallel",
     "cross-entropy normalises over the whole vocabulary", TP_OP_CROSS_ENTROPY, NULL},
    /* activation(x, name): the op of HF's ACT2FN[name] (hf_activations) */
    {"activation", 1, false, true, {0}, NULL, NULL, TP_OP_COUNT, NULL},
    /* softcap(x, cap): cap * tanh(x / cap); cap 0 is none (x itself) */
    {"softcap", 1, false, true, {0}, NULL, NULL, TP_OP_SOFTCAP, NULL},
};
#define NRULES ((int)(sizeof rules / sizeof *rules))

static const op_rule *find_rule(const char *name)
{
    for (int i = 0; i < NRULES; i++)
        if (!strcmp(rules[i].name, name))
            return &rules[i];
    return NULL;
}

bool tp_op_is_primitive(const char *name) { return find_rule(name) != NULL; }

static const iv none_iv = {IV_NONE, NULL, NULL, 0, 0, NULL, {NULL}};

static iv tensor_iv(tp_val *v) { return (iv){IV_TENSOR, v, NULL, 0, 0, NULL, {NULL}}; }

static int shard_dim(const tp_val *v)
{
    tp_placement p = tp_placement_norm(v->pl, v->rank);
    return p.kind == TP_SHARD ? p.dim : -1;
}

/* A fresh result with x's layout facts (placement, DTensor-ness, poison). */
static tp_val *result_like(interp *I, const tp_val *x, int rank, const int64_t *shape, const char *const *names,
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
static tp_span style_or(const tp_val *x, tp_span span)
{
    if (x->shard_cause)
        return tp_entry_span(x->shard_cause);
    return x->partial_cause ? tp_entry_span(x->partial_cause) : span;
}

/* A Partial value reaching a non-linear op: DTensor all-reduces it
 * implicitly; a plain tensor computes nonsense. */
static tp_val *resolve_partial(interp *I, tp_val *x, const char *op, tp_span span)
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

static bool check_whole(interp *I, const op_rule *r, tp_val *x, tp_span span)
{
    int d = shard_dim(x);
    for (int i = 0; i < 3 && r->whole[i]; i++)
        if (d >= 0 && d == x->rank + r->whole[i]) {
            tp_diag *g = tp_finding(I, TP_ERROR, style_or(x, span), r->check, x, NULL,
                                    "%s() gets a %s sharded on dimension %d (%s): %s",
                                    r->name, x->dtensor ? "DTensor" : "plain tensor", d, x->dimname[d], r->why);
            if (g && span.file >= 0)
                tp_diag_note_at(g, span, "%s() is called here", r->name);
            if (g)
                tp_diag_help(g, "all-gather dimension %d before this op, e.g. PrepareModuleInput(..., desired_input_layouts=(Replicate(),))", d);
            x->poisoned = true;
            return false;
        }
    return true;
}

static bool mixed_ok(interp *I, const op_rule *r, tp_val *x, tp_span span)
{
    if (r->dtensor_ok || !x->dtensor)
        return true;
    tp_diag *g = tp_finding(I, TP_ERROR, style_or(x, span), "mixed-tensor", x, NULL,
                            "%s() combines its input with plain tensors, but the input is a DTensor: "
                            "PyTorch raises 'got mixed torch.Tensor and DTensor'", r->name);
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "%s() is called here", r->name);
    if (g)
        tp_diag_help(g, "return a plain tensor into %s(): use_local_output=True on the producing style", r->name);
    x->poisoned = true;
    return false;
}

/* tpcc_replicate_heads=H made the weight tp / H copies of each of H heads
 * (params.c); the features x holds are that expansion of the checkpoint's.
 * H must be the heads the checkpoint's rows really are: any H that divides
 * the rows compiles, and a wrong one cuts the rows into heads that are
 * not the model's, pairing query heads with the wrong kv heads. */
static void check_replicated_heads(interp *I, const tp_val *x, int64_t head_dim, const char *hname, tp_span span)
{
    const tp_style *s = x->replicated_heads;
    if (!s)
        return;
    int64_t h = s->replicate_heads;
    int64_t copies = I->tp > h && I->tp % h == 0 ? I->tp / h : 1;
    int64_t features = x->shape[x->rank - 1] / copies;
    if (features == h * head_dim)
        return;
    tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(s), "plan", x, NULL,
                            "tpcc_replicate_heads=%lld says the output holds %lld heads, but its %lld features are "
                            "%lld %s of %lld: every rank would pair its query heads with the wrong kv head",
                            (long long)h, (long long)h, (long long)features, (long long)(features / head_dim),
                            hname, (long long)head_dim);
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "the features are split into heads of %lld here", (long long)head_dim);
    if (g && tp_config_has(I->c, hname))
        tp_diag_help(g, "tpcc_replicate_heads=%s (%lld here)", hname, (long long)(features / head_dim));
    else if (g)
        tp_diag_help(g, "tpcc_replicate_heads=%lld", (long long)(features / head_dim));
}

/* [..., h*d] -> [..., h, d]; a shard of the features becomes a shard of heads. */
static tp_val *view_heads(interp *I, tp_val *x, int64_t head_dim, tp_span span)
{
    int64_t n = x->shape[x->rank - 1];
    if (head_dim <= 0 || n % head_dim || x->rank >= TP_MAX_RANK) {
        tp_diag_add(I->d, TP_ERROR, span, "model", "view_heads: %lld features are not a multiple of head_dim %lld",
                    (long long)n, (long long)head_dim);
        I->stop = true;
        return x;
    }
    int64_t shape[TP_MAX_RANK];
    const char *names[TP_MAX_RANK];
    for (int i = 0; i < x->rank - 1; i++) { shape[i] = x->shape[i]; names[i] = x->dimname[i]; }
    int64_t heads = n / head_dim;
    shape[x->rank - 1] = heads;
    shape[x->rank] = head_dim;
    /* "kv_heads * head_dim" names the heads dim "kv_heads" */
    const char *star = strstr(x->dimname[x->rank - 1], " * ");
    char *hname = star ? tp_xstrndup(x->dimname[x->rank - 1], (size_t)(star - x->dimname[x->rank - 1]))
                       : tp_xstrdup("heads");
    names[x->rank - 1] = hname;
    names[x->rank] = "head_dim";
    names[x->rank - 1] = tp_intern(I, hname);
    check_replicated_heads(I, x, head_dim, hname, span);
    tp_val *r = result_like(I, x, x->rank + 1, shape, names, span);
    r->replicated_heads = NULL;
    r->gather_comm = x->gather_comm;
    r->gather_dim = x->gather_dim;
    if (shard_dim(x) == x->rank - 1) {
        r->pl = tp_shard(x->rank - 1);
        if (heads % I->tp) {
            tp_diag *g = tp_finding(I, TP_ERROR, style_or(x, span), "divisibility", x, NULL,
                                    "%lld %s do not split over %lld ranks: each rank would get %lld.%lld heads",
                                    (long long)heads, hname, (long long)I->tp, (long long)(heads / I->tp),
                                    (long long)((heads % I->tp) * 10 / I->tp));
            if (g && span.file >= 0)
                tp_diag_note_at(g, span, "the features are split into heads of %lld here", (long long)head_dim);
            if (g)
                tp_diag_help(g, "use a tp that divides %lld (PyTorch's ColwiseParallel splits whole heads)", (long long)heads);
            const tp_style *s = x->shard_cause;
            if (g && s && s->kind == TP_STYLE_COLWISE && !s->packed && I->tp % heads == 0)
                r->heads_diag = I->d->count - 1;   /* maybe kv heads: attention() tells */
            r->poisoned = true;
        }
    }
    free(hname);
    return r;
}

/* [..., h, d] -> [..., h*d] */
static tp_val *merge_heads(interp *I, tp_val *x, tp_span span)
{
    int64_t shape[TP_MAX_RANK];
    const char *names[TP_MAX_RANK];
    for (int i = 0; i < x->rank - 2; i++) { shape[i] = x->shape[i]; names[i] = x->dimname[i]; }
    shape[x->rank - 2] = x->shape[x->rank - 2] * x->shape[x->rank - 1];
    names[x->rank - 2] = "hidden";
    tp_val *r = result_like(I, x, x->rank - 1, shape, names, span);
    r->gather_comm = x->gather_comm;
    r->gather_dim = x->gather_dim;
    if (shard_dim(x) == x->rank - 2)
        r->pl = tp_shard(x->rank - 2);
    return r;
}

/* DTensor's sharding strategies for scaled_dot_product_attention cover
 * the CUDA flash and memory-efficient kernels only: the CPU kernel raises
 * NotImplementedError on DTensors, the CUDA one shards by heads. */
static void warn_dtensor_attention(interp *I, const tp_val *q, tp_span span)
{
    char a[24];
    tp_diag *g = tp_finding(I, TP_WARNING, style_or(q, span), "dtensor-attention", q, NULL,
                            "attention() gets q, k and v as DTensors (%s): PyTorch runs this on CUDA (flash and "
                            "memory-efficient attention shard by heads), but its CPU attention has no DTensor "
                            "sharding strategy and raises NotImplementedError", tp_pl_str(q->pl, q->rank, a));
    if (g && span.file >= 0)
        tp_diag_note_at(g, span, "attention() is called here");
    if (g)
        tp_diag_help(g, "to run on the CPU as well, hand attention plain tensors: use_local_output=True (the "
                        "default) on the q, k and v projections");
}

/* attention()'s scale= and softcap=; 0 for the ones not given */
typedef struct attention_attrs {
    double scale, softcap;
} attention_attrs;

/* kv heads fewer than the ranks, beside query heads that split: replicating
 * each kv head over tp / kv_heads ranks (Megatron's and vLLM's layout) puts
 * it on the ranks of its query heads. Query heads that do not split cannot
 * be helped so: o_proj would get whole heads on every rank. */
static void suggest_replicated_heads(interp *I, const tp_val *q, const tp_val *kv)
{
    int h = kv->rank - 2;
    if (kv->heads_diag < 0 || q->poisoned || shard_dim(q) != h || q->shape[h] % I->tp)
        return;
    char count[24];
    snprintf(count, sizeof count, "%lld", (long long)kv->shape[h]);
    const char *n = tp_config_has(I->c, kv->dimname[h]) ? kv->dimname[h] : count;
    tp_diag_help(&I->d->items[kv->heads_diag], "or replicate each kv head over tp / %s = %lld ranks, as Megatron and "
                 "vLLM do: ColwiseParallel(tpcc_replicate_heads=%s) on this projection (a tpcc option, not PyTorch's)",
                 n, (long long)(I->tp / kv->shape[h]), n);
}

/* q [b, s, h, d] against k and v [b, s, g, d]: SDPA's enable_gqa and
 * transformers' repeat_kv need g to divide h (heads // kv_heads copies of
 * each kv head), and fail otherwise. */
static bool attention_shapes_fit(interp *I, const tp_val *q, const tp_val *k, const tp_val *v, tp_span span)
{
    bool fits = q->rank == 4 && k->rank == 4 && v->rank == 4;
    for (int d = 0; fits && d < 4; d++)
        fits = k->shape[d] == v->shape[d] && (d == 2 || k->shape[d] == q->shape[d]);
    if (fits && k->shape[2] > 0 && q->shape[2] % k->shape[2] == 0)
        return true;
    if (fits)
        tp_diag_add(I->d, TP_ERROR, span, "model",
                    "attention(): q has %lld heads but k and v have %lld: the key/value heads must divide the query "
                    "heads (num_attention_heads a multiple of num_key_value_heads), or transformers' repeat_kv and "
                    "PyTorch's attention fail", (long long)q->shape[2], (long long)k->shape[2]);
    else
        tp_diag_add(I->d, TP_ERROR, span, "model",
                    "attention(): q, k and v must be [batch, seq, heads, head_dim] with the same batch, sequence "
                    "and head_dim (k and v alike)");
    return false;
}

static tp_val *attention(interp *I, tp_val *q, tp_val *k, tp_val *v, const attention_attrs *at, tp_span span)
{
    if (!attention_shapes_fit(I, q, k, v, span)) {
        I->stop = true;
        return q;
    }
    suggest_replicated_heads(I, q, k);
    if (v->heads_diag != k->heads_diag)
        suggest_replicated_heads(I, q, v);
    const op_rule *r = find_rule("attention");
    tp_val *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        in[i] = resolve_partial(I, in[i], "attention", span);
        check_whole(I, r, in[i], span);
    }
    q = in[0];
    bool same = true;
    for (int i = 1; i < 3; i++)
        same &= tp_placement_eq(in[i]->pl, q->pl, q->rank) && in[i]->dtensor == q->dtensor;
    if (!same) {
        char a[24], b[24];
        tp_val *odd = !tp_placement_eq(k->pl, q->pl, q->rank) || k->dtensor != q->dtensor ? k : v;
        tp_diag *g = tp_finding(I, TP_ERROR, style_or(odd, span), "layout-mismatch", q, odd,
                                "attention() gets q as %s %s but k/v as %s %s: the heads on each rank do not line up",
                                tp_pl_str(q->pl, q->rank, a), q->dtensor ? "DTensor" : "plain",
                                tp_pl_str(odd->pl, odd->rank, b), odd->dtensor ? "DTensor" : "plain");
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "attention() is called here");
        if (g)
            tp_diag_help(g, "shard q, k and v the same way (ColwiseParallel() on all three projections)");
    }
    if (same && q->dtensor)
        warn_dtensor_attention(I, q, span);
    tp_val *out = result_like(I, q, q->rank, q->shape, q->dimname, span);
    out->poisoned |= !same || k->poisoned || v->poisoned;
    out->gather_comm = q->gather_comm;
    out->gather_dim = q->gather_dim;
    tp_ir_op *op = &tp_record_op(I, TP_OP_ATTENTION, out, "attention", q, in[1], in[2])->op;
    op->m = tp_local_size(I, q, 0);
    op->n = tp_local_size(I, q, 1);
    op->heads = tp_local_size(I, q, 2);
    op->k = tp_local_size(I, q, 3);
    op->groups = tp_local_size(I, in[1], 2);
    op->heads_global = q->shape[2];
    op->scale = at->scale > 0 ? at->scale : 1.0 / sqrt((double)q->shape[3]);   /* SDPA's default */
    op->softcap = at->softcap;
    return out;
}

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
    int d = shard_dim(logits), last = logits->rank - 1;
    if (d < 0 || d == last || tp_placement_eq(labels->pl, logits->pl, labels->rank))
        return true;
    int64_t rows = 1, targets = 1;
    for (int i = 0; i < last; i++)
        rows *= tp_local_size(I, logits, i);
    for (int i = 0; i < labels->rank; i++)
        targets *= tp_local_size(I, labels, i);
    char pl[24];
    tp_diag *g = tp_finding(I, TP_ERROR, style_or(logits, span), "layout-mismatch", logits, labels,
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
    if (shard_dim(logits) != last) {
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
    logits = resolve_partial(I, logits, "cross_entropy", span);
    if (logits->dtensor) {
        tp_diag *g = tp_finding(I, TP_ERROR, style_or(logits, span), "mixed-tensor", logits, NULL,
                                "the logits reach cross_entropy() as a DTensor while the labels are a plain tensor: "
                                "PyTorch raises 'got mixed torch.Tensor and DTensor'");
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "the loss is computed here");
        if (g)
            tp_diag_help(g, "add loss_parallel() to the plan, or return plain logits (use_local_output=True)");
        if (g && shard_dim(logits) == last)
            tp_fix_append_item(g, p, "loss_parallel()");
        return out;
    }
    check_whole(I, find_rule("cross_entropy"), logits, span);
    if (!positions_line_up(I, logits, labels, span))
        out->poisoned = true;
    record_cross_entropy(I, logits, labels, out, false, span);
    return out;
}

/* arange(n): torch.arange(0, n), the 1-D positions PyTorch's test
 * Transformer feeds its position embedding. A plain tensor every rank
 * computes whole; broadcasting lines its dimension 0 up with the sequence
 * of [batch, seq, hidden], so its Shard(0) is a sequence shard. */
static iv arange(interp *I, const tp_node *call, iv *args, int nargs)
{
    if (nargs != 1 || args[0].kind != IV_INT || args[0].i < 1) {
        tp_diag_add(I->d, TP_ERROR, call->span, "model", "arange(n) takes one positive integer, the length");
        I->stop = true;
        return none_iv;
    }
    const tp_node *arg = call->kids[1]->kids[0];
    const char *name = arg->kind == N_NAME ? tp_intern(I, arg->name) : "";
    tp_val *out = tp_val_new(I, 1, &args[0].i, &name);
    out->is_index = out->is_position = true;
    out->span = call->span;
    tp_record_op(I, TP_OP_POSITIONS, out, "arange", NULL, NULL, NULL);
    return tensor_iv(out);
}

static bool want_tensors(interp *I, const tp_node *call, iv *args, int nargs, int n)
{
    if (nargs < n) {
        tp_diag_add(I->d, TP_ERROR, call->span, "model", "%s() takes %d tensor argument%s",
                    call->kids[0]->name, n, n == 1 ? "" : "s");
        I->stop = true;
        return false;
    }
    for (int i = 0; i < n; i++)
        if (args[i].kind != IV_TENSOR) {
            tp_diag_add(I->d, TP_ERROR, call->kids[i + 1]->span, "model", "expected a tensor");
            I->stop = true;
            return false;
        }
    return true;
}

/* Every keyword argument must be one the op takes: a misspelt attribute
 * would otherwise fall back to its default without a word. */
static bool known_keywords(interp *I, const tp_node *call, const op_rule *r, char **kwnames, int nkw)
{
    for (int k = 0; k < nkw; k++) {
        if (tp_keyword_known(r->keywords, kwnames[k]))
            continue;
        tp_span at = tp_call_kw_arg(call, kwnames[k])->span;
        if (!r->keywords) {
            tp_diag_add(I->d, TP_ERROR, at, "model", "%s() has no argument '%s'; it takes no keyword arguments",
                        r->name, kwnames[k]);
        } else {
            char *takes = tp_keyword_list(r->keywords);
            tp_diag_add(I->d, TP_ERROR, at, "model", "%s() has no argument '%s'; it takes %s", r->name, kwnames[k],
                        takes);
            free(takes);
        }
        I->stop = true;
        return false;
    }
    return true;
}

/* Keyword argument `kw`, a number above 0 (or at least 0 with zero_ok),
 * into *out (left alone when the call does not pass it); false (reported)
 * when it is anything else. */
static bool number_kwarg(interp *I, const tp_node *call, const char *op, const char *kw, char **kwnames, iv *kwargs,
                         int nkw, bool zero_ok, double *out)
{
    for (int k = 0; k < nkw; k++) {
        if (strcmp(kwnames[k], kw))
            continue;
        if (kwargs[k].kind == IV_INT || kwargs[k].kind == IV_FLOAT) {
            *out = kwargs[k].kind == IV_FLOAT ? kwargs[k].f : (double)kwargs[k].i;
            if (*out > 0 || (zero_ok && *out == 0))
                return true;
        }
        tp_diag_add(I->d, TP_ERROR, tp_call_kw_arg(call, kw)->span, "model", "%s(): %s must be a %s number", op, kw,
                    zero_ok ? "non-negative" : "positive");
        I->stop = true;
        return false;
    }
    return true;
}

static bool positive_kwarg(interp *I, const tp_node *call, const char *op, const char *kw, char **kwnames, iv *kwargs,
                           int nkw, double *out)
{
    return number_kwarg(I, call, op, kw, kwnames, kwargs, nkw, false, out);
}

/* The keyword argument named kw, or NULL. */
static const iv *kwarg(const char *kw, char **kwnames, const iv *kwargs, int nkw)
{
    for (int k = 0; k < nkw; k++)
        if (!strcmp(kwnames[k], kw))
            return &kwargs[k];
    return NULL;
}

/* rope(partial_rotary_factor=f) rotates the first int(head_dim * f) dims
 * of each head, as transformers' default RoPE init computes `dim`; they
 * must pair up. */
static bool rotary_dims(interp *I, const tp_node *call, int64_t head_dim, double partial, int64_t *out)
{
    *out = (int64_t)((double)head_dim * partial);
    if (partial <= 1.0 && *out >= 2 && *out % 2 == 0)
        return true;
    const tp_node *at = tp_call_kw_arg(call, "partial_rotary_factor");
    if (partial <= 1.0 && *out % 2)     /* transformers' arange(0, dim, 2) / dim, applied to cos's width */
        tp_diag_add(I->d, TP_ERROR, at ? at->span : call->span, "model",
                    "rope(): partial_rotary_factor %g of head_dim %lld gives an odd rotary dim %lld: transformers "
                    "then rotates the first %lld dims with %lld frequencies at exponents 2i/%lld, which rope() does "
                    "not compute", partial, (long long)head_dim, (long long)*out, (long long)*out + 1,
                    (long long)(*out + 1) / 2, (long long)*out);
    else
        tp_diag_add(I->d, TP_ERROR, at ? at->span : call->span, "model",
                    "rope(): partial_rotary_factor %g of head_dim %lld rotates %lld dims; it must be at most 1 and "
                    "rotate an even number of at least 2", partial, (long long)head_dim, (long long)*out);
    I->stop = true;
    return false;
}

/* An error at keyword argument kw of an op call (at the call when kw is
 * NULL): fmt with one string argument. Stops the walk; returns false. */
static bool op_arg_error(interp *I, const tp_node *call, const char *kw, const char *fmt, const char *arg)
{
    const tp_node *at = kw ? tp_call_kw_arg(call, kw) : call;
    tp_diag_add(I->d, TP_ERROR, at ? at->span : call->span, "model", fmt, arg);
    I->stop = true;
    return false;
}

/* yarn's beta_fast=, beta_slow= (HF's 32 and 1 when absent), truncate=
 * (True when absent) and attention_factor= (0 or absent: from factor, or
 * from mscale= and mscale_all_dim= when both are non-zero, as
 * _compute_yarn_parameters derives it). */
static bool rope_yarn_kwargs(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw, tp_rope_scaling *r)
{
    double attention_factor = 0, mscale = 0, mscale_all_dim = 0;
    if (!positive_kwarg(I, call, "rope", "beta_fast", kwnames, kwargs, nkw, &r->beta_fast) ||
        !positive_kwarg(I, call, "rope", "beta_slow", kwnames, kwargs, nkw, &r->beta_slow) ||
        !number_kwarg(I, call, "rope", "attention_factor", kwnames, kwargs, nkw, true, &attention_factor) ||
        !number_kwarg(I, call, "rope", "mscale", kwnames, kwargs, nkw, true, &mscale) ||
        !number_kwarg(I, call, "rope", "mscale_all_dim", kwnames, kwargs, nkw, true, &mscale_all_dim))
        return false;
    const iv *truncate = kwarg("truncate", kwnames, kwargs, nkw);
    if (truncate && (truncate->kind != IV_INT || (truncate->i != 0 && truncate->i != 1)))
        return op_arg_error(I, call, "truncate", "rope(): %s must be True or False", "truncate");
    r->truncate = !truncate || truncate->i;
    r->attention_factor = r->type != TP_ROPE_YARN ? 1.0
                          : attention_factor > 0  ? attention_factor
                                                  : tp_rope_yarn_attention_factor(r->factor, mscale, mscale_all_dim);
    return true;
}

/* rope(x, theta=, scaling=, factor=, low_freq_factor=, high_freq_factor=,
 * original_max_position_embeddings=, max_position_embeddings=, and yarn's
 * keywords): Hugging Face's rope_scaling, its type a string ("default"
 * when absent). Dynamic NTK grows from max_position_embeddings (the
 * config's, as _compute_dynamic_ntk_parameters reads it; an
 * original_max_position_embeddings member is not its key), the others
 * from original_max_position_embeddings. A type tpcc does not compute
 * (longrope, ...) is an error: ignoring it would change the logits. */
static bool rope_scaling_kwargs(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw,
                                tp_rope_scaling *r)
{
    *r = (tp_rope_scaling){TP_ROPE_DEFAULT, 1.0, 1.0, 4.0, 0, 32.0, 1.0, 1.0, true};
    const iv *type = kwarg("scaling", kwnames, kwargs, nkw);
    if (type && type->kind != IV_STR)
        return op_arg_error(I, call, "scaling", "rope(): %s must be a string, such as \"llama3\"", "scaling");
    if (type) {
        int t = tp_rope_type_parse(type->s);
        if (t < 0)
            return op_arg_error(I, call, "scaling",
                                "rope(): RoPE scaling \"%s\" is not supported (tpcc computes default, linear, "
                                "dynamic, llama3 and yarn)", type->s);
        r->type = (tp_rope_type)t;
    }
    const char *context = r->type == TP_ROPE_DYNAMIC && kwarg("max_position_embeddings", kwnames, kwargs, nkw)
                              ? "max_position_embeddings"
                              : "original_max_position_embeddings";
    double max_positions = 0;
    if (!positive_kwarg(I, call, "rope", "factor", kwnames, kwargs, nkw, &r->factor) ||
        !positive_kwarg(I, call, "rope", "low_freq_factor", kwnames, kwargs, nkw, &r->low_freq_factor) ||
        !positive_kwarg(I, call, "rope", "high_freq_factor", kwnames, kwargs, nkw, &r->high_freq_factor) ||
        !positive_kwarg(I, call, "rope", context, kwnames, kwargs, nkw, &max_positions))
        return false;
    const iv *max_arg = kwarg(context, kwnames, kwargs, nkw);
    if (max_arg && max_arg->kind != IV_INT)
        return op_arg_error(I, call, context, "rope(): %s must be an integer", context);
    r->original_max_positions = (int64_t)max_positions;
    if (!rope_yarn_kwargs(I, call, kwnames, kwargs, nkw, r))
        return false;
    const char *why = tp_rope_scaling_invalid(r);
    if (why)
        return op_arg_error(I, call, NULL, "rope(): %s", why);
    return true;
}

/* attention()'s softcap=, a number >= 0 (0 when absent: none). */
static bool attention_softcap(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw, double *out)
{
    const iv *a = kwarg("softcap", kwnames, kwargs, nkw);
    *out = !a ? 0 : a->kind == IV_FLOAT ? a->f : a->kind == IV_INT ? (double)a->i : -1;
    if (*out >= 0)
        return true;
    return op_arg_error(I, call, "softcap", "attention(): %s must be a number, 0 for none", "softcap");
}

/* attention(q, k, v, causal=True, scale=, softcap=); sliding_window= is
 * window_covers_seq's. */
static bool attention_kwargs(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw, attention_attrs *at)
{
    *at = (attention_attrs){0, 0};
    return positive_kwarg(I, call, "attention", "scale", kwnames, kwargs, nkw, &at->scale) &&
           attention_softcap(I, call, kwnames, kwargs, nkw, &at->softcap);
}

/* attention(q, k, v, causal=True): the runtime's attention is causal, so
 * causal=False would silently compute something else. */
static bool causal_only(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw)
{
    for (int k = 0; k < nkw; k++)
        if (!strcmp(kwnames[k], "causal") && (kwargs[k].kind != IV_INT || kwargs[k].i != 1)) {
            tp_diag_add(I->d, TP_ERROR, tp_call_kw_arg(call, "causal")->span, "model",
                        "attention(): only causal=True is supported (the models are decoders)");
            I->stop = true;
            return false;
        }
    return true;
}

/* gelu(x, approximate="none"|"tanh"), as torch.nn.functional.gelu:
 * *tanh is whether the tanh approximation is asked for. */
static bool gelu_approximate(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw, bool *tanh)
{
    const iv *a = kwarg("approximate", kwnames, kwargs, nkw);
    *tanh = false;
    if (!a)
        return true;
    if (a->kind == IV_STR && (!strcmp(a->s, "none") || !strcmp(a->s, "tanh"))) {
        *tanh = !strcmp(a->s, "tanh");
        return true;
    }
    return op_arg_error(I, call, "approximate", "gelu(): approximate must be \"none\" or \"tanh\"%s",
                        a->kind == IV_STR ? ", as in torch" : " (a string)");
}

/* softcap(x, cap): the cap, a number >= 0 (0: none, transformers' None). */
static bool softcap_arg(interp *I, const tp_node *call, iv *args, int nargs, double *cap)
{
    const tp_node *at = tp_call_pos(call, 1);
    *cap = -1;
    if (nargs == 2 && (args[1].kind == IV_FLOAT || args[1].kind == IV_INT))
        *cap = args[1].kind == IV_FLOAT ? args[1].f : (double)args[1].i;
    if (*cap >= 0)
        return true;
    tp_diag_add(I->d, TP_ERROR, at ? at->span : call->span, "model",
                "softcap(x, cap) takes a tensor and a number, the cap (0 for none)");
    I->stop = true;
    return false;
}

/* activation(x, name): the op that transformers' ACT2FN[name] computes. */
static bool hf_activation(interp *I, const tp_node *call, iv *args, int nargs, tp_op_kind *kind, bool *tanh)
{
    const tp_node *at = tp_call_pos(call, 1);
    if (nargs != 2 || args[1].kind != IV_STR) {
        tp_diag_add(I->d, TP_ERROR, at ? at->span : call->span, "model",
                    "activation(x, name) takes a tensor and a Hugging Face activation name, such as hidden_act");
        I->stop = true;
        return false;
    }
    for (int i = 0; i < NACTIVATIONS; i++)
        if (!strcmp(hf_activations[i].name, args[1].s)) {
            *kind = hf_activations[i].kind;
            *tanh = hf_activations[i].tanh;
            return true;
        }
    tp_buf names;
    tp_buf_init(&names);
    for (int i = 0; i < NACTIVATIONS; i++)
        tp_buf_appendf(&names, "%s%s", i ? ", " : "", hf_activations[i].name);
    tp_diag *g = tp_diag_add(I->d, TP_ERROR, at->span, "model",
                             "activation(): the Hugging Face activation \"%s\" is not supported; tpcc computes %s",
                             args[1].s, names.data);
    const tp_cfg_entry *e = at->kind == N_NAME ? tp_config_entry(I->c, at->name) : NULL;
    if (g && e && e->span.file >= 0)
        tp_diag_note_at(g, e->span, "'%s' is defined here", at->name);
    tp_buf_free(&names);
    I->stop = true;
    return false;
}

/* attention(..., sliding_window=W): position i attends to positions
 * j > i - W (Hugging Face's sliding_window_overlay). A window of at least
 * the sequence length masks nothing; a shorter one would, and the runtime's
 * attention has no window, so it is an error rather than other logits. */
static bool window_covers_seq(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw,
                              const tp_val *q)
{
    const iv *w = kwarg("sliding_window", kwnames, kwargs, nkw);
    if (!w)
        return true;
    const tp_node *at = tp_call_kw_arg(call, "sliding_window");
    if (w->kind != IV_INT || w->i <= 0) {
        tp_diag_add(I->d, TP_ERROR, at->span, "model", "attention(): sliding_window must be a positive integer");
        I->stop = true;
        return false;
    }
    int64_t seq = q->rank > 1 ? q->shape[1] : 0;
    if (w->i >= seq)
        return true;
    tp_diag *g = tp_diag_add(I->d, TP_ERROR, at->span, "model",
                             "attention(): sliding_window %lld is below seq %lld: each position attends to only "
                             "the last %lld positions, and tpcc's attention attends to all of them",
                             (long long)w->i, (long long)seq, (long long)w->i);
    tp_diag_help(g, "compile with -D seq=%lld or less: sliding-window attention is not supported yet",
                 (long long)w->i);
    I->stop = true;
    return false;
}

iv tp_op_apply(interp *I, const tp_node *call, const char *name, iv *args, int nargs, char **kwnames, iv *kwargs,
               int nkw)
{
    const op_rule *r = find_rule(name);
    tp_span span = call->span;
    double theta = ROPE_THETA_DEFAULT, partial = 1.0;
    tp_rope_scaling scaling;
    if (!known_keywords(I, call, r, kwnames, nkw) || !causal_only(I, call, kwnames, kwargs, nkw))
        return none_iv;
    if (r->lowers_to == TP_OP_ROPE && (!positive_kwarg(I, call, name, "theta", kwnames, kwargs, nkw, &theta) ||
                                       !positive_kwarg(I, call, name, "partial_rotary_factor", kwnames, kwargs, nkw,
                                                       &partial) ||
                                       !rope_scaling_kwargs(I, call, kwnames, kwargs, nkw, &scaling)))
        return none_iv;
    if (!strcmp(name, "arange"))
        return arange(I, call, args, nargs);
    tp_op_kind kind = r->lowers_to;
    bool gelu_tanh = false;
    attention_attrs attn;
    double cap = 0;
    if (kind == TP_OP_ATTENTION && !attention_kwargs(I, call, kwnames, kwargs, nkw, &attn))
        return none_iv;
    if (kind == TP_OP_SOFTCAP && !softcap_arg(I, call, args, nargs, &cap))
        return none_iv;
    if (kind == TP_OP_GELU && !gelu_approximate(I, call, kwnames, kwargs, nkw, &gelu_tanh))
        return none_iv;
    if (!strcmp(name, "activation") && !hf_activation(I, call, args, nargs, &kind, &gelu_tanh))
        return none_iv;
    if (!want_tensors(I, call, args, nargs, r->ntensors))
        return none_iv;
    for (int i = 0; i < r->ntensors; i++)
        tp_packed_misuse(I, args[i].t, name, span);
    tp_val *x = args[0].t;
    if (r->lowers_to == TP_OP_ROPE)
        tp_grown_meet_rope(I, x, span);
    if (kind == TP_OP_ATTENTION)
        return window_covers_seq(I, call, kwnames, kwargs, nkw, x)
                   ? tensor_iv(attention(I, x, args[1].t, args[2].t, &attn, span))
                   : none_iv;
    if (kind == TP_OP_SOFTCAP && cap == 0)
        kind = TP_OP_COUNT;              /* transformers' None: no capping */
    if (!strcmp(name, "cross_entropy"))
        return tensor_iv(tp_cross_entropy(I, x, args[1].t, span));
    if (!r->linear)
        x = resolve_partial(I, x, name, span);
    mixed_ok(I, r, x, span);
    check_whole(I, r, x, span);
    tp_val *out;
    if (!strcmp(name, "view_heads")) {
        if (nargs < 2 || args[1].kind != IV_INT) {
            tp_diag_add(I->d, TP_ERROR, span, "model", "view_heads(x, head_dim) needs the head size");
            I->stop = true;
            return none_iv;
        }
        out = view_heads(I, x, args[1].i, span);
    } else if (!strcmp(name, "merge_heads")) {
        out = merge_heads(I, x, span);
    } else {
        out = result_like(I, x, x->rank, x->shape, x->dimname, span);
        if (!strcmp(name, "positions")) {
            out->is_index = out->is_position = true;
            out->dtensor = false;
        }
        /* elementwise and RoPE act independently along heads: keep tracking a gather */
        out->gather_comm = x->gather_comm;
        out->gather_dim = x->gather_dim;
    }
    if (kind == TP_OP_COUNT) {
        tp_record_view(I, out, x);
        return tensor_iv(out);
    }
    tp_ir_op *op = &tp_record_op(I, kind, out, name, x, NULL, NULL)->op;
    op->gelu_tanh = gelu_tanh;
    op->softcap = cap;
    int seq = r->lowers_to == TP_OP_ROPE ? x->rank - 3 : x->rank - 1;
    /* a sequence shard would start at rank * its length (rejected above
     * for RoPE; recorded so the schedule says what it assumed) */
    op->pos_chunk = shard_dim(x) == seq ? tp_local_size(I, x, seq) : 0;
    if (r->lowers_to == TP_OP_ROPE) {
        op->theta = theta;
        op->rope = scaling;
        op->k = tp_local_size(I, x, x->rank - 1);
        if (!rotary_dims(I, call, op->k, partial, &op->rotary))
            return none_iv;
    }
    return tensor_iv(out);
}

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
    tp_val *out = result_like(I, x, x->rank, x->shape, x->dimname, e->span);
    out->gather_comm = x->gather_comm;
    out->gather_dim = x->gather_dim;
    tp_ir_op *op = &tp_record_op(I, TP_OP_SCALE, out, "scale", x, NULL, NULL)->op;
    op->scale = factor;
    /* the factor is a tensor of the activations' dtype, as Gemma makes its
     * normaliser: torch.tensor(hidden ** 0.5, dtype=h.dtype) */
    op->scale_in_dtype = true;
    return tensor_iv(out);
}

iv tp_op_binary(interp *I, const tp_node *e, int op, tp_val *a, tp_val *b)
{
    tp_span span = e->span;
    const char *opname = op == '+' ? "add" : op == '*' ? "mul" : "op";
    if (op != '+' && op != '*') {
        tp_diag_add(I->d, TP_ERROR, span, "model", "tensors support only + and *");
        I->stop = true;
        return none_iv;
    }
    tp_packed_misuse(I, a, opname, span);
    tp_packed_misuse(I, b, opname, span);
    tp_val *big = a->rank >= b->rank ? a : b, *small = big == a ? b : a;
    for (int i = 1; i <= small->rank; i++)
        tp_grown_meet(I, big->shape[big->rank - i], small->shape[small->rank - i], span,
                      op == '+' ? "an add" : "a mul", "a tensor");
    tp_val *out = result_like(I, big, big->rank, big->shape, big->dimname, span);
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
        return tensor_iv(out);
    }
    tp_placement A = broadcast_pl(a, big), B = broadcast_pl(b, big);
    if (a->dtensor) {
        out->pl = dtensor_pointwise(I, op, &a, &b, big, span);
        tp_record_op(I, op == '+' ? TP_OP_ADD : TP_OP_MUL, out, opname, a, b, NULL);
        return tensor_iv(out);
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
        tp_diag *g = tp_finding(I, TP_ERROR, style_or(odd, span), "layout-mismatch", a, b,
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
    return tensor_iv(out);
}

/* ---- leaf modules ---------------------------------------------------------- */

static bool plain_module_gets_dtensor(interp *I, tp_module *mod, tp_val *x, tp_span span)
{
    /* a style other than the hookless Hugging Face ones makes the parameters DTensors */
    if (!x->dtensor || (mod->style && mod->style->kind != TP_STYLE_IDENTITY))
        return false;
    char pl[24];
    tp_diag *g = tp_finding(I, TP_ERROR, style_or(x, span), "mixed-tensor", x, NULL,
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
        tp_val *r = result_like(I, x, x->rank, shape, names, span);
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
        tp_val *r = result_like(I, x, x->rank, shape, names, span);
        r->pl = tp_partial();          /* bias: R -> P is a local divide, no communication */
        r->partial_cause = s;
        return r;
    }
    if (plain_module_gets_dtensor(I, mod, x, span)) {
        tp_val *r = result_like(I, x, x->rank, shape, names, span);
        r->poisoned = true;
        return r;
    }
    tp_val *r = result_like(I, x, x->rank, shape, names, span);
    int d = shard_dim(x);
    if (d == last) {
        tp_diag *g = tp_finding(I, TP_ERROR, style_or(x, span), "layout-mismatch", x, NULL,
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
    if (!ids->is_position || ids->poisoned || shard_dim(ids) >= 0 || ids->rank < 1 ||
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
        tp_val *r = result_like(I, ids, ids->rank + 1, shape, names, span);
        /* Colwise splits the embedding dim; Rowwise splits the vocab and
         * yields rows that still need masking and summing (_MaskPartial) */
        r->pl = s->kind == TP_STYLE_COLWISE ? tp_shard(ids->rank) : tp_mask_partial();
        r->is_index = false;
        r->shard_cause = s;
        r->partial_cause = s;
        return r;
    }
    bool mixed = plain_module_gets_dtensor(I, mod, ids, span);
    tp_val *r = result_like(I, ids, ids->rank + 1, shape, names, span);
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
        x = *xp = resolve_partial(I, x, mod->type, span);
    }
    if (shard_dim(x) == last) {
        tp_diag *g = tp_finding(I, TP_ERROR, style_or(x, span), "layout-mismatch", x, NULL,
                                "'%s' (%s) normalises over dimension %d (%s), which is sharded: each rank would "
                                "normalise its own slice of the features", mod->fqn, mod->type, last, x->dimname[last]);
        if (g && span.file >= 0)
            tp_diag_note_at(g, span, "'%s' is called here", mod->fqn);
        if (g)
            tp_diag_help(g, "gather the features first, or shard the sequence instead (SequenceParallel)");
        x->poisoned = true;
    }
    return result_like(I, x, x->rank, x->shape, x->dimname, span);
}

/* [..., k] rows as a matrix: the product of the local leading dims. */
static int64_t rows_of(const interp *I, const tp_val *x)
{
    int64_t m = 1;
    for (int d = 0; d < x->rank - 1; d++)
        m *= tp_local_size(I, x, d);
    return m;
}

static void record_linear(interp *I, tp_module *mod, tp_val *x, tp_val *r)
{
    tp_param *w = tp_module_param(mod, "weight"), *b = tp_module_param(mod, "bias");
    tp_op_kind kind = mod->kind == TP_MOD_CONV1D ? TP_OP_CONV1D : TP_OP_MATMUL;
    tp_ir_op *op = &tp_record_op(I, kind, r, "out", x, NULL, NULL)->op;
    op->weight = tp_record_param(I, w);
    op->m = rows_of(I, x);
    op->k = tp_local_size(I, x, x->rank - 1);
    op->n = tp_local_size(I, r, r->rank - 1);
    if (!b || tp_bias_after_reduce(mod))
        return;
    op = &tp_record_op(I, TP_OP_BIAS_ADD, r, "out", r, NULL, NULL)->op;
    op->bias = tp_record_param(I, b);
    op->m = rows_of(I, r);
    op->n = tp_local_size(I, r, r->rank - 1);
    /* a replicated bias added to a Partial sum is divided by tp (DTensor's
     * addmm rule), so the reduction counts it once */
    op->scale = tp_placement_is_partial(r->pl) ? 1.0 / (double)I->tp : 1.0;
}

/* transformers' rowwise styles hide a Linear's bias during the local
 * matmul and add it once after the all-reduce (RowwiseParallel.
 * context_around_forward and transform_output_post_forward). */
bool tp_bias_after_reduce(const tp_module *mod)
{
    const tp_style *s = mod->style;
    return s && s->hf && s->hf->bias_after_reduce && mod->kind == TP_MOD_LINEAR && tp_module_param(mod, "bias");
}

void tp_record_bias_add(interp *I, tp_module *mod, tp_val *v)
{
    tp_ir_op *op = &tp_record_op(I, TP_OP_BIAS_ADD, v, "out", v, NULL, NULL)->op;
    op->bias = tp_record_param(I, tp_module_param(mod, "bias"));
    op->m = rows_of(I, v);
    op->n = tp_local_size(I, v, v->rank - 1);
    op->scale = 1.0;
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
    op->m = rows_of(I, x);
    op->n = tp_local_size(I, x, x->rank - 1);
    op->eps = mod->eps;
    op->unit_offset = mod->unit_offset;
}

iv tp_leaf_forward(interp *I, tp_module *mod, iv *args, int nargs, tp_span span)
{
    if (nargs < 1 || args[0].kind != IV_TENSOR) {
        tp_diag_add(I->d, TP_ERROR, span, "model", "'%s' (%s) takes one tensor argument", mod->fqn, mod->type);
        I->stop = true;
        return none_iv;
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
    return tensor_iv(r);
}
