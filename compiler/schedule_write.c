/* schedule_write.c: the lowered program as a versioned JSON schedule.
 *
 * The document is built as a jansson tree, then laid out with one buffer,
 * one weight and one op per line (keys in insertion order, each real as
 * the shortest decimal that reads back exactly, strings escaped by
 * jansson), so identical inputs give byte-identical files and a diff of
 * two schedules reads op by op. The format is in docs/schedule.md.
 *
 * The file is written atomically, as diag_fixit.c writes plans: the text
 * goes to a temporary file in the destination's directory, is synced, and
 * then renamed over the destination. Any failure removes the temporary
 * file and leaves whatever was at the destination untouched. */
#define _XOPEN_SOURCE 700   /* mkstemp, fchmod, fsync */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout.h"
#include "model.h"
#include "plan.h"
#include "schedule.h"
#include "xalloc.h"

typedef struct writer {
    const tp_ir *ir;
    const tp_schedule_meta *meta;
    char *err;
    size_t errlen;
    bool failed;            /* the first error is kept in err */
} writer;

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void fail(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(writer *w, const char *fmt, ...)
{
    if (w->failed)
        return;
    w->failed = true;
    if (!w->err || w->errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(w->err, w->errlen, fmt, ap);
    va_end(ap);
}

/* ---- jansson with allocation failure handled (xalloc.h) ---- */

static json_t *jobj(void) { return tp_xcheck(json_object()); }
static json_t *jarr(void) { return tp_xcheck(json_array()); }
static json_t *jint(int64_t v) { return tp_xcheck(json_integer((json_int_t)v)); }

static json_t *jstr(writer *w, const char *s)
{
    json_t *v = json_string(s ? s : "");
    if (!v) {
        fail(w, "cannot record '%s' in the schedule: it is not valid UTF-8", s);
        return json_null();
    }
    return v;
}

static json_t *jreal(writer *w, double x, const char *what, int op)
{
    if (!isfinite(x)) {
        fail(w, "op %d: %s is %g; the schedule records finite numbers only", op, what, x);
        return json_null();
    }
    return tp_xcheck(json_real(x));
}

static void set(json_t *obj, const char *key, json_t *v)
{
    if (json_object_set_new(obj, key, v) != 0)
        tp_out_of_memory();
}

static void push(json_t *arr, json_t *v)
{
    if (json_array_append_new(arr, v) != 0)
        tp_out_of_memory();
}

static json_t *jshape(const int64_t *shape, int rank)
{
    json_t *a = jarr();
    for (int d = 0; d < rank; d++)
        push(a, jint(shape[d]));
    return a;
}

static const char *pl_str(tp_placement p, int rank, char *buf, size_t len)
{
    return tp_placement_str(tp_placement_norm(p, rank), buf, len);
}

/* ---- checking the program before describing it ---- */

static int root_of(const tp_ir *ir, int b)
{
    for (int steps = 0; b >= 0 && b < ir->nbufs && ir->bufs[b].alias_of >= 0 && steps <= ir->nbufs; steps++)
        b = ir->bufs[b].alias_of;
    return b;
}

static void check_ir(writer *w)
{
    const tp_ir *ir = w->ir;
    if (ir->world < 1)
        fail(w, "world size %" PRId64 " is not positive", ir->world);
    for (int b = 0; b < ir->nbufs; b++) {
        const tp_ir_buf *buf = &ir->bufs[b];
        if (buf->rank < 0 || buf->rank > TP_MAX_RANK || (unsigned)buf->dtype > TP_I32)
            fail(w, "buffer %d has rank %d and dtype %d", b, buf->rank, (int)buf->dtype);
        if (buf->alias_of >= ir->nbufs || buf->alias_of == b)
            fail(w, "buffer %d is a view of buffer %d", b, buf->alias_of);
    }
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if ((unsigned)op->kind >= TP_OP_COUNT) {
            fail(w, "op %d has kind %d", i, (int)op->kind);
            continue;
        }
        if (op->weight < -1 || op->weight >= ir->nparams || op->bias < -1 || op->bias >= ir->nparams)
            fail(w, "op %d (%s) names parameter %d, outside the %d parameters", i, tp_op_names[op->kind],
                 op->weight >= ir->nparams || op->weight < -1 ? op->weight : op->bias, ir->nparams);
    }
    for (int p = 0; p < ir->nparams; p++) {
        const tp_ir_param *ip = &ir->params[p];
        if (!ip->param || ip->param->rank < 1 || ip->param->rank > 2) {
            fail(w, "parameter %d has no checkpoint tensor of rank 1 or 2", p);
            continue;
        }
        tp_placement pl = tp_placement_norm(ip->pl, ip->param->rank);
        for (int d = 0; d < ip->param->rank; d++) {
            bool sharded = pl.kind == TP_SHARD && pl.dim == d;
            int64_t want = sharded ? ip->local[d] * ir->world : ip->local[d];
            if (ip->local[d] <= 0 || want != ip->param->shape[d])
                fail(w, "parameter %d (%s): local size %" PRId64 " of dimension %d does not %s %" PRId64, p,
                     ip->param->fqn, ip->local[d], d, sharded ? "split evenly into" : "equal", ip->param->shape[d]);
        }
        if (pl.kind != TP_REPLICATE && !(pl.kind == TP_SHARD && pl.dim >= 0 && pl.dim < ip->param->rank)) {
            char buf[24];
            fail(w, "parameter %d (%s) is %s; a weight is replicated or sharded", p, ip->param->fqn,
                 tp_placement_str(pl, buf, sizeof buf));
        }
    }
    int ninputs = 0;
    for (int b = 0; b < ir->nbufs; b++)
        ninputs += ir->bufs[b].input;
    if (ninputs > 2)
        fail(w, "the program has %d inputs; a schedule has input_ids and labels only", ninputs);
    if (ir->loss_buf >= ir->nbufs || ir->logits_buf >= ir->nbufs)
        fail(w, "the loss or logits buffer is outside the %d buffers", ir->nbufs);
    if (!w->failed) {
        char msg[512];
        if (!tp_memplan_verify(ir, msg, sizeof msg))
            fail(w, "invalid memory plan: %s", msg);
    }
}

/* ---- the document ---- */

static json_t *config_json(writer *w)
{
    json_t *o = jobj();
    const tp_config *c = w->meta->config;
    for (int i = 0; c && i < c->count; i++) {
        const tp_cfg_entry *e = &c->items[i];
        json_t *v;
        if (e->state != 2)
            v = json_null();   /* never evaluated (unused) or failed */
        else if (e->is_bool)
            v = json_boolean(e->value);
        else
            v = jint(e->value);
        set(o, e->name, v);
    }
    return o;
}

/* Columns of the logits that are real vocabulary: from the op that
 * consumes them, else the rows of the checkpoint weight that produced
 * them. 0 when neither is known. */
static int64_t logits_vocab(const tp_ir *ir)
{
    int lr = root_of(ir, ir->logits_buf);
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (!op->dead && (op->kind == TP_OP_CROSS_ENTROPY || op->kind == TP_OP_CE_MAX) && op->nin > 0 &&
            root_of(ir, op->in[0]) == lr && op->vocab_logical > 0)
            return op->vocab_logical;
    }
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (!op->dead && op->out >= 0 && root_of(ir, op->out) == lr && op->weight >= 0)
            return ir->params[op->weight].param->logical[0];
    }
    return 0;
}

