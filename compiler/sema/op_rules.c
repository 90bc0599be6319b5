/* op_rules.c: the layout rules of the primitive ops, the apply functions
 * of their rows in the op table (op_table.c).
 *
 * Rules are data where they can be: each row names the dimensions the op
 * needs whole on every rank (RoPE's positions, attention's sequence),
 * whether it is linear (a Partial input stays Partial), whether PyTorch's
 * implementation accepts a DTensor and the keyword arguments it takes (its
 * attributes: rope's theta). Shape changes (head split and merge) and
 * attention's heads are small functions. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/front/hf_names.h"
#include "compiler/front/window.h"
#include "compiler/sema/op_table.h"
#include "util/xalloc.h"

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

static bool mixed_ok(interp *I, const tp_op_row *r, tp_val *x, tp_span span)
{
    if (r->dtensor_ok || !x->dtensor)
        return true;
    tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(x, span), "mixed-tensor", x, NULL,
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
    tp_val *r = tp_result_like(I, x, x->rank + 1, shape, names, span);
    r->replicated_heads = NULL;
    r->gather_comm = x->gather_comm;
    r->gather_dim = x->gather_dim;
    if (tp_shard_dim(x) == x->rank - 1) {
        r->pl = tp_shard(x->rank - 1);
        if (heads % I->tp) {
            tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(x, span), "divisibility", x, NULL,
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
    tp_val *r = tp_result_like(I, x, x->rank - 1, shape, names, span);
    r->gather_comm = x->gather_comm;
    r->gather_dim = x->gather_dim;
    if (tp_shard_dim(x) == x->rank - 2)
        r->pl = tp_shard(x->rank - 2);
    return r;
}

/* DTensor's sharding strategies for scaled_dot_product_attention cover
 * the CUDA flash and memory-efficient kernels only: the CPU kernel raises
 * NotImplementedError on DTensors, the CUDA one shards by heads. */
