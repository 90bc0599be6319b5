/* sched/load.c: see sched/load.h.
 *
 * Everything the executor will index with is checked here: buffer offsets
 * inside the arena, op operands naming real buffers and weights, element
 * counts agreeing with the shapes, collective parameters the world size
 * can satisfy. A malformed file gives a message, never an out-of-bounds
 * access later. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/format.h"
#include "sched/load.h"
#include "util/xalloc.h"

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
    snprintf(L->err, L->errlen, "%s: %s%s%s", L->path, L->where ? L->where : "", L->where ? ": " : "", msg);
    return -1;
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

static int opt_real(loader *L, json_t *o, const char *key, double dflt, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return fail(L, "'%s' must be a number", key);
    *out = json_number_value(v);
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

int64_t tr_buf_elems(const tr_buf *b)
{
    int64_t n = 1;
    for (int i = 0; i < b->rank; i++)
        n *= b->shape[i];
    return n;
}

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
        int64_t elems = tr_buf_elems(t);
        if (t->bytes != elems * (int64_t)tp_dtype_size(t->dtype))
            return fail(L, "'bytes' = %lld does not match its shape and dtype (%lld)", (long long)t->bytes,
                        (long long)(elems * (int64_t)tp_dtype_size(t->dtype)));
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
        json_t *slice = json_object_get(w, "slice");
        t->dim = -1;
        t->offset = 0;
        t->local_elems = 1;
        for (int d = 0; d < t->rank; d++)
            t->local_elems *= t->shape[d];
        if (json_is_object(slice)) {
            int64_t dim;
            if (get_int(L, slice, "dim", 0, t->rank - 1, &dim) ||
                get_int(L, slice, "offset", 0, t->shape[dim] - 1, &t->offset) ||
                get_int(L, slice, "length", 1, t->shape[dim] - t->offset, &t->length))
                return -1;
            t->dim = (int)dim;
            t->local_elems = t->local_elems / t->shape[dim] * t->length;
        } else if (!json_is_null(slice)) {
            return fail(L, "'slice' must be an object or null");
        }
        t->region_offset = s->weight_elems;
        s->weight_elems += t->local_elems;
    }
    L->where = NULL;
    return 0;
}

static int op_kind(loader *L, const char *name, tp_op_kind *out)
{
    for (int k = 0; k < TP_OP_COUNT; k++)
        if (!strcmp(tp_op_names[k], name)) {
            *out = (tp_op_kind)k;
            return 0;
        }
    return fail(L, "unknown op '%s' (is the schedule newer than this tprun?)", name);
}

static int64_t elems_of(const tr_schedule *s, int b) { return tr_buf_elems(&s->bufs[b]); }

/* The sizes an op's fields promise must be the sizes of its buffers and
 * weights: the kernels trust them. */