static json_t *io_json(writer *w)
{
    const tp_ir *ir = w->ir;
    int inputs[2] = {-1, -1}, n = 0;
    for (int b = 0; b < ir->nbufs && n < 2; b++)
        if (ir->bufs[b].input)
            inputs[n++] = b;
    json_t *in = jobj();
    set(in, "input_ids", inputs[0] >= 0 ? jint(inputs[0]) : json_null());
    set(in, "labels", inputs[1] >= 0 ? jint(inputs[1]) : json_null());
    return in;
}

static json_t *outputs_json(writer *w)
{
    const tp_ir *ir = w->ir;
    json_t *out = jobj();
    set(out, "loss", ir->loss_buf >= 0 ? jint(ir->loss_buf) : json_null());
    if (ir->logits_buf < 0) {
        set(out, "logits", json_null());
        return out;
    }
    json_t *l = jobj();
    char buf[24];
    set(l, "buffer", jint(ir->logits_buf));
    set(l, "placement", jstr(w, pl_str(ir->logits_pl, ir->bufs[ir->logits_buf].rank, buf, sizeof buf)));
    int64_t vocab = logits_vocab(ir);
    set(l, "vocab", vocab > 0 ? jint(vocab) : json_null());
    set(out, "logits", l);
    return out;
}

