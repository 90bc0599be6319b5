/* sched/load.c: see sched/load.h.
 *
 * Everything the executor will index with is checked here: buffer offsets
 * inside the arena, op operands naming real buffers and weights, element
 * counts agreeing with the shapes, collective parameters the world size
 * can satisfy, every count and product in saturating arithmetic. Then
 * validate.c proves what needs the whole schedule. A malformed file gives
 * a message, never an out-of-bounds access later. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/format.h"
#include "sched/load.h"
#include "sched/name.h"
#include "sched/validate.h"
#include "util/xalloc.h"
#include "util/errmsg.h"
#include "util/input_file.h"

typedef struct loader {
    const char *path;
    char *err;
    size_t errlen;
    const char *where;        /* "op 12" etc. for messages */
} loader;

static int fail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader *L, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tp_error(L->err, L->errlen, "%s: %s%s%s", L->path, L->where ? L->where : "", L->where ? ": " : "", msg);
}

static int get_int(loader *L, json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return fail(L, "'%s' must be an integer", key);
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return fail(L, "'%s' = %lld is out of range [%lld, %lld]", key, (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

/* An optional integer field (absent: dflt). */
static int opt_int(loader *L, json_t *o, const char *key, int64_t lo, int64_t hi, int64_t dflt, int64_t *out)
{
    if (!json_object_get(o, key)) {
        *out = dflt;
        return 0;
    }
    return get_int(L, o, key, lo, hi, out);
}

/* An optional number of at least 0 (absent: -1). */
/* One value of "train": its key's kind and range. */
static int load_train_value(loader *L, const tp_train_key *k, json_t *v, tp_train_values *out)
{
    double x[2] = {0, 0};
    bool ok;
    if (k->kind == TP_TK_NAMES) {
        size_t i;
        json_t *name;
        ok = json_is_array(v) && json_array_size(v) > 0;
        out->no_decay[0] = '\0';
        json_array_foreach(v, i, name) {
            ok = ok && json_is_string(name) && tp_train_name_ok(json_string_value(name)) &&
                 tp_train_names_add(out->no_decay, json_string_value(name));
        }
        x[0] = 1;
    } else if (k->kind == TP_TK_WORD) {
        int w = json_is_string(v) ? tp_train_word(k, json_string_value(v)) : -1;
        ok = w >= 0;
        x[0] = w;
    } else if (k->kind == TP_TK_BOOL) {
        ok = json_is_boolean(v);
        x[0] = json_is_true(v);
    } else if (k->kind == TP_TK_PAIR) {
        ok = json_is_array(v) && json_array_size(v) == 2 && json_is_number(json_array_get(v, 0)) &&
             json_is_number(json_array_get(v, 1));
        for (int i = 0; ok && i < 2; i++)
            x[i] = json_number_value(json_array_get(v, (size_t)i));
        ok = ok && tp_train_in_range(k, x[0]) && tp_train_in_range(k, x[1]);
    } else {
        ok = k->kind == TP_TK_COUNT || k->kind == TP_TK_ID ? json_is_integer(v) : json_is_number(v);
        x[0] = json_number_value(v);
        ok = ok && tp_train_in_range(k, x[0]);
    }
    if (!ok) {
        char takes[160];
        tp_train_key_takes(k, takes, sizeof takes);
        return fail(L, "'train.%s' must be %s", k->name, takes);
    }
    for (int i = 0; i < (k->kind == TP_TK_PAIR ? 2 : 1); i++) {
        out->v[k->field + i] = x[i];
        out->given |= 1u << (k->field + i);
    }
    return 0;
}

/* "train": the plan's optimizer, clipping and schedule settings
 * (sched/train_settings.h), each under its key; absent: none. */
static int load_train(loader *L, json_t *root, tp_train_values *out)
{
    json_t *t = json_object_get(root, "train"), *v;
    const char *key;
    memset(out, 0, sizeof *out);
    if (!t)
        return 0;
    if (!json_is_object(t))
        return fail(L, "'train' must be an object of the plan's train { } settings");
    json_object_foreach(t, key, v) {
        const tp_train_key *k = tp_train_key_named(key);
        if (!k)
            return fail(L, "'train' has no setting '%s'; compile the schedule again with this tpcc", key);
        if (load_train_value(L, k, v, out))
            return -1;
    }
    return 0;
}

/* "dp_shard": a mode, beside data-parallel replicas to shard over;
 * absent: none. */
static int load_dp_shard(loader *L, json_t *root, int64_t dp, tp_dp_shard *out)
{
    json_t *v = json_object_get(root, "dp_shard");
    *out = TP_DP_SHARD_NONE;
    if (!v)
        return 0;
    int mode = json_is_string(v) ? tp_dp_shard_parse(json_string_value(v)) : -1;
    if (mode < 0)
        return fail(L, "'dp_shard' must be \"none\", \"optimizer\", \"gradients\" or \"parameters\"");
    if (dp < 2 && mode != TP_DP_SHARD_NONE)
        return fail(L, "'dp_shard' is \"%s\" but the schedule has no data-parallel replicas to shard over",
                    tp_dp_shard_names[mode]);
    *out = (tp_dp_shard)mode;
    return 0;
}

static int get_str(loader *L, json_t *o, const char *key, char **out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return fail(L, "'%s' must be a string", key);
    *out = tp_xstrdup(json_string_value(v));
    return 0;
}

static int get_shape(loader *L, json_t *o, const char *key, int maxrank, int64_t *shape, int *rank)
{
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || (int)json_array_size(a) > maxrank)
        return fail(L, "'%s' must be an array of at most %d sizes", key, maxrank);
    *rank = (int)json_array_size(a);
    for (int i = 0; i < *rank; i++) {
        json_t *d = json_array_get(a, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > ((int64_t)1 << 40))
            return fail(L, "'%s'[%d] must be a positive size", key, i);
        shape[i] = json_integer_value(d);
    }
    return 0;
}

static int parse_dtype(loader *L, const char *s, tp_dtype *out)
{
    if (!strcmp(s, "f32")) *out = TP_F32;
    else if (!strcmp(s, "bf16")) *out = TP_BF16;
    else if (!strcmp(s, "i32")) *out = TP_I32;
    else return fail(L, "unknown dtype '%s'", s);
    return 0;
}

static int parse_placement(loader *L, const char *s, tp_placement *out)
{
    int d;
    if (!strcmp(s, "Replicate()")) *out = tp_replicate();
    else if (sscanf(s, "Shard(%d)", &d) == 1 && d >= 0 && d < TP_MAX_RANK) *out = tp_shard(d);
    else return fail(L, "unknown placement '%s'", s);
    return 0;
}

/* a * b, or INT64_MAX when that overflows: every size the reader accepts
 * is at most 2^50, so a saturated product never equals one */
static int64_t mul(int64_t a, int64_t b)
{
    int64_t p;
    return __builtin_mul_overflow(a, b, &p) ? INT64_MAX : p;
}

/* The reader has checked, in saturating arithmetic, that every buffer's
 * count is at most 2^50 (its bytes): this product never overflows. */
static int load_buffers(loader *L, tr_schedule *s, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) > (1u << 24))
        return fail(L, "'buffers' must be an array");
    s->nbufs = (int)json_array_size(arr);
    s->bufs = tp_xcalloc((size_t)s->nbufs + 1, sizeof *s->bufs);
    char where[64];
    for (int i = 0; i < s->nbufs; i++) {
        json_t *b = json_array_get(arr, (size_t)i);
        tr_buf *t = &s->bufs[i];
        snprintf(where, sizeof where, "buffer %d", i);
        L->where = where;
        char *dtype = NULL;
        int64_t alias;
        t->alias_of = -1;
        bool unused = json_is_null(json_object_get(b, "offset"));   /* no live op touches it */
        if (!json_is_object(b) || get_str(L, b, "name", &t->name) || get_shape(L, b, "shape", TP_MAX_RANK, t->shape, &t->rank) ||
            get_str(L, b, "dtype", &dtype) || parse_dtype(L, dtype, &t->dtype) ||
            (!unused && get_int(L, b, "offset", 0, s->arena_bytes, &t->offset)) ||
            get_int(L, b, "bytes", 0, (int64_t)1 << 50, &t->bytes) ||
            opt_int(L, b, "alias_of", 0, i - 1, -1, &alias)) {
            free(dtype);
            return json_is_object(b) ? -1 : fail(L, "must be an object");
        }
        free(dtype);
        t->alias_of = (int)alias;
        int64_t elems = 1;
        for (int d = 0; d < t->rank; d++)
            elems = mul(elems, t->shape[d]);
        if (t->bytes != mul(elems, (int64_t)tp_dtype_size(t->dtype)))
            return elems == INT64_MAX ? fail(L, "its shape holds more than 2^63 elements")
                                      : fail(L, "'bytes' = %lld does not match its shape and dtype (%lld)",
                                             (long long)t->bytes, (long long)mul(elems, (int64_t)tp_dtype_size(t->dtype)));
        if (unused) {
            t->offset = -1;
            continue;
        }
        if (t->offset + t->bytes > s->arena_bytes)
            return fail(L, "[%lld, %lld) lies outside the %lld-byte arena", (long long)t->offset,
                        (long long)(t->offset + t->bytes), (long long)s->arena_bytes);
    }
    L->where = NULL;
    return 0;
}

