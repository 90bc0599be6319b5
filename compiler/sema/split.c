/* split.c: split() and chunk() of a tensor into the tuple a forward body
 * unpacks (`q, k, v = split(qkv, (a, b, c), dim=-1)`), with torch's sizes
 * and DTensor's rule, and the packed output of a fused projection.
 *
 * A fused projection (Linear(..., packed=(a, b, c)) in the model) sharded
 * contiguously (ColwiseParallel: Shard(0) of the weight) gives rank r the
 * r-th tp-th of the fused features, which straddles the segments; split()
 * on that local tensor is wrong. Sharded per segment ("packed_colwise", as
 * Hugging Face's PackedColwiseParallel and Megatron's fused layouts do),
 * rank r holds its share of every segment one after another, and splitting
 * the local tensor into the segments' shares is right. Each piece is a
 * narrow op of the local tensor. A packed output read by anything else is
 * packed.c's error. */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/op_table.h"
#include "util/xalloc.h"

static iv stop(interp *I, tp_span at, const char *fmt, const char *name)
{
    tp_diag_add(I->d, TP_ERROR, at, "model", fmt, name);
    I->stop = true;
    return tp_none_iv;
}

/* Argument `pos` (after the tensor) or keyword kw; NULL when absent. */
static const tp_node *arg(const tp_node *call, int pos, const char *kw)
{
    const tp_node *e = tp_call_pos(call, pos);
    return e ? e : tp_call_kw(call, kw);
}

/* torch's pieces of n along a dim: sections as given (they must add up to
 * n), or pieces of `size` with a smaller last one. Each section's text
 * ("kv_heads * head_dim") names its piece's dimension, as a Linear's size
 * names its output's; names[i] is NULL for pieces of a size. Returns the
 * count, or 0 after an error. */
static int pieces(interp *I, const tp_node *call, const char *name, int64_t n, int64_t *sizes, const char **names)
{
    bool chunk = !strcmp(name, "chunk");
    const tp_node *e = arg(call, 1, chunk ? "chunks" : "split_size_or_sections");
    if (!e) {
        stop(I, call->span, chunk ? "%s(x, chunks, dim=0) needs the number of chunks"
                                  : "%s(x, split_size_or_sections, dim=0) needs the sizes", name);
        return 0;
    }
    if (e->kind == N_TUPLE && !chunk) {
        int64_t sum = 0;
        if (e->nkids > TP_MAX_SEGMENTS) {
            stop(I, e->span, "%s(): at most 8 sections", name);
            return 0;
        }
        for (int i = 0; i < e->nkids; i++) {
            if (!tp_eval_size(I->c, e->kids[i], &sizes[i])) {
                I->stop = true;
                return 0;
            }
            char *text = tp_expr_text(e->kids[i]);
            names[i] = tp_intern(I, text);
            free(text);
            sum += sizes[i];
        }
        if (sum != n) {
            tp_diag_add(I->d, TP_ERROR, e->span, "model", "split(): the sections add up to %lld, but the dimension has "
                        "%lld (PyTorch raises: split_with_sizes expects split_sizes to sum exactly to %lld)",
                        (long long)sum, (long long)n, (long long)n);
            I->stop = true;
            return 0;
        }
        return e->nkids;
    }
    int64_t v;
    if (!tp_eval_int(I->c, e, &v)) {
        I->stop = true;
        return 0;
    }
    if (v < 1) {
        stop(I, e->span, "%s(): the size must be at least 1", name);
        return 0;
    }
    int64_t size = chunk ? (n + v - 1) / v : v;   /* torch.chunk: ceil(n / chunks) each */
    int count = 0;
    for (int64_t at = 0; at < n; at += size) {
        if (count == TP_MAX_SEGMENTS) {
            stop(I, e->span, "%s(): more than 8 pieces", name);
            return 0;
        }
        names[count] = NULL;
        sizes[count++] = at + size <= n ? size : n - at;
    }
    return count;
}

static bool same_segments(int nsegments, const int64_t *segments, const int64_t *sizes, int n)
{
    if (nsegments != n)
        return false;
    for (int i = 0; i < n; i++)
        if (segments[i] != sizes[i])
            return false;
    return true;
}