static json_t *buffers_json(writer *w)
{
    const tp_ir *ir = w->ir;
    json_t *a = jarr();
    for (int b = 0; b < ir->nbufs; b++) {
        const tp_ir_buf *buf = &ir->bufs[b];
        json_t *o = jobj();
        char *fallback = buf->name ? NULL : tp_xasprintf("b%d", b);
        set(o, "name", jstr(w, buf->name ? buf->name : fallback));
        free(fallback);
        set(o, "shape", jshape(buf->shape, buf->rank));
        set(o, "dtype", jstr(w, tp_dtype_name(buf->dtype)));
        set(o, "offset", buf->offset >= 0 ? jint(buf->offset) : json_null());
        set(o, "bytes", jint(tp_ir_buf_elems(buf) * (int64_t)tp_dtype_size(buf->dtype)));
        if (buf->alias_of >= 0)
            set(o, "alias_of", jint(buf->alias_of));
        push(a, o);
    }
    return a;
}

static json_t *weights_json(writer *w, int64_t rank)
{
    const tp_ir *ir = w->ir;
    json_t *a = jarr();
    for (int p = 0; p < ir->nparams; p++) {
        const tp_ir_param *ip = &ir->params[p];
        const tp_param *param = ip->param;
        tp_placement pl = tp_placement_norm(ip->pl, param->rank);
        char buf[24];
        json_t *o = jobj();
        set(o, "name", jstr(w, param->fqn));
        set(o, "shape", jshape(param->shape, param->rank));
        set(o, "logical_shape", jshape(param->logical, param->rank));
        set(o, "dtype", jstr(w, tp_dtype_name(w->meta->dtype)));
        set(o, "placement", jstr(w, tp_placement_str(pl, buf, sizeof buf)));
        if (pl.kind == TP_SHARD) {
            json_t *s = jobj();
            set(s, "dim", jint(pl.dim));
            set(s, "offset", jint(rank * ip->local[pl.dim]));
            set(s, "length", jint(ip->local[pl.dim]));
            set(o, "slice", s);
        } else {
            set(o, "slice", json_null());
        }
        push(a, o);
    }
    return a;
}

static int64_t collective_bytes(const tp_ir *ir, const tp_ir_op *op)
{
    int b = op->nin > 0 ? op->in[0] : op->out;
    size_t size = b >= 0 ? tp_dtype_size(ir->bufs[b].dtype) : 4;
    return op->elems * (int64_t)size;
}

/* Attention sizes: local batch, sequence, query heads, head size and kv
 * heads, from the op; the query's shape [batch, seq, heads, head_dim]
 * stands in for sizes the lowering left at 0. */
static void attention_json(writer *w, json_t *o, const tp_ir_op *op, int index)
{
    const tp_ir *ir = w->ir;
    const tp_ir_buf *q = op->nin > 0 ? &ir->bufs[op->in[0]] : NULL;
    int64_t size[4] = {op->m, op->n, op->heads, op->k};
    for (int d = 0; d < 4; d++) {
        if (size[d] > 0)
            continue;
        if (!q || q->rank != 4) {
            fail(w, "op %d (attention): no sizes, and the query is not a [batch, seq, heads, head_dim] buffer",
                 index);
            return;
        }
        size[d] = q->shape[d];
    }
    int64_t kv = op->groups;
    if (kv <= 0)
        kv = op->nin > 1 && ir->bufs[op->in[1]].rank == 4 ? ir->bufs[op->in[1]].shape[2] : size[2];
    set(o, "batch", jint(size[0]));
    set(o, "seq", jint(size[1]));
    set(o, "heads", jint(size[2]));
    set(o, "head_dim", jint(size[3]));
    set(o, "kv_heads", jint(kv));
}

/* The last dimension of the first input (head_dim of a [b, s, h, d] x). */
static int64_t last_dim(const tp_ir *ir, const tp_ir_op *op)
{
    const tp_ir_buf *x = op->nin > 0 ? &ir->bufs[op->in[0]] : NULL;
    return x && x->rank > 0 ? x->shape[x->rank - 1] : 0;
}

/* The rank's columns of a vocab-sharded tensor. */
static void vocab_slice(json_t *o, const tp_ir_op *op, int64_t rank)
{
    set(o, "vocab_start", jint(rank * op->vocab_local));
    set(o, "vocab_local", jint(op->vocab_local));
}