/* One range of dim: {"offset", "length"} inside the padded shape. */
static int read_range(loader *L, json_t *o, const tr_weight *t, int dim, int64_t *offset, int64_t *length)
{
    return get_int(L, o, "offset", 0, t->shape[dim] - 1, offset) ||
           get_int(L, o, "length", 1, t->shape[dim] - *offset, length);
}

/* {"dim", "offset", "length"}, or a packed weight's {"dim": 0, "segments":
 * [{"offset", "length"}, ...]} in increasing order, not overlapping. The
 * ranks hold equal slices, each by as many ranks (a replicated key/value
 * head): the optimizer counts a slice's gradient once per replica group. */
static int read_slice(loader *L, json_t *slice, tr_weight *t, int world)
{
    int64_t dim, held = 0;
    if (get_int(L, slice, "dim", 0, t->rank - 1, &dim))
        return -1;
    t->dim = (int)dim;
    json_t *segs = json_object_get(slice, "segments");
    if (!segs) {
        t->nsegments = 1;
        if (read_range(L, slice, t, t->dim, &t->offset[0], &t->length[0]))
            return -1;
        held = t->length[0];
    } else {
        if (!json_is_array(segs) || json_array_size(segs) < 1 || json_array_size(segs) > TP_MAX_SEGMENTS || dim != 0)
            return fail(L, "'%s': 'segments' must be an array of 1 to %d ranges of dimension 0", t->name,
                        TP_MAX_SEGMENTS);
        t->nsegments = (int)json_array_size(segs);
        for (int k = 0; k < t->nsegments; k++) {
            json_t *o = json_array_get(segs, (size_t)k);
            if (!json_is_object(o))
                return fail(L, "'%s': segment %d must be an object", t->name, k);
            if (read_range(L, o, t, 0, &t->offset[k], &t->length[k]))
                return -1;
            if (k && t->offset[k] < t->offset[k - 1] + t->length[k - 1])
                return fail(L, "'%s': segment %d overlaps or precedes segment %d", t->name, k, k - 1);
            held += t->length[k];
        }
    }
    if (t->shape[dim] % held)
        return fail(L, "'%s': the rank holds %lld of the %lld indices of dim %lld, not an equal share of them "
                    "(recompile the schedule)", t->name, (long long)held, (long long)t->shape[dim], (long long)dim);
    if (world % (t->shape[dim] / held))
        return fail(L, "'%s': the rank holds %lld of the %lld indices of dim %lld, one of %lld shares, which %d "
                    "rank%s cannot hold each by as many ranks (recompile the schedule)", t->name, (long long)held,
                    (long long)t->shape[dim], (long long)dim, (long long)(t->shape[dim] / held), world,
                    world == 1 ? "" : "s");
    t->local_elems = mul(t->local_elems / t->shape[dim], held);
    return 0;
}

static int load_weights(loader *L, tr_schedule *s, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) > (1u << 24))
        return fail(L, "'weights' must be an array");
    s->nweights = (int)json_array_size(arr);
    s->weights = tp_xcalloc((size_t)s->nweights + 1, sizeof *s->weights);
    char where[64];
    for (int i = 0; i < s->nweights; i++) {
        json_t *w = json_array_get(arr, (size_t)i);
        tr_weight *t = &s->weights[i];
        snprintf(where, sizeof where, "rank %d weight %d", s->rank, i);
        L->where = where;
        int lrank;
        if (!json_is_object(w) || get_str(L, w, "name", &t->name) || get_shape(L, w, "shape", 2, t->shape, &t->rank) ||
            get_shape(L, w, "logical_shape", 2, t->logical, &lrank))
            return json_is_object(w) ? -1 : fail(L, "must be an object");
        if (lrank != t->rank)
            return fail(L, "'%s': 'logical_shape' and 'shape' differ in rank", t->name);
        for (int d = 0; d < t->rank; d++)   /* the logical tensor is the padded one less its padding */
            if (t->logical[d] > t->shape[d])
                return fail(L, "'%s': 'logical_shape' %lld is more than the %lld of 'shape' along dim %d", t->name,
                            (long long)t->logical[d], (long long)t->shape[d], d);
        json_t *slice = json_object_get(w, "slice");
        t->dim = -1;
        t->nsegments = 0;
        t->local_elems = 1;
        for (int d = 0; d < t->rank; d++)
            t->local_elems = mul(t->local_elems, t->shape[d]);
        if (json_is_object(slice)) {
            if (read_slice(L, slice, t, s->world))
                return -1;
        } else if (!json_is_null(slice)) {
            return fail(L, "'slice' must be an object or null");
        }
        /* every weight 16-byte aligned in bf16 and in fp32 (its moments and
         * master copy share the offsets): the kernels' 128-bit loads and
         * cuBLAS's fast paths need it; the gaps are never read */
        t->region_offset = tp_weight_region_offset(s->weight_elems);
        s->weight_elems = t->region_offset + t->local_elems;
        /* the region is allocated in bytes of up to 4 per element */
        if (t->local_elems > ((int64_t)1 << 48) || s->weight_elems > ((int64_t)1 << 48))
            return fail(L, "'%s': the rank's weights pass 2^48 elements", t->name);
    }
    L->where = NULL;
    return 0;
}

static int64_t elems_of(const tr_schedule *s, int b) { return tr_buf_elems(&s->bufs[b]); }

/* ---- size rules: check_<sizes> of sched/ops.def ----
 *
 * The sizes an op's attributes promise must be the sizes of its buffers
 * and weights: the kernels trust them. A rule runs once the signature is
 * checked, so every operand the signature requires is there. */

typedef int size_rule(loader *L, const tr_schedule *s, const tr_op *op);

/* Elementwise, and the all-reduce: out holds as many elements as in[0]. */
static int check_same_count(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (elems_of(s, op->out) != elems_of(s, op->in[0]))
        return fail(L, "changes the element count");
    return 0;
}