/* "[0, 64) [64, 128)": the segments of a packed Linear, for messages. */
static char *segment_ranges(const tp_module *mod)
{
    tp_buf b;
    tp_buf_init(&b);
    int64_t at = 0;
    for (int i = 0; i < mod->nsegments; i++) {
        tp_buf_appendf(&b, "%s[%lld, %lld)", i ? " " : "", (long long)at, (long long)(at + mod->segments[i]));
        at += mod->segments[i];
    }
    return tp_buf_take(&b);
}

/* PyTorch runs split() on each rank's local tensor: the contiguous shard of
 * a fused output is not each segment's share, so the pieces are wrong
 * (chunk) or the sections do not add up to the local size (split raises). */
static void contiguous_shard(interp *I, const tp_val *x, const char *name, int d, const int64_t *sizes, int n,
                             tp_span span)
{
    const tp_style *s = x->shard_cause;
    const tp_module *mod = x->producer;
    int64_t local = tp_local_size(I, x, d);
    char what[160];
    if (!strcmp(name, "chunk"))
        snprintf(what, sizeof what, "cuts each rank's %lld local features in %d: the pieces are silently wrong",
                 (long long)local, n);
    else
        snprintf(what, sizeof what, "makes PyTorch raise on each rank's %lld local features (split_with_sizes "
                 "expects split_sizes to sum exactly to %lld)", (long long)local, (long long)local);
    tp_diag *g = tp_finding(I, TP_ERROR, s ? tp_entry_span(s) : span, "fused-shard", x, NULL,
                            "%s shards '%s' contiguously: rank 0 holds features [0, %lld) of the %lld it fuses, not "
                            "its share of each of the %d pieces; %s() here %s", s ? s->name : "the plan",
                            mod ? mod->fqn : "the tensor", (long long)local, (long long)x->shape[d], n, name, what);
    if (!g)
        return;
    tp_diag_note_at(g, span, "%s() splits the fused output here", name);
    if (mod && mod->nsegments) {
        char *ranges = segment_ranges(mod);
        tp_diag_note_at(g, mod->decl ? mod->decl->span : span, "'%s' fuses the segments %s", mod->fqn, ranges);
        free(ranges);
    }
    double gather = (double)local * (double)(I->tp - 1) * 4;
    for (int i = 0; i < x->rank; i++)
        gather *= i == d ? 1 : (double)tp_local_size(I, x, i);
    if (mod && same_segments(mod->nsegments, mod->segments, sizes, n)) {
        /* the DTensor pieces then meet every op after split(): RoPE's
         * plain cos/sin, for one, raise mixed-tensor */
        const char *packed = tp_packed_style_for(mod);
        tp_diag_help(g, "shard each segment separately: %s; or, if every op after split() takes DTensors, "
                        "ColwiseParallel(use_local_output=False), and DTensor all-gathers the whole output before "
                        "splitting (%.2f MiB sent per rank in fp32, per call)", packed, gather / (1 << 20));
        if (s && s->call->kind == N_CALL && s->call->nkids == 1)
            tp_diag_fixit(g, s->call->span, packed);
    } else {
        tp_diag_help(g, "declare the segments in the model (Linear(..., packed=(%s...))) and shard them with "
                        "ColwiseParallel(tpcc_packed=True) (\"packed_colwise\" for two equal ones), or leave '%s' "
                        "replicated", n > 0 ? "a, b, " : "",
                     mod ? mod->fqn : "the producer");
    }
}

/* One piece: x's layout facts, `size` along d (named `name` unless NULL),
 * a narrow of the local tensor from `start` (local) when recorded. */
static tp_val *piece(interp *I, tp_val *x, int d, int64_t size, const char *name, int64_t start, int64_t length,
                     bool record, tp_span span)
{
    tp_val *r = tp_val_copy(I, x);
    r->shape[d] = size;
    if (name)
        r->dimname[d] = name;
    tp_placement p = tp_placement_norm(x->pl, x->rank);
    if (p.kind == TP_SHARD && p.dim == d) {   /* the segments are what was cut; along another dim they stay */
        r->nsegments = 0;
        r->producer = NULL;
    }
    r->gv = -1;
    r->gather_comm = -1;
    r->span = span;
    if (d == r->rank - 1)
        r->logical_last = 0;
    if (!record || x->poisoned)
        return r;
    tp_ir_op *op = &tp_record_op(I, TP_OP_NARROW, r, "piece", x, NULL, NULL)->op;
    op->dim = d;
    op->start = start;
    op->length = length;
    return r;
}