static int check_op_sizes(loader *L, const tr_schedule *s, const tr_op *op)
{
    int64_t in = op->nin ? elems_of(s, op->in[0]) : 0, out = op->out >= 0 ? elems_of(s, op->out) : 0;
    const tr_weight *w = op->weight >= 0 ? &s->weights[op->weight] : NULL;
    switch (op->kind) {
    case TP_OP_MATMUL:
        if (!w || in != op->m * op->k || out != op->m * op->n || w->local_elems != op->n * op->k)
            return fail(L, "matmul sizes m=%lld n=%lld k=%lld do not match its buffers and weight", (long long)op->m,
                        (long long)op->n, (long long)op->k);
        return 0;
    case TP_OP_BIAS_ADD:
    case TP_OP_RMSNORM:
    case TP_OP_LAYERNORM:
        if (in != op->m * op->n || out != in || (w && w->local_elems != op->n) ||
            (op->bias >= 0 && s->weights[op->bias].local_elems != op->n))
            return fail(L, "%s sizes m=%lld n=%lld do not match its buffers", tp_op_names[op->kind], (long long)op->m,
                        (long long)op->n);
        return 0;
    case TP_OP_EMBEDDING:
        if (!w || w->rank != 2 || out != in * (w->local_elems / op->vocab_local) || w->local_elems % op->vocab_local)
            return fail(L, "embedding sizes do not match its buffers and weight");
        return 0;
    case TP_OP_ATTENTION:
        if (op->nin != 3 || in != op->batch * op->seq * op->heads * op->head_dim || out != in || op->kv_heads < 1 ||
            op->heads % op->kv_heads || elems_of(s, op->in[1]) != op->batch * op->seq * op->kv_heads * op->head_dim ||
            elems_of(s, op->in[2]) != elems_of(s, op->in[1]))
            return fail(L, "attention sizes do not match its buffers");
        return 0;
    case TP_OP_ADD:
    case TP_OP_MUL:
        if (op->nin != 2 || out != in || elems_of(s, op->in[1]) == 0 || in % elems_of(s, op->in[1]))
            return fail(L, "%s operands do not broadcast", tp_op_names[op->kind]);
        return 0;
    case TP_OP_ROPE:
        if (s->bufs[op->in[0]].rank != 4 || out != in)
            return fail(L, "rope expects a [batch, seq, heads, head_dim] buffer");
        return 0;
    case TP_OP_SLICE:
        if (op->dim >= s->bufs[op->in[0]].rank || op->parts < 1 || op->index >= op->parts ||
            s->bufs[op->in[0]].shape[op->dim] % op->parts || out * op->parts != in)
            return fail(L, "slice dim=%d parts=%d does not match its buffers", op->dim, op->parts);
        return 0;
    case TP_OP_ALL_GATHER:
    case TP_OP_REDUCE_SCATTER:
    case TP_OP_ALL_TO_ALL: {
        const tr_buf *b = &s->bufs[op->kind == TP_OP_REDUCE_SCATTER ? op->out : op->in[0]];
        int64_t small = op->kind == TP_OP_REDUCE_SCATTER ? out : in, big = op->kind == TP_OP_REDUCE_SCATTER ? in : out;
        if (op->dim >= b->rank || op->dim2 >= b->rank ||
            (op->kind != TP_OP_ALL_TO_ALL && big != small * s->world) || (op->kind == TP_OP_ALL_TO_ALL && in != out))
            return fail(L, "%s along dim %d does not match its buffers for %d ranks", tp_op_names[op->kind], op->dim,
                        s->world);
        return 0;
    }
    case TP_OP_ALL_REDUCE:
    case TP_OP_SCALE:
    case TP_OP_SILU: case TP_OP_GELU: case TP_OP_RELU:
        if (out != in)
            return fail(L, "%s changes the element count", tp_op_names[op->kind]);
        return 0;
    default:
        return 0;
    }
}

static int load_op(loader *L, tr_schedule *s, json_t *o, tr_op *op)
{
    char *name = NULL;
    if (!json_is_object(o))
        return fail(L, "must be an object");
    if (get_str(L, o, "op", &name) || op_kind(L, name, &op->kind)) {
        free(name);
        return -1;
    }
    free(name);
    json_t *in = json_object_get(o, "in");
    if (!json_is_array(in) || json_array_size(in) > 4)
        return fail(L, "'in' must be an array of at most 4 buffers");
    op->nin = (int)json_array_size(in);
    for (int i = 0; i < op->nin; i++) {
        json_t *b = json_array_get(in, (size_t)i);
        if (!json_is_integer(b) || json_integer_value(b) < 0 || json_integer_value(b) >= s->nbufs)
            return fail(L, "'in'[%d] is not a buffer", i);
        op->in[i] = (int)json_integer_value(b);
    }
    int64_t v[20];
    int64_t big = (int64_t)1 << 40;
    if (opt_int(L, o, "out", 0, s->nbufs - 1, -1, &v[0]) || opt_int(L, o, "weight", 0, s->nweights - 1, -1, &v[1]) ||
        opt_int(L, o, "bias", 0, s->nweights - 1, -1, &v[2]) || opt_int(L, o, "dim", 0, TP_MAX_RANK - 1, 0, &v[3]) ||
        opt_int(L, o, "dim2", 0, TP_MAX_RANK - 1, 0, &v[4]) || opt_int(L, o, "index", 0, 1 << 20, 0, &v[5]) ||
        opt_int(L, o, "parts", 1, 1 << 20, 1, &v[6]) || opt_int(L, o, "m", 0, big, 0, &op->m) ||
        opt_int(L, o, "n", 0, big, 0, &op->n) || opt_int(L, o, "k", 0, big, 0, &op->k) ||
        opt_int(L, o, "batch", 0, big, 0, &op->batch) || opt_int(L, o, "seq", 0, big, 0, &op->seq) ||
        opt_int(L, o, "heads", 0, big, 0, &op->heads) || opt_int(L, o, "head_dim", 0, big, 0, &op->head_dim) ||
        opt_int(L, o, "kv_heads", 0, big, 0, &op->kv_heads) || opt_int(L, o, "vocab_start", 0, big, 0, &op->vocab_start) ||
        opt_int(L, o, "vocab_local", 1, big, 1, &op->vocab_local) ||
        opt_int(L, o, "vocab_logical", 0, big, 0, &op->vocab_logical) ||
        opt_int(L, o, "pos_offset", 0, big, 0, &op->pos_offset) || opt_int(L, o, "elems", 0, big, 0, &op->elems) ||
        opt_real(L, o, "scale", 1.0, &op->scale) || opt_real(L, o, "eps", 1e-6, &op->eps) ||
        opt_real(L, o, "theta", 10000.0, &op->theta))
        return -1;
    for (int i = 0; i < op->nin; i++)
        if (s->bufs[op->in[i]].offset < 0)
            return fail(L, "reads buffer %d, which has no place in the arena", op->in[i]);
    if (v[0] >= 0 && s->bufs[v[0]].offset < 0)
        return fail(L, "writes buffer %lld, which has no place in the arena", (long long)v[0]);
    op->out = (int)v[0];
    op->weight = (int)v[1];
    op->bias = (int)v[2];
    op->dim = (int)v[3];
    op->dim2 = (int)v[4];
    op->index = (int)v[5];
    op->parts = (int)v[6];
    op->masked = json_is_true(json_object_get(o, "masked"));
    json_t *r = json_object_get(o, "reduce");
    op->reduce_max = json_is_string(r) && !strcmp(json_string_value(r), "max");
    json_t *mod = json_object_get(o, "module"), *entry = json_object_get(o, "entry");
    op->module = tp_xstrdup(json_is_string(mod) ? json_string_value(mod) : "");
    op->entry = json_is_string(entry) ? tp_xstrdup(json_string_value(entry)) : NULL;
    return check_op_sizes(L, s, op);
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
    json_t *ops = json_object_get(r, "ops");
    if (!json_is_array(ops) || json_array_size(ops) > (1u << 24))
        return fail(L, "rank %d: 'ops' must be an array", s->rank);
    s->nops = (int)json_array_size(ops);
    s->ops = tp_xcalloc((size_t)s->nops + 1, sizeof *s->ops);
    char where[64];
    for (int i = 0; i < s->nops; i++) {
        snprintf(where, sizeof where, "rank %d op %d", s->rank, i);
        L->where = where;
        if (load_op(L, s, json_array_get(ops, (size_t)i), &s->ops[i])) {
            s->nops = i + 1;           /* free what was read */
            return -1;
        }
    }
    L->where = NULL;
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
    s->input_ids = (int)ids;
    s->labels = (int)labels;
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
    }
    if (s->bufs[s->input_ids].dtype != TP_I32 || (s->labels >= 0 && s->bufs[s->labels].dtype != TP_I32))
        return fail(L, "input ids and labels must be i32 buffers");
    return 0;
}