/* Fused elementwise ops (silu_mul and its gradient): every input and every
 * output computed holds as many elements as in[0]; nothing broadcasts. */
static int check_same_shape(loader *L, const tr_schedule *s, const tr_op *op)
{
    const int64_t n = elems_of(s, op->in[0]);
    for (int i = 1; i < op->nin; i++)
        if (elems_of(s, op->in[i]) != n)
            return fail(L, "in[%d] holds %lld elements, in[0] %lld: its operands must be of one size", i,
                        (long long)elems_of(s, op->in[i]), (long long)n);
    for (int o = 0; o < tp_ops[op->kind].nout; o++)
        if (op->outs[o] >= 0 && elems_of(s, op->outs[o]) != n)
            return fail(L, "out[%d] holds %lld elements, its inputs %lld", o, (long long)elems_of(s, op->outs[o]),
                        (long long)n);
    return 0;
}

static int check_matmul(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (elems_of(s, op->in[0]) != mul(op->m, op->k) || elems_of(s, op->out) != mul(op->m, op->n) ||
        s->weights[op->weight].local_elems != mul(op->n, op->k))
        return fail(L, "sizes m=%lld n=%lld k=%lld do not match its buffers and weight", (long long)op->m,
                    (long long)op->n, (long long)op->k);
    return 0;
}

/* m rows of n columns in and out; a weight and a bias of n. */
static int check_rows_cols(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t in = elems_of(s, op->in[0]);
    if (in != mul(op->m, op->n) || elems_of(s, op->out) != in ||
        (op->weight >= 0 && s->weights[op->weight].local_elems != op->n) ||
        (op->bias >= 0 && s->weights[op->bias].local_elems != op->n))
        return fail(L, "sizes m=%lld n=%lld do not match its buffers", (long long)op->m, (long long)op->n);
    return 0;
}

/* Fused row ops (add_rmsnorm, bias_gelu): every input and each output
 * computed [m, n]; a weight and a bias of n. */
static int check_fused_rows(loader *L, const tr_schedule *s, const tr_op *op)
{
    const int64_t mn = mul(op->m, op->n);
    for (int i = 0; i < op->nin; i++)
        if (elems_of(s, op->in[i]) != mn)
            return fail(L, "sizes m=%lld n=%lld do not match its buffers", (long long)op->m, (long long)op->n);
    for (int o = 0; o < tp_ops[op->kind].nout; o++)
        if (op->outs[o] >= 0 && elems_of(s, op->outs[o]) != mn)
            return fail(L, "sizes m=%lld n=%lld do not match its buffers", (long long)op->m, (long long)op->n);
    const int params[2] = {op->weight, op->bias};
    for (int p = 0; p < 2; p++)
        if (params[p] >= 0 && s->weights[params[p]].local_elems != op->n)
            return fail(L, "%s '%s' holds %lld elements, n is %lld", p ? "bias" : "weight",
                        s->weights[params[p]].name, (long long)s->weights[params[p]].local_elems, (long long)op->n);
    return 0;
}

static int check_embedding(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tr_weight *w = &s->weights[op->weight];
    if (w->rank != 2 || w->local_elems % op->vocab_local ||
        elems_of(s, op->out) != mul(elems_of(s, op->in[0]), w->local_elems / op->vocab_local))
        return fail(L, "sizes do not match its buffers and weight");
    return 0;
}

static int check_rope(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (s->bufs[op->in[0]].rank != 4 || elems_of(s, op->out) != elems_of(s, op->in[0]))
        return fail(L, "expects a [batch, seq, heads, head_dim] buffer");
    if (op->rotary_dim % 2 || op->rotary_dim < 2 || op->rotary_dim > s->bufs[op->in[0]].shape[3])
        return fail(L, "rotary_dim %lld must be even, at least 2 and at most head_dim", (long long)op->rotary_dim);
    const int64_t *x = s->bufs[op->in[0]].shape;
    if (op->nin > 1 && elems_of(s, op->in[1]) != mul(x[0], x[1]))
        return fail(L, "in[1] holds %lld positions; x [batch, seq, heads, head_dim] has %lld tokens",
                    (long long)elems_of(s, op->in[1]), (long long)mul(x[0], x[1]));
    const char *why = tp_rope_scaling_invalid(&op->rope);
    if (why)
        return fail(L, "scaling \"%s\": %s", tp_rope_type_name(op->rope.type), why);
    return 0;
}

/* The rotation of a rope_attention or its gradient: an even rotary_dim
 * within the head, usable scaling, and with documents (first_doc_in, the
 * index of the segments) both segments and positions, one per token. */
static int check_rotation(loader *L, const tr_schedule *s, const tr_op *op, int first_doc_in)
{
    /* the rotation reads q's and k's sequence and head dims from their
     * shapes, as rope does, and the attention from its attributes: both
     * must say the same */
    for (int i = 0; i < 2; i++) {
        const tr_buf *x = &s->bufs[op->in[i]];
        if (x->rank != 4 || x->shape[0] != op->batch || x->shape[1] != op->seq || x->shape[3] != op->head_dim)
            return fail(L, "in[%d] must be a [batch, seq, heads, head_dim] buffer of its batch, seq and head_dim", i);
    }
    if (op->rotary_dim % 2 || op->rotary_dim < 2 || op->rotary_dim > op->head_dim)
        return fail(L, "rotary_dim %lld must be even, at least 2 and at most head_dim", (long long)op->rotary_dim);
    if (op->nin != first_doc_in && op->nin != first_doc_in + 2)
        return fail(L, "with documents it reads both segments and positions (in[%d] and in[%d]), else neither",
                    first_doc_in, first_doc_in + 1);
    if (op->nin > first_doc_in && elems_of(s, op->in[first_doc_in + 1]) != mul(op->batch, op->seq))
        return fail(L, "in[%d] holds %lld positions; there are %lld tokens", first_doc_in + 1,
                    (long long)elems_of(s, op->in[first_doc_in + 1]), (long long)mul(op->batch, op->seq));
    const char *why = tp_rope_scaling_invalid(&op->rope);
    if (why)
        return fail(L, "scaling \"%s\": %s", tp_rope_type_name(op->rope.type), why);
    return 0;
}

/* q (heads) or k and v (kv_heads) of an attention: [batch, seq, heads, head_dim] */
static int64_t head_elems(const tr_op *op, int64_t heads)
{
    return mul(mul(mul(op->batch, op->seq), heads), op->head_dim);
}

/* each query's log-sum-exp, [batch, heads, seq] */
static int64_t lse_elems(const tr_op *op) { return mul(mul(op->batch, op->heads), op->seq); }

/* out[0] like q (always written), out[1] one float per query and head */
static int check_attention(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t q = head_elems(op, op->heads), kv = head_elems(op, op->kv_heads);
    if (op->outs[0] < 0)
        return fail(L, "out[0], the attention's output, is null");
    if (elems_of(s, op->in[0]) != q || elems_of(s, op->outs[0]) != q || op->heads % op->kv_heads ||
        elems_of(s, op->in[1]) != kv || elems_of(s, op->in[2]) != kv ||
        (op->outs[1] >= 0 && elems_of(s, op->outs[1]) != lse_elems(op)) ||
        (op->nin > 3 && elems_of(s, op->in[3]) != mul(op->batch, op->seq)))
        return fail(L, "sizes do not match its buffers");
    return 0;
}

/* attention's sizes, and the rotation (segments and positions from in[3]) */
static int check_rope_attention(loader *L, const tr_schedule *s, const tr_op *op)
{
    return check_attention(L, s, op) || check_rotation(L, s, op, 3) ? -1 : 0;
}