static json_t *op_json(writer *w, const tp_ir_op *op, int index, int64_t rank)
{
    const tp_ir *ir = w->ir;
    json_t *o = jobj();
    set(o, "op", jstr(w, tp_op_names[op->kind]));
    json_t *in = jarr();
    for (int k = 0; k < op->nin; k++)
        push(in, jint(op->in[k]));
    set(o, "in", in);
    if (op->out >= 0)
        set(o, "out", jint(op->out));
    if (op->weight >= 0)
        set(o, "weight", jint(op->weight));
    if (op->bias >= 0)
        set(o, "bias", jint(op->bias));

    switch (op->kind) {
    case TP_OP_EMBEDDING:
        set(o, "masked", json_boolean(op->masked));
        set(o, "vocab_start", jint(op->masked ? rank * op->vocab_local : 0));
        set(o, "vocab_local", jint(op->vocab_local));
        break;
    case TP_OP_MATMUL:
        set(o, "m", jint(op->m));
        set(o, "n", jint(op->n));
        set(o, "k", jint(op->k));
        break;
    case TP_OP_BIAS_ADD:
        set(o, "m", jint(op->m));
        set(o, "n", jint(op->n));
        set(o, "scale", jreal(w, op->scale, "scale", index));
        break;
    case TP_OP_RMSNORM:
    case TP_OP_LAYERNORM:
        set(o, "m", jint(op->m));
        set(o, "n", jint(op->n));
        set(o, "eps", jreal(w, op->eps, "eps", index));
        break;
    case TP_OP_ROPE:
        set(o, "theta", jreal(w, op->theta, "theta", index));
        set(o, "pos_offset", jint(rank * op->pos_chunk));
        set(o, "head_dim", jint(op->k > 0 ? op->k : last_dim(ir, op)));
        break;
    case TP_OP_ATTENTION:
        attention_json(w, o, op, index);
        break;
    case TP_OP_SILU: case TP_OP_GELU: case TP_OP_RELU: case TP_OP_ADD: case TP_OP_MUL:
    case TP_OP_CE_LOSS:
        break;
    case TP_OP_SCALE:
        set(o, "scale", jreal(w, op->scale, "scale", index));
        break;
    case TP_OP_SLICE:
        set(o, "dim", jint(op->dim));
        set(o, "index", jint(rank));
        set(o, "parts", jint(op->parts > 0 ? op->parts : ir->world));
        break;
    case TP_OP_POSITIONS:
        set(o, "pos_offset", jint(rank * op->pos_chunk));
        break;
    case TP_OP_CROSS_ENTROPY:
        set(o, "vocab_local", jint(op->vocab_local));
        set(o, "vocab_logical", jint(op->vocab_logical));
        break;
    case TP_OP_CE_MAX: case TP_OP_CE_SUMEXP:
        vocab_slice(o, op, rank);
        set(o, "vocab_logical", jint(op->vocab_logical));
        break;
    case TP_OP_CE_TARGET:
        vocab_slice(o, op, rank);
        break;
    case TP_OP_ALL_GATHER: case TP_OP_REDUCE_SCATTER:
        set(o, "dim", jint(op->dim));
        set(o, "elems", jint(op->elems));
        set(o, "bytes", jint(collective_bytes(ir, op)));
        break;
    case TP_OP_ALL_REDUCE:
        set(o, "reduce", jstr(w, op->reduce_max ? "max" : "sum"));
        set(o, "elems", jint(op->elems));
        set(o, "bytes", jint(collective_bytes(ir, op)));
        break;
    case TP_OP_ALL_TO_ALL:
        set(o, "dim", jint(op->dim));
        set(o, "dim2", jint(op->dim2));
        set(o, "elems", jint(op->elems));
        set(o, "bytes", jint(collective_bytes(ir, op)));
        break;
    case TP_OP_COUNT:
        break;
    }

    if (op->module)
        set(o, "module", jstr(w, op->module->fqn));
    if (op->entry && op->entry->pattern)
        set(o, "entry", jstr(w, op->entry->pattern));
    if (op->implicit)
        set(o, "implicit", json_true());
    return o;
}

static json_t *ranks_json(writer *w)
{
    const tp_ir *ir = w->ir;
    json_t *a = jarr();
    for (int64_t r = 0; r < ir->world && !w->failed; r++) {
        json_t *o = jobj();
        set(o, "rank", jint(r));
        set(o, "weights", weights_json(w, r));
        json_t *ops = jarr();
        for (int i = 0; i < ir->nops; i++)
            if (!ir->ops[i].dead)
                push(ops, op_json(w, &ir->ops[i], i, r));
        set(o, "ops", ops);
        push(a, o);
    }
    return a;
}