int tr_schedule_load(tr_schedule *s, const char *path, int rank, int world_expected, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->rank = rank;
    loader L = {path, err, errlen, NULL};
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "%s: cannot read schedule: %s (line %d); compile one with tpcc PLAN -o %s", path, je.text,
                 je.line, path);
        return -1;
    }
    int rc = -1;
    char *magic = NULL, *dtype = NULL;
    int64_t version, world;
    if (!json_is_object(root) || get_str(&L, root, "magic", &magic))
        fail(&L, "not a tpcc schedule (no magic)");
    else if (strcmp(magic, TP_SCHEDULE_MAGIC))
        fail(&L, "not a tpcc schedule (magic '%s')", magic);
    else if (get_int(&L, root, "format_version", 0, 1 << 20, &version))
        ;
    else if (version != TP_SCHEDULE_VERSION)
        fail(&L, "schedule format %lld, this tprun reads format %d: recompile it with this tpcc", (long long)version,
             TP_SCHEDULE_VERSION);
    else if (get_int(&L, root, "world_size", 1, 1 << 20, &world))
        ;
    else if (world_expected > 0 && world != world_expected)
        fail(&L, "the schedule is for %lld ranks but %d were launched: run it with tprun -n %lld, or recompile with "
                 "tpcc -D tp=%d", (long long)world, world_expected, (long long)world, world_expected);
    else if (rank < 0 || rank >= world)
        fail(&L, "rank %d is outside the schedule's %lld ranks", rank, (long long)world);
    else if (get_str(&L, root, "dtype", &dtype) || parse_dtype(&L, dtype, &s->dtype) ||
             get_int(&L, root, "arena_bytes", 0, (int64_t)1 << 50, &s->arena_bytes) ||
             get_str(&L, root, "producer", &s->producer) || get_str(&L, root, "input_hash", &s->input_hash))
        ;
    else {
        s->world = (int)world;
        json_t *plan = json_object_get(root, "plan");
        s->plan = tp_xstrdup(json_is_string(plan) ? json_string_value(plan) : "");
        if (!load_buffers(&L, s, json_object_get(root, "buffers")) && !load_io(&L, s, root) && !load_rank(&L, s, root))
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
    free(s->producer);
    free(s->input_hash);
    free(s->plan);
    memset(s, 0, sizeof *s);
}