/* The row of split or chunk (op_table.c), for the tensor a->args[0]. */
iv tp_split_apply(interp *I, const tp_op_row *op, const tp_op_args *a)
{
    const tp_node *call = a->call;
    tp_val *x = a->args[0].t;
    const char *name = op->name;
    const char *const *kw = op->keywords;
    for (int k = 1; k < call->nkids; k++)
        if (call->kids[k]->name && !tp_keyword_known(kw, call->kids[k]->name)) {
            char *takes = tp_keyword_list(kw);
            tp_diag_add(I->d, TP_ERROR, call->kids[k]->span, "model", "%s() has no argument '%s'; it takes %s", name,
                        call->kids[k]->name, takes);
            free(takes);
            I->stop = true;
            return tp_none_iv;
        }
    int64_t d = 0;   /* torch's default */
    const tp_node *de = arg(call, 2, "dim");
    if (de && !tp_eval_int(I->c, de, &d)) {
        I->stop = true;
        return tp_none_iv;
    }
    if (d < -x->rank || d >= x->rank) {
        tp_diag_add(I->d, TP_ERROR, de ? de->span : call->span, "model",
                    "%s(): dim %lld is outside the tensor's %d dimensions (-%d to %d)", name, (long long)d, x->rank,
                    x->rank, x->rank - 1);
        I->stop = true;
        return tp_none_iv;
    }
    d = d < 0 ? d + x->rank : d;
    int64_t sizes[TP_MAX_SEGMENTS];
    const char *names[TP_MAX_SEGMENTS];
    int n = pieces(I, call, name, x->shape[d], sizes, names);
    if (!n)
        return tp_none_iv;
    tp_placement p = tp_placement_norm(x->pl, x->rank);
    /* at tp 1 the one shard is the whole tensor: every split of it is right */
    bool on_dim = p.kind == TP_SHARD && p.dim == d && I->tp > 1;
    int64_t parts = on_dim ? I->tp : 1;   /* each piece's share on a rank */
    bool record = true;
    if (on_dim && x->nsegments && !same_segments(x->nsegments, x->segments, sizes, n)) {
        tp_diag *g = tp_finding(I, TP_ERROR, call->span, "fused-shard", x, NULL,
                                "%s() cuts the packed output of '%s' into %d pieces, but it packs %d segments: each "
                                "rank holds its share of every segment, so only those segments split it right",
                                name, x->producer ? x->producer->fqn : "a fused projection", n, x->nsegments);
        if (g)
            tp_diag_help(g, "split into the segments the model declares with packed=");
        x->poisoned = true;
        record = false;
    } else if (on_dim && !x->nsegments && x->dtensor) {
        /* DTensor's split rule (torch/distributed/tensor/_ops/_tensor_ops.py,
         * split_single_dim_strategy) forwards every sharding but the split
         * dim's: a Shard there is redistributed to Replicate first */
        int64_t bytes = 4;
        for (int i = 0; i < x->rank; i++)
            bytes *= x->shape[i];
        tp_diag *g = tp_finding(I, TP_WARNING, call->span, "implicit-redistribute", x, NULL,
                                "%s() of a DTensor sharded on the dimension it splits: DTensor replicates that "
                                "dimension first, an all_gather of the whole tensor (%.2f MiB sent per rank in fp32)",
                                name, (double)bytes * (double)(I->tp - 1) / (double)I->tp / (1 << 20));
        if (g && x->producer && x->producer->nsegments)
            tp_diag_help(g, "shard each segment separately with %s and keep the pieces sharded",
                         tp_packed_style_for(x->producer));
        x = tp_redistribute(I, x, tp_replicate(), x->shard_cause, call->span, false);
        parts = 1;
    } else if (on_dim && !x->nsegments) {
        /* the pieces' global shapes are right: checking goes on with them
         * (unrecorded, as no schedule is written), so a second fused
         * projection's mistake is reported in the same run */
        contiguous_shard(I, x, name, (int)d, sizes, n, call->span);
        record = false;
    }
    iv out = {IV_TUPLE, NULL, NULL, n, 0, NULL, {NULL}};
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        out.items[i] = piece(I, x, (int)d, sizes[i], names[i], start, sizes[i] / parts, record, call->span);
        start += sizes[i] / parts;
    }
    return out;
}