static json_t *document(writer *w)
{
    const tp_ir *ir = w->ir;
    const tp_schedule_meta *m = w->meta;
    char hash[17];
    snprintf(hash, sizeof hash, "%016" PRIx64, m->input_hash);
    json_t *d = jobj();
    set(d, "magic", jstr(w, TP_SCHEDULE_MAGIC));
    set(d, "format_version", jint(TP_SCHEDULE_VERSION));
    set(d, "producer", jstr(w, m->producer ? m->producer : "tpcc"));
    set(d, "input_hash", jstr(w, hash));
    set(d, "plan", m->plan_path ? jstr(w, m->plan_path) : json_null());
    set(d, "world_size", jint(ir->world));
    set(d, "dtype", jstr(w, tp_dtype_name(m->dtype)));
    set(d, "config", config_json(w));
    set(d, "arena_bytes", jint(ir->arena_bytes));
    set(d, "inputs", io_json(w));
    set(d, "outputs", outputs_json(w));
    set(d, "buffers", buffers_json(w));
    set(d, "ranks", ranks_json(w));
    return d;
}

/* ---- layout: one buffer, weight and op per line ---- */

/* The shortest decimal that reads back as exactly x (1e-06, not
 * 9.9999999999999995e-07), always with a '.' or an exponent so it stays a
 * JSON real. */
static void append_real(tp_buf *out, double x)
{
    char text[40];
    if (x == floor(x) && fabs(x) < 1e15) {   /* 500000.0, not 5e+05 */
        snprintf(text, sizeof text, "%.1f", x);
        for (char *c = text; *c; c++)
            if (*c == ',')
                *c = '.';
        tp_buf_append(out, text);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, x);
        for (char *c = text; *c; c++)
            if (*c == ',')
                *c = '.';   /* a locale with a decimal comma */
        if (strtod(text, NULL) == x)
            break;
    }
    tp_buf_append(out, text);
    if (!strpbrk(text, ".e"))
        tp_buf_append(out, ".0");
}

/* A JSON string literal. s is valid UTF-8 (jansson checked it when the
 * tree was built), so only quotes, backslashes and control characters
 * need escaping; this is jansson's own escaping, without a malloc per
 * string. */
static void append_string(tp_buf *out, const char *s)
{
    tp_buf_append_char(out, '"', 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        tp_buf_append_n(out, run, (size_t)(s - run));
        run = s + 1;
        switch (c) {
        case '"': tp_buf_append(out, "\\\""); break;
        case '\\': tp_buf_append(out, "\\\\"); break;
        case '\b': tp_buf_append(out, "\\b"); break;
        case '\f': tp_buf_append(out, "\\f"); break;
        case '\n': tp_buf_append(out, "\\n"); break;
        case '\r': tp_buf_append(out, "\\r"); break;
        case '\t': tp_buf_append(out, "\\t"); break;
        default: tp_buf_appendf(out, "\\u%04X", c); break;
        }
    }
    tp_buf_append_n(out, run, (size_t)(s - run));
    tp_buf_append_char(out, '"', 1);
}

/* One line of JSON: ", " and ": " separators, keys in insertion order. */
static void append_compact(tp_buf *out, const json_t *v)
{
    size_t i, n;
    const char *key;
    const json_t *e;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        tp_buf_append(out, "{");
        i = 0;
        json_object_foreach((json_t *)v, key, e) {
            if (i++)
                tp_buf_append(out, ", ");
            append_string(out, key);
            tp_buf_append(out, ": ");
            append_compact(out, e);
        }
        tp_buf_append(out, "}");
        break;
    case JSON_ARRAY:
        tp_buf_append(out, "[");
        n = json_array_size(v);
        for (i = 0; i < n; i++) {
            if (i)
                tp_buf_append(out, ", ");
            append_compact(out, json_array_get(v, i));
        }
        tp_buf_append(out, "]");
        break;
    case JSON_INTEGER:
        tp_buf_appendf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        append_real(out, json_real_value(v));
        break;
    case JSON_TRUE: tp_buf_append(out, "true"); break;
    case JSON_FALSE: tp_buf_append(out, "false"); break;
    case JSON_NULL: tp_buf_append(out, "null"); break;
    case JSON_STRING:
        append_string(out, json_string_value(v));
        break;
    }
}