/* in[1] repeats over in[0]'s leading dims. */
static int check_broadcast(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t in = elems_of(s, op->in[0]), b = elems_of(s, op->in[1]);
    if (elems_of(s, op->out) != in || in % b)
        return fail(L, "operands do not broadcast");
    return 0;
}

static int check_slice(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tr_buf *x = &s->bufs[op->in[0]];
    if (op->dim >= x->rank || op->parts < 1 || op->index >= op->parts || x->shape[op->dim] % op->parts ||
        mul(elems_of(s, op->out), op->parts) != tr_buf_elems(x))
        return fail(L, "dim=%d parts=%d does not match its buffers", op->dim, op->parts);
    return 0;
}

/* The range lies inside x's dim, and out holds exactly that range. */
static int check_narrow(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tr_buf *x = &s->bufs[op->in[0]];
    if (op->dim >= x->rank || op->start + op->length > x->shape[op->dim] ||
        mul(elems_of(s, op->out), x->shape[op->dim]) != mul(tr_buf_elems(x), op->length))
        return fail(L, "dim=%d start=%lld length=%lld does not match its buffers", op->dim, (long long)op->start,
                    (long long)op->length);
    return 0;
}

/* One position per id, each an int32. */
static int check_positions(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tr_buf *out = &s->bufs[op->out];
    int64_t seq = out->rank ? out->shape[out->rank - 1] : 1;
    if ((op->nin && elems_of(s, op->in[0]) != tr_buf_elems(out)) ||
        (op->nin > 1 && elems_of(s, op->in[1]) != tr_buf_elems(out)) || op->pos_offset + seq > INT32_MAX)
        return fail(L, "positions from %lld do not match its ids or pass the int32 range", (long long)op->pos_offset);
    return 0;
}

/* The positions of logits [batch, seq, vocab_local] in in[0] (batch x
 * seq), or -1 when in[0] is not such a buffer: the loss's ops read them. */
static int64_t logits_positions(const tr_schedule *s, const tr_op *op)
{
    const tr_buf *x = &s->bufs[op->in[0]];
    return x->rank == 3 && x->shape[2] == op->vocab_local ? x->shape[0] * x->shape[1] : -1;
}

/* logits and one label per position to one loss (the compiler refuses
 * logits split over the positions). */
static int check_cross_entropy(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t n = logits_positions(s, op);
    if (n < 0 || op->vocab_logical > op->vocab_local || elems_of(s, op->in[1]) != n || elems_of(s, op->out) != 1)
        return fail(L, "expects logits [batch, seq, vocab_local], batch x seq labels and a scalar loss");
    return 0;
}

/* One value per row of vocab_local logits columns; in[1], if any, also. */
static int check_ce_rows(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t in = elems_of(s, op->in[0]), out = elems_of(s, op->out);
    if (in % op->vocab_local || mul(out, op->vocab_local) != in || (op->nin > 1 && elems_of(s, op->in[1]) != out))
        return fail(L, "rows of vocab_local=%lld columns do not match its buffers", (long long)op->vocab_local);
    return 0;
}

/* Like cross_entropy's: one target per token of the logits. */
static int check_ce_target(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t n = logits_positions(s, op);
    if (n < 0 || elems_of(s, op->in[1]) != n || elems_of(s, op->out) != n)
        return fail(L, "expects logits [batch, seq, vocab_local], batch x seq labels and out [batch, seq]");
    return 0;
}

/* sumexp, max and target, one per label, to one loss. */
static int check_ce_loss(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t tokens = elems_of(s, op->in[3]);
    if (elems_of(s, op->in[0]) != tokens || elems_of(s, op->in[1]) != tokens || elems_of(s, op->in[2]) != tokens ||
        elems_of(s, op->out) != 1)
        return fail(L, "expects sumexp, max and target of one value per label, and a scalar loss");
    return 0;
}

/* out[n,k] = a[m,n]^T b[m,k]: a holds m x n, b m x k. */
static int check_matmul_tn(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (elems_of(s, op->in[0]) != mul(op->m, op->n) || elems_of(s, op->in[1]) != mul(op->m, op->k) ||
        elems_of(s, op->out) != mul(op->n, op->k))
        return fail(L, "sizes m=%lld n=%lld k=%lld do not match its buffers", (long long)op->m, (long long)op->n,
                    (long long)op->k);
    return 0;
}

/* m rows of n in, n out. */
/* an output of any size (ones: the seed gradient fills what it is given) */
static int check_any_size(loader *L, const tr_schedule *s, const tr_op *op)
{
    (void)L, (void)s, (void)op;
    return 0;
}

static int check_sum_rows(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (elems_of(s, op->in[0]) != mul(op->m, op->n) || elems_of(s, op->out) != op->n)
        return fail(L, "sizes m=%lld n=%lld do not match its buffers", (long long)op->m, (long long)op->n);
    return 0;
}

/* x and dy of m x n; dx of m x n (with a weight of n, and what is added
 * to it like it), or dw of n. */
static int check_norm_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t mn = mul(op->m, op->n);
    int64_t out = op->weight >= 0 ? mn : op->n;
    if (elems_of(s, op->in[0]) != mn || elems_of(s, op->in[1]) != mn || elems_of(s, op->out) != out ||
        (op->nin > 2 && elems_of(s, op->in[2]) != out) ||
        (op->weight >= 0 && s->weights[op->weight].local_elems != op->n))
        return fail(L, "sizes m=%lld n=%lld do not match its buffers", (long long)op->m, (long long)op->n);
    return 0;
}

/* q, k, v, dy, o and lse as the forward attention's; dq like q, dk and dv
 * like k, each where it is computed. */
static int check_attention_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t q = head_elems(op, op->heads), kv = head_elems(op, op->kv_heads);
    const int64_t out[3] = {q, kv, kv};
    bool outs_fit = true;
    for (int o = 0; o < 3; o++)
        outs_fit &= op->outs[o] < 0 || elems_of(s, op->outs[o]) == out[o];
    if (elems_of(s, op->in[0]) != q || elems_of(s, op->in[1]) != kv || elems_of(s, op->in[2]) != kv ||
        elems_of(s, op->in[3]) != q || elems_of(s, op->in[4]) != q || elems_of(s, op->in[5]) != lse_elems(op) ||
        !outs_fit || op->heads % op->kv_heads || (op->nin > 6 && elems_of(s, op->in[6]) != mul(op->batch, op->seq)))
        return fail(L, "sizes do not match its buffers");
    return 0;
}

/* attention's sizes, and the rotation (segments and positions from in[6]) */
static int check_rope_attention_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    return check_attention_grad(L, s, op) || check_rotation(L, s, op, 6) ? -1 : 0;
}

/* dy holds one row of the table's width per id; out is the rank's table. */
static int check_embedding_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t ids = elems_of(s, op->in[0]), dy = elems_of(s, op->in[1]), out = elems_of(s, op->out);
    if (ids == 0 || dy % ids || out != mul(op->vocab_local, dy / ids))
        return fail(L, "sizes do not match its ids, gradient and table of vocab_local=%lld rows",
                    (long long)op->vocab_local);
    return 0;
}

/* out is dy widened along dim: dy holds [start, start + length) of it. */
static int check_narrow_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tr_buf *out = &s->bufs[op->out];
    if (op->dim >= out->rank || op->start + op->length > out->shape[op->dim] ||
        mul(elems_of(s, op->in[0]), out->shape[op->dim]) != mul(tr_buf_elems(out), op->length))
        return fail(L, "dim=%d start=%lld length=%lld does not match its buffers", op->dim, (long long)op->start,
                    (long long)op->length);
    return 0;
}