static void warn_dtensor_attention(interp *I, const tp_val *q, tp_span span)
{
    char a[24];
    tp_diag *g = tp_finding(I, TP_WARNING, tp_cause_span(q, span), "dtensor-attention", q, NULL,
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
    if (kv->heads_diag < 0 || q->poisoned || tp_shard_dim(q) != h || q->shape[h] % I->tp)
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

static tp_val *attention(interp *I, const tp_op_row *r, tp_val *q, tp_val *k, tp_val *v, const attention_attrs *at,
                         tp_span span)
{
    if (!attention_shapes_fit(I, q, k, v, span)) {
        I->stop = true;
        return q;
    }
    suggest_replicated_heads(I, q, k);
    if (v->heads_diag != k->heads_diag)
        suggest_replicated_heads(I, q, v);
    tp_val *in[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        in[i] = tp_resolve_partial(I, in[i], "attention", span);
        tp_check_whole(I, r->name, &r->whole, in[i], span);
    }
    q = in[0];
    bool same = true;
    for (int i = 1; i < 3; i++)
        same &= tp_placement_eq(in[i]->pl, q->pl, q->rank) && in[i]->dtensor == q->dtensor;
    if (!same) {
        char a[24], b[24];
        tp_val *odd = !tp_placement_eq(k->pl, q->pl, q->rank) || k->dtensor != q->dtensor ? k : v;
        tp_diag *g = tp_finding(I, TP_ERROR, tp_cause_span(odd, span), "layout-mismatch", q, odd,
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
    tp_val *out = tp_result_like(I, q, q->rank, q->shape, q->dimname, span);
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
static bool known_keywords(interp *I, const tp_node *call, const tp_op_row *r, char **kwnames, int nkw)
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

/* A finding at keyword argument kw of an op call (at the call when kw is
 * NULL): fmt with one string argument; check "model" for an error, or
 * what tpcc cannot compute yet (TP_UNSUPPORTED). Stops the walk; returns
 * false. */
static bool op_arg_finding(interp *I, const tp_node *call, const char *kw, tp_diag_level level, const char *fmt,
                           const char *arg)
{
    const tp_node *at = kw ? tp_call_kw_arg(call, kw) : call;
    tp_diag_add(I->d, level, at ? at->span : call->span, level == TP_UNSUPPORTED ? "unsupported" : "model", fmt,
                arg);
    I->stop = true;
    return false;
}

static bool op_arg_error(interp *I, const tp_node *call, const char *kw, const char *fmt, const char *arg)
{
    return op_arg_finding(I, call, kw, TP_ERROR, fmt, arg);
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
 * from original_max_position_embeddings. A type transformers computes and
 * tpcc does not (longrope) is unsupported, another an error: ignoring
 * either would change the logits. */
static bool rope_scaling_kwargs(interp *I, const tp_node *call, char **kwnames, iv *kwargs, int nkw,
                                tp_rope_scaling *r)
{
    *r = (tp_rope_scaling){TP_ROPE_DEFAULT, 1.0, 1.0, 4.0, 0, 32.0, 1.0, 1.0, true};
    const iv *type = kwarg("scaling", kwnames, kwargs, nkw);
    if (type && type->kind != IV_STR)
        return op_arg_error(I, call, "scaling", "rope(): %s must be a string, such as \"llama3\"", "scaling");
    if (type) {
        int t = tp_rope_type_parse(type->s);
        if (t < 0 && tp_hf_rope_type_defined(type->s))
            return op_arg_finding(I, call, "scaling", TP_UNSUPPORTED,
                                  "rope(): RoPE scaling \"%s\", which transformers computes: tpcc would need its "
                                  "frequencies in rope() (it computes default, linear, dynamic, llama3 and yarn)",
                                  type->s);
        if (t < 0)
            return op_arg_error(I, call, "scaling",
                                "rope(): RoPE scaling \"%s\" is no RoPE type transformers defines "
                                "(ROPE_INIT_FUNCTIONS), and none tpcc computes (default, linear, dynamic, llama3, "
                                "yarn)", type->s);
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
    tp_diag *g = tp_hf_activation_defined(args[1].s)
                     ? tp_diag_unsupported(I->d, at->span,
                                           "activation(): transformers' activation \"%s\": tpcc would need its "
                                           "kernel (it computes %s)", args[1].s, names.data)
                     : tp_diag_add(I->d, TP_ERROR, at->span, "model",
                                   "activation(): \"%s\" is no activation transformers defines (ACT2FN raises "
                                   "KeyError); tpcc computes %s", args[1].s, names.data);
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
 * attention has no window, so it is unsupported rather than other logits. */
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
    tp_diag *g = tp_diag_unsupported(I->d, at->span,
                                     "attention(): sliding_window %lld is below seq %lld: each position attends to "
                                     "only the last %lld positions, and tpcc's attention attends to all of them: "
                                     TP_WINDOW_NEEDS, (long long)w->i, (long long)seq, (long long)w->i);
    tp_window_help(g, w->i, I->tp);
    I->stop = true;
    return false;
}

/* The row's tensor arguments: false (reported) when one is missing or
 * is no tensor. A packed one is reported, and read on. */
static bool tensors_in(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    if (!want_tensors(I, a->call, a->args, a->nargs, r->ntensors))
        return false;
    for (int i = 0; i < r->ntensors; i++)
        tp_packed_misuse(I, a->args[i].t, r->name, a->call->span);
    return true;
}

/* x as an op of one tensor reads it: a Partial resolved first unless the
 * op is linear, then the DTensor and whole-dimension checks. */
static tp_val *layout_in(interp *I, const tp_op_row *r, tp_val *x, tp_span span)
{
    if (!r->linear)
        x = tp_resolve_partial(I, x, r->name, span);
    mixed_ok(I, r, x, span);
    tp_check_whole(I, r->name, &r->whole, x, span);
    return x;
}

/* The one tensor argument, checked and laid out; NULL after an error that
 * stops the walk. */
static tp_val *unary_in(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    return tensors_in(I, r, a) ? layout_in(I, r, a->args[0].t, a->call->span) : NULL;
}

/* An elementwise result (RoPE's too): x's shape and layout. */
static tp_val *same_shape(interp *I, const tp_val *x, tp_span span)
{
    tp_val *out = tp_result_like(I, x, x->rank, x->shape, x->dimname, span);
    /* elementwise and RoPE act independently along heads: keep tracking a gather */
    out->gather_comm = x->gather_comm;
    out->gather_dim = x->gather_dim;
    return out;
}

/* out recorded as the op `kind` of x; as a view of x for TP_OP_COUNT,
 * returning NULL. */
static tp_ir_op *record_unary(interp *I, const tp_op_row *r, tp_op_kind kind, tp_val *x, tp_val *out)
{
    if (kind == TP_OP_COUNT) {
        tp_record_view(I, out, x);
        return NULL;
    }
    tp_ir_op *op = &tp_record_op(I, kind, out, r->name, x, NULL, NULL)->op;
    int seq = r->lowers_to == TP_OP_ROPE ? x->rank - 3 : x->rank - 1;
    /* a sequence shard would start at rank * its length (rejected above
     * for RoPE; recorded so the schedule says what it assumed) */
    op->pos_chunk = tp_shard_dim(x) == seq ? tp_local_size(I, x, seq) : 0;
    return op;
}

iv tp_op_pointwise(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    tp_val *x = known_keywords(I, a->call, r, a->kwnames, a->nkw) ? unary_in(I, r, a) : NULL;
    if (!x)
        return tp_none_iv;
    tp_val *out = same_shape(I, x, a->call->span);
    record_unary(I, r, r->lowers_to, x, out);
    return tp_tensor_iv(out);
}

iv tp_op_gelu(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    bool tanh;
    if (!known_keywords(I, a->call, r, a->kwnames, a->nkw) ||
        !gelu_approximate(I, a->call, a->kwnames, a->kwargs, a->nkw, &tanh))
        return tp_none_iv;
    tp_val *x = unary_in(I, r, a);
    if (!x)
        return tp_none_iv;
    tp_val *out = same_shape(I, x, a->call->span);
    record_unary(I, r, r->lowers_to, x, out)->gelu_tanh = tanh;
    return tp_tensor_iv(out);
}

iv tp_op_activation(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    tp_op_kind kind;
    bool tanh;
    if (!known_keywords(I, a->call, r, a->kwnames, a->nkw) || !hf_activation(I, a->call, a->args, a->nargs, &kind, &tanh))
        return tp_none_iv;
    tp_val *x = unary_in(I, r, a);
    if (!x)
        return tp_none_iv;
    tp_val *out = same_shape(I, x, a->call->span);
    record_unary(I, r, kind, x, out)->gelu_tanh = tanh;
    return tp_tensor_iv(out);
}

iv tp_op_softcap(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    double cap;
    if (!known_keywords(I, a->call, r, a->kwnames, a->nkw) || !softcap_arg(I, a->call, a->args, a->nargs, &cap))
        return tp_none_iv;
    tp_val *x = unary_in(I, r, a);
    if (!x)
        return tp_none_iv;
    tp_val *out = same_shape(I, x, a->call->span);
    /* cap 0 is transformers' None: no capping, a view of x */
    tp_ir_op *op = record_unary(I, r, cap == 0 ? TP_OP_COUNT : r->lowers_to, x, out);
    if (op)
        op->softcap = cap;
    return tp_tensor_iv(out);
}

/* positions(ids): each token's position, plain integers every rank
 * computes itself. */
iv tp_op_positions(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    tp_val *x = known_keywords(I, a->call, r, a->kwnames, a->nkw) ? unary_in(I, r, a) : NULL;
    if (!x)
        return tp_none_iv;
    tp_val *out = same_shape(I, x, a->call->span);
    out->is_index = out->is_position = true;
    out->dtensor = false;
    record_unary(I, r, r->lowers_to, x, out);
    return tp_tensor_iv(out);
}

/* arange(n): torch.arange(0, n), the 1-D positions PyTorch's test
 * Transformer feeds its position embedding. A plain tensor every rank
 * computes whole; broadcasting lines its dimension 0 up with the sequence
 * of [batch, seq, hidden], so its Shard(0) is a sequence shard. */
iv tp_op_arange(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    const tp_node *call = a->call;
    const iv *args = a->args;
    if (!known_keywords(I, call, r, a->kwnames, a->nkw))
        return tp_none_iv;
    if (a->nargs != 1 || args[0].kind != IV_INT || args[0].i < 1) {
        tp_diag_add(I->d, TP_ERROR, call->span, "model", "arange(n) takes one positive integer, the length");
        I->stop = true;
        return tp_none_iv;
    }
    const tp_node *arg = call->kids[1]->kids[0];
    const char *name = arg->kind == N_NAME ? tp_intern(I, arg->name) : "";
    tp_val *out = tp_val_new(I, 1, &args[0].i, &name);
    out->is_index = out->is_position = true;
    out->span = call->span;
    tp_record_op(I, TP_OP_POSITIONS, out, "arange", NULL, NULL, NULL);
    return tp_tensor_iv(out);
}

iv tp_op_view_heads(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    tp_val *x = known_keywords(I, a->call, r, a->kwnames, a->nkw) ? unary_in(I, r, a) : NULL;
    if (!x)
        return tp_none_iv;
    if (a->nargs < 2 || a->args[1].kind != IV_INT) {
        tp_diag_add(I->d, TP_ERROR, a->call->span, "model", "view_heads(x, head_dim) needs the head size");
        I->stop = true;
        return tp_none_iv;
    }
    tp_val *out = view_heads(I, x, a->args[1].i, a->call->span);
    record_unary(I, r, r->lowers_to, x, out);
    return tp_tensor_iv(out);
}

iv tp_op_merge_heads(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    tp_val *x = known_keywords(I, a->call, r, a->kwnames, a->nkw) ? unary_in(I, r, a) : NULL;
    if (!x)
        return tp_none_iv;
    tp_val *out = merge_heads(I, x, a->call->span);
    record_unary(I, r, r->lowers_to, x, out);
    return tp_tensor_iv(out);
}

iv tp_op_rope(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    const tp_node *call = a->call;
    double theta = ROPE_THETA_DEFAULT, partial = 1.0;
    tp_rope_scaling scaling;
    if (!known_keywords(I, call, r, a->kwnames, a->nkw) ||
        !positive_kwarg(I, call, r->name, "theta", a->kwnames, a->kwargs, a->nkw, &theta) ||
        !positive_kwarg(I, call, r->name, "partial_rotary_factor", a->kwnames, a->kwargs, a->nkw, &partial) ||
        !rope_scaling_kwargs(I, call, a->kwnames, a->kwargs, a->nkw, &scaling) || !tensors_in(I, r, a))
        return tp_none_iv;
    tp_grown_meet_rope(I, a->args[0].t, call->span);
    tp_val *x = layout_in(I, r, a->args[0].t, call->span);
    tp_val *out = same_shape(I, x, call->span);
    tp_ir_op *op = record_unary(I, r, r->lowers_to, x, out);
    op->theta = theta;
    op->rope = scaling;
    op->k = tp_local_size(I, x, x->rank - 1);
    return rotary_dims(I, call, op->k, partial, &op->rotary) ? tp_tensor_iv(out) : tp_none_iv;
}

iv tp_op_attention(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    const tp_node *call = a->call;
    attention_attrs at;
    if (!known_keywords(I, call, r, a->kwnames, a->nkw) || !causal_only(I, call, a->kwnames, a->kwargs, a->nkw) ||
        !attention_kwargs(I, call, a->kwnames, a->kwargs, a->nkw, &at) || !tensors_in(I, r, a))
        return tp_none_iv;
    tp_val *q = a->args[0].t;
    if (!window_covers_seq(I, call, a->kwnames, a->kwargs, a->nkw, q))
        return tp_none_iv;
    return tp_tensor_iv(attention(I, r, q, a->args[1].t, a->args[2].t, &at, call->span));
}

/* cross_entropy(logits, labels): the rule the loss outside the model
 * shares (cross_entropy.c). */
iv tp_op_cross_entropy(interp *I, const tp_op_row *r, const tp_op_args *a)
{
    if (!known_keywords(I, a->call, r, a->kwnames, a->nkw) || !tensors_in(I, r, a))
        return tp_none_iv;
    return tp_tensor_iv(tp_cross_entropy(I, a->args[0].t, a->args[1].t, a->call->span));
}