/* Arrays of objects are spread one element per line; so is the root and
 * any object holding such an array (a rank). Everything else is one line. */
static bool spreads(const json_t *v, int depth)
{
    if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return false;
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
            if (!json_is_object(e))
                return false;
        return true;
    }
    if (!json_is_object(v))
        return false;
    if (depth == 0)
        return true;
    const char *key;
    const json_t *e;
    json_object_foreach((json_t *)v, key, e)
        if (json_is_array(e) && spreads(e, depth + 1))
            return true;
    return false;
}

static void layout(tp_buf *out, const json_t *v, int depth)
{
    if (!spreads(v, depth)) {
        append_compact(out, v);
        return;
    }
    bool obj = json_is_object(v);
    tp_buf_append(out, obj ? "{\n" : "[\n");
    size_t n = obj ? json_object_size(v) : json_array_size(v), i = 0;
    if (obj) {
        const char *key;
        const json_t *e;
        json_object_foreach((json_t *)v, key, e) {
            tp_buf_append_char(out, ' ', 2 * (size_t)(depth + 1));
            append_string(out, key);
            tp_buf_append(out, ": ");
            layout(out, e, depth + 1);
            tp_buf_append(out, ++i < n ? ",\n" : "\n");
        }
    } else {
        const json_t *e;
        json_array_foreach(v, i, e) {
            tp_buf_append_char(out, ' ', 2 * (size_t)(depth + 1));
            layout(out, e, depth + 1);
            tp_buf_append(out, i + 1 < n ? ",\n" : "\n");
        }
    }
    tp_buf_append_char(out, ' ', 2 * (size_t)depth);
    tp_buf_append(out, obj ? "}" : "]");
}

/* ---- writing ---- */

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Make the rename itself durable; best effort (some file systems refuse
 * to sync a directory, and the file is complete either way). */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? tp_xstrndup(path, slash == path ? 1 : (size_t)(slash - path)) : tp_xstrdup(".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        (void)close(fd);
    }
    free(dir);
}

static int write_atomic(const char *path, const char *data, size_t len, char *err, size_t errlen)
{
    char *tmp = tp_xasprintf("%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        set_err(err, errlen, "cannot write '%s': cannot create a temporary file next to it: %s", path,
                strerror(errno));
        free(tmp);
        return -1;
    }
    mode_t mask = umask(0);   /* a new file gets the usual 0666 & ~umask, not mkstemp's 0600 */
    umask(mask);
    const char *failed = NULL;
    if (fchmod(fd, 0666 & ~mask) != 0)
        failed = "set the mode of";
    else if (write_all(fd, data, len) != 0)
        failed = "write";
    else if (fsync(fd) != 0)
        failed = "sync";
    int saved = errno;
    if (close(fd) != 0 && !failed) {
        failed = "write";
        saved = errno;
    }
    if (!failed && rename(tmp, path) != 0) {
        set_err(err, errlen, "cannot write '%s': cannot replace it: %s", path, strerror(errno));
        (void)unlink(tmp);
        free(tmp);
        return -1;
    }
    if (failed) {
        set_err(err, errlen, "cannot write '%s': cannot %s the temporary file %s: %s", path, failed, tmp,
                strerror(saved));
        (void)unlink(tmp);   /* best effort: the error above is what matters */
        free(tmp);
        return -1;
    }
    free(tmp);
    sync_dir(path);
    return 0;
}

int tp_schedule_write(const tp_ir *ir, const tp_schedule_meta *meta, const char *path, char *err, size_t errlen)
{
    if (!ir || !meta || !path || !path[0]) {
        set_err(err, errlen, "cannot write a schedule: %s", !path || !path[0] ? "no output path" : "no program");
        return -1;
    }
    writer w = {ir, meta, err, errlen, false};
    check_ir(&w);
    if (w.failed)
        return -1;
    json_t *doc = document(&w);
    if (w.failed) {
        json_decref(doc);
        return -1;
    }
    tp_buf text;
    tp_buf_init(&text);
    layout(&text, doc, 0);
    tp_buf_append(&text, "\n");
    json_decref(doc);
    int rc = write_atomic(path, text.data, text.len, err, errlen);
    tp_buf_free(&text);
    return rc;
}