/* logits [batch, seq, vocab_local], one label per position, out like the logits. */
static int check_cross_entropy_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t n = logits_positions(s, op);
    if (n < 0 || op->vocab_logical > op->vocab_local || elems_of(s, op->in[1]) != n ||
        elems_of(s, op->out) != elems_of(s, op->in[0]))
        return fail(L, "expects logits [batch, seq, vocab_local], batch x seq labels and out like the logits");
    return 0;
}

/* cross_entropy_grad's rule, with the max and sumexp of every row. */
static int check_ce_grad(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t n = logits_positions(s, op);
    if (n < 0 || elems_of(s, op->in[1]) != n || elems_of(s, op->in[2]) != n || elems_of(s, op->in[3]) != n ||
        elems_of(s, op->out) != elems_of(s, op->in[0]))
        return fail(L, "expects logits [batch, seq, vocab_local], a max, a sumexp and a label per position, and "
                       "out like the logits");
    return 0;
}

static int collective_mismatch(loader *L, const tr_schedule *s, const tr_op *op)
{
    return fail(L, "along dim %d does not match its buffers for %d ranks", op->dim, s->world);
}

/* all_gather: out is world times in, along dim. */
static int check_gathered(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (op->dim >= s->bufs[op->in[0]].rank || elems_of(s, op->out) != mul(elems_of(s, op->in[0]), s->world))
        return collective_mismatch(L, s, op);
    return 0;
}

/* reduce_scatter: in is world times out, along dim. */
static int check_scattered(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (op->dim >= s->bufs[op->out].rank || elems_of(s, op->in[0]) != mul(elems_of(s, op->out), s->world))
        return collective_mismatch(L, s, op);
    return 0;
}

static int check_all_to_all(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tr_buf *x = &s->bufs[op->in[0]];
    if (op->dim >= x->rank || op->dim2 >= x->rank || elems_of(s, op->out) != tr_buf_elems(x))
        return collective_mismatch(L, s, op);
    return 0;
}

/* dp_all_gather: a schedule whose replicas shard their parameters; out
 * holds the dp runs of the weight. */
static int check_dp_gathered(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (s->dp_shard != TP_DP_SHARD_PARAMETERS)
        return fail(L, "is a data-parallel collective of sharded parameters, but the schedule's 'dp_shard' is \"%s\"",
                    tp_dp_shard_names[s->dp_shard]);
    int64_t runs = tp_dp_shard_elems(s->weights[op->weight].local_elems, s->data_parallel) * s->data_parallel;
    if (elems_of(s, op->out) != runs || op->elems != runs)
        return fail(L, "must gather weight %s's %d runs of %lld elements (elems %lld) into a buffer of as many",
                    s->weights[op->weight].name, s->data_parallel, (long long)(runs / s->data_parallel),
                    (long long)runs);
    return 0;
}

/* dp_reduce_scatter: a schedule whose replicas shard their gradients; in is
 * the weight's local gradient, out its run (sched/dp_shard.h). */
static int check_dp_scattered(loader *L, const tr_schedule *s, const tr_op *op)
{
    if (s->dp_shard < TP_DP_SHARD_GRADIENTS)
        return fail(L, "is a data-parallel collective of sharded gradients, but the schedule's 'dp_shard' is \"%s\"",
                    tp_dp_shard_names[s->dp_shard]);
    int64_t n = s->weights[op->weight].local_elems, c = tp_dp_shard_elems(n, s->data_parallel);
    if (elems_of(s, op->in[0]) != n || elems_of(s, op->out) != c || op->elems != c * s->data_parallel)
        return fail(L, "must reduce weight %s's %lld local elements into its run of %lld (elems %lld, the %d "
                    "replicas' runs)", s->weights[op->weight].name, (long long)n, (long long)c,
                    (long long)(c * s->data_parallel), s->data_parallel);
    return 0;
}

static size_rule *const size_rules[TP_OP_COUNT] = {
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    [TP_OP_##NAME] = check_##sizes,
#include "sched/ops.def"
#undef OP
};

/* ---- reading an op ---- */

/* The operand `what`, buffer b, must have a place in the arena and hold
 * int32 where the signature says ids, floats elsewhere. */
static int check_buffer(loader *L, const tr_schedule *s, int b, bool ids, const char *what)
{
    const tr_buf *buf = &s->bufs[b];
    if (buf->offset < 0)
        return fail(L, "%s is buffer %d, which has no place in the arena", what, b);
    if ((buf->dtype == TP_I32) != ids)
        return fail(L, "%s is buffer %d, of %s; it must hold %s", what, b, tp_dtype_name(buf->dtype),
                    ids ? "i32" : "f32 or bf16");
    return 0;
}

static int check_param(loader *L, int index, tp_operand use, const char *key)
{
    if (index < 0 && use == TP_OPERAND_REQUIRED)
        return fail(L, "missing operand '%s'", key);
    if (index >= 0 && use == TP_OPERAND_NONE)
        return fail(L, "takes no %s", key);
    return 0;
}

/* The outputs of a kind with several: at least one computed, each in its
 * own buffer. */
static int check_outs(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tp_op_def *d = &tp_ops[op->kind];
    char what[24];   /* "out[" an int "]" */
    int written = 0;
    for (int o = 0; o < d->nout; o++) {
        if (op->outs[o] < 0)
            continue;
        written++;
        snprintf(what, sizeof what, "out[%d]", o);
        if (check_buffer(L, s, op->outs[o], d->out_ids, what))
            return -1;
        for (int p = 0; p < o; p++)
            if (op->outs[p] == op->outs[o])
                return fail(L, "out[%d] and out[%d] are both buffer %d", p, o, op->outs[o]);
    }
    return written ? 0 : fail(L, "'out' lists no buffer: it computes nothing");
}

/* The operands the kind's signature asks for (sched/ops.def), checked
 * before anything indexes with them. */
static int check_operands(loader *L, const tr_schedule *s, const tr_op *op)
{
    const tp_op_def *d = &tp_ops[op->kind];
    if (op->nin < d->in_min || op->nin > d->in_max)
        return d->in_min == d->in_max
                   ? fail(L, "'in' lists %d buffers; it reads %d", op->nin, d->in_min)
                   : fail(L, "'in' lists %d buffers; it reads %d to %d", op->nin, d->in_min, d->in_max);
    char what[24];
    for (int i = 0; i < op->nin; i++) {
        snprintf(what, sizeof what, "in[%d]", i);
        if (check_buffer(L, s, op->in[i], d->ids >> i & 1, what))
            return -1;
    }
    if (d->nout > 1 ? check_outs(L, s, op) : op->out < 0 ? fail(L, "missing operand 'out'")
                                                         : check_buffer(L, s, op->out, d->out_ids, "out"))
        return -1;
    return check_param(L, op->weight, d->weight, "weight") || check_param(L, op->bias, d->bias, "bias") ? -1 : 0;
}

/* FSDP ("dp_shard": "parameters"): tprun keeps only each weight's run, so
 * an op that reads a weight (a computation; the dp collectives only name
 * theirs) reads it from a buffer a dp_all_gather filled, a float buffer
 * of at least the weight's local elements; other schedules read the
 * weights themselves. */
static int check_gathered_weights(loader *L, const tr_schedule *s, const tr_op *op)
{
    const int param[2] = {op->weight, op->bias}, buf[2] = {op->weight_buf, op->bias_buf};
    static const char *const key[2] = {"weight_buf", "bias_buf"};
    bool fsdp = s->dp_shard == TP_DP_SHARD_PARAMETERS, reads = !tp_op_is_dp_collective(op->kind);
    for (int k = 0; k < 2; k++) {
        if (buf[k] >= 0 && !(fsdp && reads && param[k] >= 0))
            return fail(L, "'%s' reads a weight gathered over the data-parallel replicas, which only a computation "
                        "reading a weight of a schedule whose 'dp_shard' is \"parameters\" does", key[k]);
        if (param[k] >= 0 && fsdp && reads && buf[k] < 0)
            return fail(L, "reads weight %s, of which this rank keeps only its run ('dp_shard' is \"parameters\"): "
                        "it must read it from the buffer a dp_all_gather filled ('%s')", s->weights[param[k]].name,
                        key[k]);
        if (buf[k] < 0)
            continue;
        const tr_buf *b = &s->bufs[buf[k]];
        if (b->dtype != s->dtype || b->offset < 0 || tr_buf_elems(b) < s->weights[param[k]].local_elems)
            return fail(L, "'%s' is buffer %d, which cannot hold weight %s's %lld local elements in %s", key[k],
                        buf[k], s->weights[param[k]].name, (long long)s->weights[param[k]].local_elems,
                        tp_dtype_name(s->dtype));
    }
    return 0;
}

/* The integers each integer attribute type allows. */
static const struct { int64_t lo, hi; } int_range[] = {
    [TP_ATTR_SIZE] = {0, (int64_t)1 << 40},
    [TP_ATTR_COUNT] = {1, (int64_t)1 << 40},
    [TP_ATTR_DIM] = {0, TP_MAX_RANK - 1},
    [TP_ATTR_CHUNK] = {0, 1 << 20},
};

/* Attribute a of the op's JSON object o into its tr_op field. */
static int read_attr(loader *L, json_t *o, const tp_op_attr *a, tr_op *op)
{
    json_t *v = json_object_get(o, a->key);
    char *field = (char *)op + a->field;
    const char *r = json_string_value(v);
    int64_t i;
    if (!v)
        return fail(L, "missing attribute '%s'", a->key);
    switch (a->type) {
    case TP_ATTR_SIZE:
    case TP_ATTR_COUNT:
        return get_int(L, o, a->key, int_range[a->type].lo, int_range[a->type].hi, (int64_t *)field);
    case TP_ATTR_DIM:
    case TP_ATTR_CHUNK:
        if (get_int(L, o, a->key, int_range[a->type].lo, int_range[a->type].hi, &i))
            return -1;
        *(int *)field = (int)i;
        break;
    case TP_ATTR_REAL:
        if (!json_is_number(v))
            return fail(L, "'%s' must be a number", a->key);
        *(double *)field = json_number_value(v);
        break;
    case TP_ATTR_BOOL:
        if (!json_is_boolean(v))
            return fail(L, "'%s' must be true or false", a->key);
        *(bool *)field = json_is_true(v);
        break;
    case TP_ATTR_REDUCE:
        if (!r || (strcmp(r, "sum") && strcmp(r, "max")))
            return fail(L, "'%s' must be \"sum\" or \"max\"", a->key);
        *(int *)field = !strcmp(r, "max");
        break;
    case TP_ATTR_ROPE_TYPE:
        if (!r || tp_rope_type_parse(r) < 0)
            return fail(L, "'%s' must be \"default\", \"linear\", \"dynamic\" or \"llama3\"", a->key);
        *(tp_rope_type *)field = (tp_rope_type)tp_rope_type_parse(r);
        break;
    }
    return 0;
}

static int read_attrs(loader *L, json_t *o, tr_op *op)
{
    const tp_op_def *d = &tp_ops[op->kind];
    for (int i = 0; i < d->nattrs; i++)
        if (read_attr(L, o, &d->attrs[i], op))
            return -1;
    return 0;
}

static int read_kind(loader *L, json_t *o, tp_op_kind *kind)
{
    const char *name = json_string_value(json_object_get(o, "op"));
    if (!name)
        return fail(L, "'op' must be a string");
    *kind = tp_op_kind_named(name);
    if (*kind == TP_OP_COUNT)
        return fail(L, "unknown op '%s' (is the schedule newer than this tprun?)", name);
    return 0;
}

/* "out" of a kind with several outputs: a list of one buffer or null (not
 * computed) per output. */
static int read_outs(loader *L, const tr_schedule *s, json_t *o, tr_op *op)
{
    const int nout = tp_ops[op->kind].nout;
    json_t *out = json_object_get(o, "out");
    if (!out)
        return fail(L, "missing operand 'out'");
    if (!json_is_array(out) || (int)json_array_size(out) != nout)
        return fail(L, "'out' must be a list of %d buffers, each null where that output is not computed", nout);
    for (int i = 0; i < nout; i++) {
        json_t *b = json_array_get(out, (size_t)i);
        if (json_is_null(b))
            op->outs[i] = -1;
        else if (json_is_integer(b) && json_integer_value(b) >= 0 && json_integer_value(b) < s->nbufs)
            op->outs[i] = (int)json_integer_value(b);
        else
            return fail(L, "'out'[%d] is neither a buffer nor null", i);
    }
    return 0;
}

static int read_operands(loader *L, const tr_schedule *s, json_t *o, tr_op *op)
{
    json_t *in = json_object_get(o, "in");
    if (!json_is_array(in) || json_array_size(in) > TP_MAX_INS)
        return fail(L, "'in' must be an array of at most %d buffers", TP_MAX_INS);
    op->nin = (int)json_array_size(in);
    for (int i = 0; i < op->nin; i++) {
        json_t *b = json_array_get(in, (size_t)i);
        if (!json_is_integer(b) || json_integer_value(b) < 0 || json_integer_value(b) >= s->nbufs)
            return fail(L, "'in'[%d] is not a buffer", i);
        op->in[i] = (int)json_integer_value(b);
    }
    int64_t out = -1, weight, bias;
    if ((tp_ops[op->kind].nout > 1 ? read_outs(L, s, o, op) : opt_int(L, o, "out", 0, s->nbufs - 1, -1, &out)) ||
        opt_int(L, o, "weight", 0, s->nweights - 1, -1, &weight) || opt_int(L, o, "bias", 0, s->nweights - 1, -1, &bias))
        return -1;
    if (tp_ops[op->kind].nout == 1)
        op->out = (int)out;
    op->weight = (int)weight;
    op->bias = (int)bias;
    int64_t weight_buf, bias_buf;
    if (opt_int(L, o, "weight_buf", 0, s->nbufs - 1, -1, &weight_buf) ||
        opt_int(L, o, "bias_buf", 0, s->nbufs - 1, -1, &bias_buf))
        return -1;
    op->weight_buf = (int)weight_buf;
    op->bias_buf = (int)bias_buf;
    return check_operands(L, s, op) || check_gathered_weights(L, s, op) ? -1 : 0;
}

/* An op of a known kind: its operands and attributes as sched/ops.def
 * defines them, its provenance, then its size rule. */
static int read_op(loader *L, const tr_schedule *s, json_t *o, tr_op *op)
{
    if (read_operands(L, s, o, op) || read_attrs(L, o, op))
        return -1;
    json_t *mod = json_object_get(o, "module"), *entry = json_object_get(o, "entry");
    op->module = tp_xstrdup(json_is_string(mod) ? json_string_value(mod) : "");
    op->entry = json_is_string(entry) ? tp_xstrdup(json_string_value(entry)) : NULL;
    json_t *phase = json_object_get(o, "phase");
    if (phase) {
        const char *name = json_string_value(phase);
        int p = 0;
        while (name && p < TP_PHASE_COUNT && strcmp(name, tp_phase_names[p]))
            p++;
        if (!name || p == TP_PHASE_COUNT)
            return fail(L, "'phase' must be \"forward\", \"backward\" or \"grad_sync\"");
        op->phase = (tp_phase)p;
    }
    return size_rules[op->kind](L, s, op);
}

static int load_op(loader *L, const tr_schedule *s, json_t *o, int index, tr_op *op)
{
    char where[96];
    snprintf(where, sizeof where, "rank %d op %d", s->rank, index);
    L->where = where;
    int rc = -1;
    if (!json_is_object(o)) {
        fail(L, "must be an object");
    } else if (!read_kind(L, o, &op->kind)) {
        /* from here on, messages name the kind: "rank 0 op 12 (rmsnorm): ..." */
        snprintf(where, sizeof where, "rank %d op %d (%s)", s->rank, index, tp_op_names[op->kind]);
        rc = read_op(L, s, o, op);
    }
    L->where = NULL;
    return rc;
}

/* Where tprun keeps each weight: in its place in the region, or with
 * FSDP only this replica's run of it, the runs end to end (each of
 * tp_dp_shard_elems: a multiple of the region's alignment). */
static void place_stored_weights(tr_schedule *s)
{
    bool fsdp = s->dp_shard == TP_DP_SHARD_PARAMETERS;
    s->stored_elems = fsdp ? 0 : s->weight_elems;
    for (int i = 0; i < s->nweights; i++) {
        tr_weight *w = &s->weights[i];
        w->stored_offset = fsdp ? s->stored_elems : w->region_offset;
        if (fsdp)
            s->stored_elems += tp_dp_shard_elems(w->local_elems, s->data_parallel);
    }
}

static int load_rank(loader *L, tr_schedule *s, json_t *root)
{
    json_t *ranks = json_object_get(root, "ranks");
    if (!json_is_array(ranks) || (int)json_array_size(ranks) != s->world)
        return fail(L, "'ranks' must list all %d ranks", s->world);
    json_t *r = json_array_get(ranks, (size_t)s->rank);
    int64_t rank;
    if (!json_is_object(r) || get_int(L, r, "rank", s->rank, s->rank, &rank) ||
        load_weights(L, s, json_object_get(r, "weights")))
        return -1;
    place_stored_weights(s);
    json_t *ops = json_object_get(r, "ops");
    if (!json_is_array(ops) || json_array_size(ops) > (1u << 24))
        return fail(L, "rank %d: 'ops' must be an array", s->rank);
    s->nops = (int)json_array_size(ops);
    s->ops = tp_xcalloc((size_t)s->nops + 1, sizeof *s->ops);
    for (int i = 0; i < s->nops; i++)
        if (load_op(L, s, json_array_get(ops, (size_t)i), i, &s->ops[i])) {
            s->nops = i + 1;           /* free what was read */
            return -1;
        }
    return 0;
}

/* tprun gathers the logits into [batch, seq, columns] and keeps the first
 * vocab columns of each row: the placement must name one of the buffer's
 * dims and vocab fit in the columns the ranks hold together. */
static int check_logits(loader *L, const tr_schedule *s)
{
    const tr_buf *b = &s->bufs[s->logits];
    if (b->rank != 3 || b->dtype == TP_I32)
        return fail(L, "the logits are buffer %d, of rank %d and %s; they must be [batch, seq, vocab] floats",
                    s->logits, b->rank, tp_dtype_name(b->dtype));
    if (s->logits_pl.kind == TP_SHARD && s->logits_pl.dim >= b->rank)
        return fail(L, "the logits' placement Shard(%d) names no dim of their rank-%d buffer", s->logits_pl.dim,
                    b->rank);
    int64_t columns = b->shape[b->rank - 1] * (s->logits_pl.kind == TP_SHARD && s->logits_pl.dim == b->rank - 1
                                                   ? s->world : 1);
    if (s->vocab > columns)
        return fail(L, "the logits' vocab %lld is more than the %lld columns of buffer %d", (long long)s->vocab,
                    (long long)columns, s->logits);
    return 0;
}

static int load_io(loader *L, tr_schedule *s, json_t *root)
{
    json_t *inputs = json_object_get(root, "inputs"), *outputs = json_object_get(root, "outputs");
    int64_t ids, labels, loss, logits;
    if (!json_is_object(inputs) || !json_is_object(outputs))
        return fail(L, "'inputs' and 'outputs' must be objects");
    if (get_int(L, inputs, "input_ids", 0, s->nbufs - 1, &ids))
        return -1;
    json_t *lab = json_object_get(inputs, "labels"), *lo = json_object_get(outputs, "loss");
    json_t *lg = json_object_get(outputs, "logits");
    if (json_is_null(lab) || !lab) labels = -1;
    else if (get_int(L, inputs, "labels", 0, s->nbufs - 1, &labels)) return -1;
    if (json_is_null(lo) || !lo) loss = -1;
    else if (get_int(L, outputs, "loss", 0, s->nbufs - 1, &loss)) return -1;
    int64_t shift = 1, segments = -1;
    if (labels >= 0 && get_int(L, inputs, "label_shift", 0, 1, &shift))
        return -1;
    if (json_object_get(inputs, "segments") && get_int(L, inputs, "segments", 0, s->nbufs - 1, &segments))
        return -1;
    s->segments = (int)segments;
    s->input_ids = (int)ids;
    s->labels = (int)labels;
    s->label_shift = (int)shift;
    s->loss = (int)loss;
    s->logits = -1;
    if (json_is_object(lg)) {
        char *pl = NULL;
        if (get_int(L, lg, "buffer", 0, s->nbufs - 1, &logits) || get_str(L, lg, "placement", &pl) ||
            parse_placement(L, pl, &s->logits_pl) || get_int(L, lg, "vocab", 1, (int64_t)1 << 40, &s->vocab)) {
            free(pl);
            return -1;
        }
        free(pl);
        s->logits = (int)logits;
        if (check_logits(L, s))
            return -1;
    }
    if (s->bufs[s->input_ids].dtype != TP_I32 || (s->labels >= 0 && s->bufs[s->labels].dtype != TP_I32))
        return fail(L, "input ids and labels must be i32 buffers");
    if (s->segments >= 0 && (s->bufs[s->segments].dtype != TP_I32 ||
                             tr_buf_elems(&s->bufs[s->segments]) != tr_buf_elems(&s->bufs[s->input_ids])))
        return fail(L, "segments, buffer %d, must be i32 with one value per input id", s->segments);
    return 0;
}

/* A training schedule's "grads": one float buffer per weight, of the
 * weight's local size (with sharded gradients, of its run over the
 * replicas: sched/dp_shard.h), with a place in the arena (the optimizer
 * reads it after the last op). */
static int load_grads(loader *L, tr_schedule *s, json_t *root)
{
    json_t *grads = json_object_get(json_object_get(root, "outputs"), "grads");
    if (!grads)
        return 0;
    if (!json_is_array(grads) || (int)json_array_size(grads) != s->nweights)
        return fail(L, "'outputs.grads' must list one buffer per weight (%d)", s->nweights);
    s->grads = tp_xcalloc((size_t)s->nweights + 1, sizeof *s->grads);
    for (int i = 0; i < s->nweights; i++) {
        json_t *b = json_array_get(grads, (size_t)i);
        if (!json_is_integer(b) || json_integer_value(b) < 0 || json_integer_value(b) >= s->nbufs)
            return fail(L, "'outputs.grads'[%d] is not a buffer", i);
        const tr_buf *buf = &s->bufs[json_integer_value(b)];
        bool runs = s->dp_shard >= TP_DP_SHARD_GRADIENTS;
        int64_t n = runs ? tp_dp_shard_elems(s->weights[i].local_elems, s->data_parallel) : s->weights[i].local_elems;
        if (buf->dtype == TP_I32 || buf->offset < 0 || tr_buf_elems(buf) != n)
            return fail(L, "'outputs.grads'[%d]: buffer %d is not a float buffer of weight %s's %lld %s", i,
                        (int)json_integer_value(b), s->weights[i].name, (long long)n,
                        runs ? "elements of its run over the data-parallel replicas" : "local elements");
        s->grads[i] = (int)json_integer_value(b);
    }
    return 0;
}

/* The next collective of a rank's ops from index *i on, or NULL at the end. */
static json_t *next_collective(json_t *ops, size_t *i)
{
    for (; *i < json_array_size(ops); (*i)++) {
        json_t *op = json_array_get(ops, *i);
        tp_op_kind k = tp_op_kind_named(json_is_string(json_object_get(op, "op"))
                                             ? json_string_value(json_object_get(op, "op")) : "");
        if (k != TP_OP_COUNT && tp_op_is_collective(k))
            return op;
    }
    return NULL;
}

/* Every rank issues the same collectives in the same order, on the same
 * buffers with the same attributes: one that differs is a deadlock, or a
 * collective of the wrong size, on every rank. This rank's ops are read
 * and checked; the others' need only equal them. */
static int check_peer_collectives(loader *L, const tr_schedule *s, json_t *root)
{
    static const char *const keys[] = {"op", "in", "out", "dim", "dim2", "reduce", "elems"};
    json_t *ranks = json_object_get(root, "ranks");
    json_t *mine = json_object_get(json_array_get(ranks, (size_t)s->rank), "ops");
    for (int r = 0; r < s->world; r++) {
        json_t *theirs = json_object_get(json_array_get(ranks, (size_t)r), "ops");
        if (r == s->rank)
            continue;
        if (!json_is_array(theirs))
            return fail(L, "rank %d: 'ops' must be an array", r);
        size_t i = 0, j = 0;
        for (int n = 0;; n++, i++, j++) {
            json_t *a = next_collective(mine, &i), *b = next_collective(theirs, &j);
            if (!a && !b)
                break;
            bool same = a && b;
            for (size_t k = 0; same && k < sizeof keys / sizeof *keys; k++) {
                json_t *x = json_object_get(a, keys[k]), *y = json_object_get(b, keys[k]);
                same = (!x && !y) || (x && y && json_equal(x, y));
            }
            if (!same) {
                char ours[64] = "no more collectives", other[64] = "no more collectives";
                if (a)
                    snprintf(ours, sizeof ours, "%s, op %zu", json_string_value(json_object_get(a, "op")), i);
                if (b)
                    snprintf(other, sizeof other, "%s, op %zu", json_string_value(json_object_get(b, "op")), j);
                return fail(L, "collective %d differs between rank %d (%s) and rank %d (%s): every rank must issue "
                            "the same collectives in the same order, on the same buffers, or the job deadlocks; "
                            "compile the schedule again with tpcc PLAN -o FILE.sched", n, s->rank, ours, r, other);
            }
        }
    }
    return 0;
}

int tr_schedule_load(tr_schedule *s, const char *path, int rank, int world_expected, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->rank = rank;
    loader L = {path, err, errlen, NULL};
    json_error_t je;
    char why[600];
    FILE *f = tp_input_fopen(path, why, sizeof why);   /* a FIFO named as the schedule: refused, not waited on */
    if (!f) {
        snprintf(err, errlen, "cannot read the schedule: %s", why);
        return -1;
    }
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root) {
        /* most often a plan given where its schedule belongs: name a .sched
         * for it, never the file itself (tpcc -o refuses an input anyway) */
        char *sched = tp_sched_name_for(path);
        if (tp_is_sched_name(path))
            snprintf(err, errlen, "%s: cannot read schedule: %s (line %d); compile it again with tpcc PLAN -o %s",
                     path, je.text, je.line, path);
        else
            snprintf(err, errlen, "%s: cannot read schedule: %s (line %d); if it is a plan, compile it first: "
                     "tpcc %s -o %s, then run that", path, je.text, je.line, path, sched);
        free(sched);
        return -1;
    }
    int rc = -1;
    char *magic = NULL, *dtype = NULL;
    int64_t version, world, dp = 1;
    if (!json_is_object(root) || get_str(&L, root, "magic", &magic))
        fail(&L, "not a tpcc schedule (no magic); compile a plan with tpcc PLAN -o NAME.sched");
    else if (strcmp(magic, TP_SCHEDULE_MAGIC))
        fail(&L, "not a tpcc schedule (magic '%s')", magic);
    else if (get_int(&L, root, "format_version", 0, 1 << 20, &version))
        ;
    else if (version != TP_SCHEDULE_VERSION)
        fail(&L, "schedule format %lld, this tprun reads format %d: recompile it with this tpcc", (long long)version,
             TP_SCHEDULE_VERSION);
    else if (get_int(&L, root, "world_size", 1, 1 << 20, &world))
        ;
    else if (json_object_get(root, "data_parallel") && get_int(&L, root, "data_parallel", 2, 1 << 20, &dp))
        ;
    else if (load_train(&L, root, &s->train))
        ;
    else if (load_dp_shard(&L, root, dp, &s->dp_shard))
        ;
    else if (world_expected > 0 && dp > 1 && dp * world != world_expected)
        fail(&L, "the schedule is for %lld ranks (%lld data-parallel replicas of %lld tensor-parallel ranks) but %d "
                 "were launched: run it with tprun -n %lld", (long long)(dp * world), (long long)dp, (long long)world,
                 world_expected, (long long)(dp * world));
    else if (world_expected > 0 && dp == 1 && world != world_expected)
        fail(&L, "the schedule is for %lld ranks but %d were launched: run it with tprun -n %lld, or recompile with "
                 "tpcc -D tp=%d", (long long)world, world_expected, (long long)world, world_expected);
    else if (rank < 0 || rank >= dp * world)
        fail(&L, "rank %d is outside the schedule's %lld ranks", rank, (long long)(dp * world));
    else if (get_str(&L, root, "dtype", &dtype) || parse_dtype(&L, dtype, &s->dtype) ||
             get_int(&L, root, "arena_bytes", 0, (int64_t)1 << 50, &s->arena_bytes) ||
             get_str(&L, root, "producer", &s->producer) || get_str(&L, root, "input_hash", &s->input_hash))
        ;
    else {
        s->world = (int)world;
        s->data_parallel = (int)dp;
        s->rank = rank % (int)world;
        s->dp_rank = rank / (int)world;
        json_t *plan = json_object_get(root, "plan");
        s->plan = tp_xstrdup(json_is_string(plan) ? json_string_value(plan) : "");
        if (!load_buffers(&L, s, json_object_get(root, "buffers")) && !load_io(&L, s, root) && !load_rank(&L, s, root) &&
            !load_grads(&L, s, root) && !check_peer_collectives(&L, s, root) &&
            !tr_schedule_validate(s, path, err, errlen))
            rc = 0;
    }
    free(magic);
    free(dtype);
    json_decref(root);
    if (rc)
        tr_schedule_free(s);
    return rc;
}

void tr_schedule_free(tr_schedule *s)
{
    for (int i = 0; i < s->nbufs; i++)
        free(s->bufs[i].name);
    for (int i = 0; i < s->nweights; i++)
        free(s->weights[i].name);
    for (int i = 0; i < s->nops; i++) {
        free(s->ops[i].module);
        free(s->ops[i].entry);
    }
    free(s->bufs);
    free(s->weights);
    free(s->ops);
    free(s->grads);
    free(s->producer);
    free(s->input_hash);
    free(s->plan);
    memset(s, 0, sizeof *s);
}
