/* write.c: a program as a versioned JSON schedule.
 *
 * The text is emitted directly into one growing buffer, with one buffer,
 * one weight and one op per line (keys in a fixed order, each real as the
 * shortest decimal that reads back exactly, strings checked to be UTF-8
 * as jansson checks them and escaped as jansson escapes them), so
 * identical inputs give byte-identical files and a diff of two schedules
 * reads op by op. The format is in docs/schedule.md. No JSON tree is
 * built: a program of a few thousand ops on 8 ranks would be hundreds of
 * thousands of jansson nodes, and allocating and freeing them dominated
 * the compile.
 *
 * The file is written atomically (atomic_write.c): any failure leaves
 * whatever was at the destination untouched. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/atomic_write.h"
#include "sched/layout.h"
#include "sched/memplan.h"
#include "sched/write.h"
#include "sched/format.h"
#include "sched/train_settings.h"
#include "util/xalloc.h"
#include "util/errmsg.h"

/* The text being built: like tp_buf, but with the room check inline and
 * no NUL kept after every append. */
typedef struct outbuf {
    char *data;
    size_t len, cap;
} outbuf;

/* A few recently formatted reals (eps and theta repeat on every layer and
 * rank), keyed by their bits. */
typedef struct real_memo {
    uint64_t bits;
    size_t len;             /* 0: empty slot */
    char text[TP_REAL_TEXT_MAX];
} real_memo;

#define REAL_MEMO 4

typedef struct writer {
    const tp_ir *ir;
    const tp_schedule_meta *meta;
    char *err;
    size_t errlen;
    bool failed;            /* the first error is kept in err */
    outbuf out;
    real_memo reals[REAL_MEMO];
    int next_real;
    struct span *rec;       /* the item being recorded (rank 0), or NULL */
    bool replay_ok;         /* every recorded item has at most one rank-dependent field */
} writer;

/* Where rank 0's text of one weight or op lies in the output, and its one
 * rank-dependent integer (rank * mul), if any, at [hole, hole + hole_len)
 * within it. Every other byte of the item is the same on every rank, so
 * ranks 1.. are written by copying rank 0's text around a new integer. */
typedef struct span {
    size_t at, len;
    size_t hole, hole_len;  /* hole == NO_HOLE: no rank-dependent field */
    int64_t div, mul;       /* the field is (rank / div) * mul */
} span;

#define NO_HOLE SIZE_MAX

static void fail(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(writer *w, const char *fmt, ...)
{
    if (w->failed)
        return;
    w->failed = true;
    va_list ap;
    va_start(ap, fmt);
    tp_verror(w->err, w->errlen, fmt, ap);
    va_end(ap);
}

/* ---- the output buffer ---- */

static void out_grow(outbuf *o, size_t extra)
{
    if (extra > SIZE_MAX - o->len)
        tp_out_of_memory();
    size_t need = o->len + extra;
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    o->data = tp_xrealloc(o->data, cap);
    o->cap = cap;
}

/* Room for n more bytes; returns where they go. */
static inline char *out_room(outbuf *o, size_t n)
{
    if (o->cap - o->len < n)
        out_grow(o, n);
    return o->data + o->len;
}

static inline void put_n(writer *w, const char *s, size_t n)
{
    memcpy(out_room(&w->out, n), s, n);
    w->out.len += n;
}

/* A string literal in the source: its length is known at compile time. */
#define PUT(w, lit) put_n((w), "" lit, sizeof(lit) - 1)

/* As "%lld" (jansson's JSON_INTEGER_FORMAT). */
static void put_int(writer *w, int64_t v)
{
    char tmp[24];
    char *end = tmp + sizeof tmp, *p = end;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    put_n(w, p, (size_t)(end - p));
}

static void put_ints(writer *w, const int64_t *v, int n)
{
    PUT(w, "[");
    for (int d = 0; d < n; d++) {
        if (d)
            PUT(w, ", ");
        put_int(w, v[d]);
    }
    PUT(w, "]");
}

static void put_bool(writer *w, bool v)
{
    if (v)
        PUT(w, "true");
    else
        PUT(w, "false");
}

/* The one field of a weight or op that differs between ranks:
 * (rank / div) * mul, div consecutive ranks sharing a value. While rank 0
 * is recorded, notes where it is. */
static void put_ranked_div(writer *w, int64_t rank, int64_t div, int64_t mul)
{
    span *s = w->rec;
    size_t before = w->out.len;
    put_int(w, rank / div * mul);
    if (!s)
        return;
    if (s->hole != NO_HOLE)
        w->replay_ok = false;   /* a second one: write every rank in full */
    s->hole = before - s->at;
    s->hole_len = w->out.len - before;
    s->div = div;
    s->mul = mul;
}

static void put_ranked(writer *w, int64_t rank, int64_t mul) { put_ranked_div(w, rank, 1, mul); }

/* ---- strings ---- */

/* jansson's UTF-8 check (utf.c, utf8_check_string), which json_string
 * applies to every value and json_object_set to every key: no stray
 * continuation bytes, no overlong forms, no surrogates, nothing above
 * U+10FFFF, no truncated sequence. */
static bool utf8_valid(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char u = s[i];
        size_t count;
        int32_t value;
        if (u < 0x80)
            continue;
        if (u >= 0xC2 && u <= 0xDF) {
            count = 2;
            value = u & 0x1F;
        } else if (u >= 0xE0 && u <= 0xEF) {
            count = 3;
            value = u & 0xF;
        } else if (u >= 0xF0 && u <= 0xF4) {
            count = 4;
            value = u & 0x7;
        } else {
            return false;   /* a continuation byte, 0xC0, 0xC1 or >= 0xF5 */
        }
        if (count > len - i)
            return false;
        for (size_t k = 1; k < count; k++) {
            u = s[i + k];
            if (u < 0x80 || u > 0xBF)
                return false;
            value = (value << 6) + (u & 0x3F);
        }
        if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF))
            return false;
        if ((count == 2 && value < 0x80) || (count == 3 && value < 0x800) || (count == 4 && value < 0x10000))
            return false;
        i += count - 1;
    }
    return true;
}

/* A JSON string literal of s, which is valid UTF-8: only quotes,
 * backslashes and control characters need escaping; this is jansson's
 * own escaping. */
static void put_escaped(writer *w, const char *s, size_t len)
{
    PUT(w, "\"");
    const char *run = s, *end = s + len;
    for (; s < end; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put_n(w, run, (size_t)(s - run));
        run = s + 1;
        switch (c) {
        case '"': PUT(w, "\\\""); break;
        case '\\': PUT(w, "\\\\"); break;
        case '\b': PUT(w, "\\b"); break;
        case '\f': PUT(w, "\\f"); break;
        case '\n': PUT(w, "\\n"); break;
        case '\r': PUT(w, "\\r"); break;
        case '\t': PUT(w, "\\t"); break;
        default: {
            static const char hex[] = "0123456789ABCDEF";
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put_n(w, u, sizeof u);
            break;
        }
        }
    }
    put_n(w, run, (size_t)(s - run));
    PUT(w, "\"");
}

/* A string value (NULL stands for ""). One that is not valid UTF-8 is an
 * error, reported with the string, and written as null. */
static void put_str(writer *w, const char *s)
{
    if (!s)
        s = "";
    /* Plain printable ASCII, the usual case: valid, nothing to escape. */
    const unsigned char *p = (const unsigned char *)s;
    while (*p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
        p++;
    size_t len = (size_t)(p - (const unsigned char *)s);
    if (!*p) {
        char *d = out_room(&w->out, len + 2);
        d[0] = '"';
        memcpy(d + 1, s, len);
        d[len + 1] = '"';
        w->out.len += len + 2;
        return;
    }
    len += strlen((const char *)p);
    if (!utf8_valid((const unsigned char *)s, len)) {
        fail(w, "cannot record '%s' in the schedule: it is not valid UTF-8", s);
        PUT(w, "null");
        return;
    }
    put_escaped(w, s, len);
}

/* ---- reals ---- */

/* A finite real, formatted once for a run of the same few values. */
static void put_finite_real(writer *w, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    for (int i = 0; i < REAL_MEMO; i++)
        if (w->reals[i].len && w->reals[i].bits == bits) {
            put_n(w, w->reals[i].text, w->reals[i].len);
            return;
        }
    real_memo *m = &w->reals[w->next_real];
    w->next_real = (w->next_real + 1) % REAL_MEMO;
    m->bits = bits;
    m->len = tp_format_real(x, m->text);
    put_n(w, m->text, m->len);
}

/* A real field of op `op`; a non-finite value is an error (written as null). */
static void put_real(writer *w, double x, const char *what, int op)
{
    if (!isfinite(x)) {
        fail(w, "op %d: %s is %g; the schedule records finite numbers only", op, what, x);
        PUT(w, "null");
        return;
    }
    put_finite_real(w, x);
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

/* Columns of the logits that are real vocabulary: from the op that
 * consumes them, else the rows of the checkpoint weight that produced
 * them, followed back through the layout changes (a gathered lm_head
 * output) and in-place ops (its bias), else what the checker knew of the
 * tensor the model returned (logits computed by an elementwise op). */
static int64_t logits_vocab(const tp_ir *ir)
{
    int lr = root_of(ir, ir->logits_buf);
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (!op->dead && (op->kind == TP_OP_CROSS_ENTROPY || op->kind == TP_OP_CE_MAX) && op->nin > 0 &&
            root_of(ir, op->in[0]) == lr && op->vocab_logical > 0)
            return op->vocab_logical;
    }
    for (int i = ir->nops - 1; i >= 0; i--) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead || op->out < 0 || root_of(ir, op->out) != lr)
            continue;
        if (op->weight >= 0)
            return ir->params[op->weight].logical[0];
        bool in_place = op->nin > 0 && root_of(ir, op->in[0]) == lr;
        bool moved = op->nin > 0 && (tp_op_is_collective(op->kind) || op->kind == TP_OP_SLICE || op->kind == TP_OP_SCALE);
        if (!in_place && !moved)
            break;
        lr = root_of(ir, op->in[0]);
    }
    return ir->logits_vocab;
}

/* A kind with several outputs computes at least one, each into its own buffer. */
static bool outputs_distinct(const tp_ir_op *op)
{
    int nout = tp_ops[op->kind].nout, written = 0;
    for (int o = 0; o < nout; o++)
        for (int p = o + 1; p < nout && op->outs[o] >= 0; p++)
            if (op->outs[o] == op->outs[p])
                return false;
    for (int o = 0; o < nout; o++)
        written += op->outs[o] >= 0;
    return nout == 1 || written > 0;
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
        if (!outputs_distinct(op))
            fail(w, "op %d (%s) writes no buffer, or one buffer twice", i, tp_op_names[op->kind]);
        if (op->weight < -1 || op->weight >= ir->nparams || op->bias < -1 || op->bias >= ir->nparams)
            fail(w, "op %d (%s) names parameter %d, outside the %d parameters", i, tp_op_names[op->kind],
                 op->weight >= ir->nparams || op->weight < -1 ? op->weight : op->bias, ir->nparams);
        if (op->weight_from < 0 || op->weight_from > ir->nbufs || op->bias_from < 0 || op->bias_from > ir->nbufs ||
            (op->weight_from && op->weight < 0) || (op->bias_from && op->bias < 0))
            fail(w, "op %d (%s) reads a gathered weight from no buffer, or for no weight", i, tp_op_names[op->kind]);
    }
    for (int p = 0; p < ir->nparams; p++) {
        const tp_ir_param *ip = &ir->params[p];
        if (!ip->name || ip->rank < 1 || ip->rank > 2) {
            fail(w, "parameter %d has no checkpoint tensor of rank 1 or 2", p);
            continue;
        }
        tp_placement pl = tp_placement_norm(ip->pl, ip->rank);
        for (int d = 0; d < ip->rank; d++) {
            bool sharded = pl.kind == TP_SHARD && pl.dim == d;
            int64_t want = sharded ? ip->local[d] * ir->world : ip->local[d];
            if (ip->local[d] <= 0 || want != ip->shape[d])
                fail(w, "parameter %d (%s): local size %" PRId64 " of dimension %d does not %s %" PRId64, p,
                     ip->name, ip->local[d], d, sharded ? "split evenly into" : "equal", ip->shape[d]);
        }
        int64_t packed = 0;
        for (int k = 0; k < ip->nsegments; k++)
            packed += ip->segments[k] % ir->world ? -ip->shape[0] : ip->segments[k];
        if (ip->nsegments && (ip->nsegments > TP_MAX_SEGMENTS || pl.kind != TP_SHARD || pl.dim != 0 ||
                              packed != ip->shape[0]))
            fail(w, "parameter %d (%s): its %d packed segments are not an even split of its rows", p, ip->name,
                 ip->nsegments);
        if (pl.kind != TP_REPLICATE && !(pl.kind == TP_SHARD && pl.dim >= 0 && pl.dim < ip->rank)) {
            char buf[24];
            fail(w, "parameter %d (%s) is %s; a weight is replicated or sharded", p, ip->name,
                 tp_placement_str(pl, buf, sizeof buf));
        }
    }
    int ninputs = 0, nsegments = 0;
    for (int b = 0; b < ir->nbufs; b++) {
        ninputs += ir->bufs[b].input && !ir->bufs[b].segments;
        nsegments += ir->bufs[b].segments;
        if (ir->bufs[b].segments && (!ir->bufs[b].input || ir->bufs[b].dtype != TP_I32))
            fail(w, "buffer %d (%s) holds segments but is not an i32 input", b, ir->bufs[b].name);
    }
    if (ninputs > 2 || nsegments > 1)
        fail(w, "the program has %d inputs and %d of segments; a schedule has input_ids, labels and segments only",
             ninputs, nsegments);
    /* with sharded gradients, a gradient is the run of it over the replicas */
    int64_t dp = w->meta->data_parallel;
    bool runs = dp > 1 && w->meta->dp_shard >= TP_DP_SHARD_GRADIENTS;
    for (int p = 0; ir->grad_buf && p < ir->nparams; p++) {
        int b = ir->grad_buf[p];
        int64_t local = ir->params[p].local[0] * (ir->params[p].rank > 1 ? ir->params[p].local[1] : 1);
        if (runs)
            local = tp_dp_shard_elems(local, dp);
        if (b < 0 || b >= ir->nbufs || ir->bufs[b].dtype == TP_I32 || tp_ir_buf_elems(&ir->bufs[b]) != local)
            fail(w, "parameter %d (%s): its gradient is not a float buffer of its %s", p, ir->params[p].name,
                 runs ? "run over the data-parallel replicas" : "local size");
    }
    if (ir->loss_buf >= ir->nbufs || ir->logits_buf >= ir->nbufs)
        fail(w, "the loss or logits buffer is outside the %d buffers", ir->nbufs);
    else if (ir->logits_buf >= 0 && logits_vocab(ir) <= 0)
        fail(w, "the logits' vocabulary is unknown: no weight produced them and no loss reads them");
    if (!w->failed) {
        char msg[512];
        if (!tp_memplan_verify(ir, msg, sizeof msg))
            fail(w, "invalid memory plan: %s", msg);
    }
}

/* What a collective moves: its full tensor, in the dtype of its input. */
static int64_t collective_bytes(const tp_ir *ir, const tp_ir_op *op)
{
    int b = op->nin > 0 ? op->in[0] : op->out;
    size_t size = b >= 0 ? tp_dtype_size(ir->bufs[b].dtype) : 4;
    return op->elems * (int64_t)size;
}

/* The last dimension of the first input (head_dim of a [b, s, h, d] x). */
static int64_t last_dim(const tp_ir *ir, const tp_ir_op *op)
{
    const tp_ir_buf *x = op->nin > 0 ? &ir->bufs[op->in[0]] : NULL;
    return x && x->rank > 0 ? x->shape[x->rank - 1] : 0;
}

/* ---- the document ----
 *
 * The layout: the root object has one key per line, indented by two
 * spaces; "buffers" and "ranks" (arrays of objects) have one element per
 * line, indented by four; a rank holding a non-empty "weights" or "ops"
 * array has one key per line (indent six) and one weight or op per line
 * (indent eight). Everything else is one line with ", " and ": "
 * separators. Empty arrays are "[]" and empty objects "{}". */

static void put_config(writer *w)
{
    PUT(w, "{");
    for (int i = 0; i < w->meta->nconfig; i++) {
        const tp_setting *v = &w->meta->config[i];
        if (!v->name || !utf8_valid((const unsigned char *)v->name, strlen(v->name))) {
            fail(w, "configuration value %d has a name that is not UTF-8", i);
            return;
        }
        if (i)
            PUT(w, ", ");
        put_escaped(w, v->name, strlen(v->name));
        PUT(w, ": ");
        switch (v->kind) {
        case TP_SETTING_NULL: PUT(w, "null"); break;
        case TP_SETTING_BOOL: put_bool(w, v->i); break;
        case TP_SETTING_REAL: put_finite_real(w, v->real); break;
        case TP_SETTING_INT: put_int(w, v->i); break;
        case TP_SETTING_STR: put_str(w, v->str); break;
        }
    }
    PUT(w, "}");
}

static void put_io(writer *w)
{
    const tp_ir *ir = w->ir;
    int inputs[2] = {-1, -1}, n = 0, segments = -1;
    for (int b = 0; b < ir->nbufs; b++) {
        if (ir->bufs[b].segments)
            segments = b;
        else if (ir->bufs[b].input && n < 2)
            inputs[n++] = b;
    }
    PUT(w, "{\"input_ids\": ");
    if (inputs[0] >= 0)
        put_int(w, inputs[0]);
    else
        PUT(w, "null");
    PUT(w, ", \"labels\": ");
    if (inputs[1] >= 0) {
        put_int(w, inputs[1]);
        PUT(w, ", \"label_shift\": ");
        put_int(w, ir->label_shift);
    } else {
        PUT(w, "null");
    }
    if (segments >= 0) {   /* only where asked for: other schedules stay as they were */
        PUT(w, ", \"segments\": ");
        put_int(w, segments);
    }
    PUT(w, "}");
}

static void put_outputs(writer *w)
{
    const tp_ir *ir = w->ir;
    PUT(w, "{\"loss\": ");
    if (ir->loss_buf >= 0)
        put_int(w, ir->loss_buf);
    else
        PUT(w, "null");
    if (ir->grad_buf) {
        PUT(w, ", \"grads\": [");
        for (int p = 0; p < ir->nparams; p++) {
            if (p)
                PUT(w, ", ");
            put_int(w, ir->grad_buf[p]);
        }
        PUT(w, "]");
    }
    if (ir->logits_buf < 0) {
        PUT(w, ", \"logits\": null}");
        return;
    }
    char buf[24];
    PUT(w, ", \"logits\": {\"buffer\": ");
    put_int(w, ir->logits_buf);
    PUT(w, ", \"placement\": ");
    put_str(w, pl_str(ir->logits_pl, ir->bufs[ir->logits_buf].rank, buf, sizeof buf));
    PUT(w, ", \"vocab\": ");
    put_int(w, logits_vocab(ir));
    PUT(w, "}}");
}

static void put_buffers(writer *w)
{
    const tp_ir *ir = w->ir;
    if (ir->nbufs <= 0) {
        PUT(w, "[]");
        return;
    }
    PUT(w, "[\n");
    for (int b = 0; b < ir->nbufs; b++) {
        const tp_ir_buf *buf = &ir->bufs[b];
        char fallback[24];
        if (!buf->name)
            snprintf(fallback, sizeof fallback, "b%d", b);
        PUT(w, "    {\"name\": ");
        put_str(w, buf->name ? buf->name : fallback);
        PUT(w, ", \"shape\": ");
        put_ints(w, buf->shape, buf->rank);
        PUT(w, ", \"dtype\": ");
        put_str(w, tp_dtype_name(buf->dtype));
        PUT(w, ", \"offset\": ");
        if (buf->offset >= 0)
            put_int(w, buf->offset);
        else
            PUT(w, "null");
        PUT(w, ", \"bytes\": ");
        put_int(w, tp_ir_buf_elems(buf) * (int64_t)tp_dtype_size(buf->dtype));
        if (buf->alias_of >= 0) {
            PUT(w, ", \"alias_of\": ");
            put_int(w, buf->alias_of);
        }
        if (b + 1 < ir->nbufs)
            PUT(w, "},\n");
        else
            PUT(w, "}\n");
    }
    PUT(w, "  ]");
}

static void put_weight(writer *w, const tp_ir_param *ip, int64_t rank)
{
    tp_placement pl = tp_placement_norm(ip->pl, ip->rank);
    int64_t replicas = ip->replicas > 1 ? ip->replicas : 1, shape[2] = {ip->shape[0], ip->shape[1]};
    char buf[24];
    if (pl.kind == TP_SHARD)
        shape[pl.dim] /= replicas;   /* the checkpoint's extent: replicas share their slice */
    PUT(w, "{\"name\": ");
    put_str(w, ip->name);
    PUT(w, ", \"shape\": ");
    put_ints(w, shape, ip->rank);
    PUT(w, ", \"logical_shape\": ");
    put_ints(w, ip->logical, ip->rank);
    PUT(w, ", \"dtype\": ");
    put_str(w, tp_dtype_name(w->meta->dtype));
    PUT(w, ", \"placement\": ");
    put_str(w, tp_placement_str(pl, buf, sizeof buf));
    if (pl.kind == TP_SHARD && ip->nsegments) {
        PUT(w, ", \"slice\": {\"dim\": ");
        put_int(w, pl.dim);
        PUT(w, ", \"segments\": [");
        w->replay_ok = false;   /* offsets past each segment's start: write every rank in full */
        int64_t start = 0;
        for (int k = 0; k < ip->nsegments; k++) {
            int64_t length = ip->segments[k] / w->ir->world;
            if (k)
                PUT(w, ", ");
            PUT(w, "{\"offset\": ");
            put_int(w, start + rank * length);
            PUT(w, ", \"length\": ");
            put_int(w, length);
            PUT(w, "}");
            start += ip->segments[k];
        }
        PUT(w, "]}}");
    } else if (pl.kind == TP_SHARD) {
        PUT(w, ", \"slice\": {\"dim\": ");
        put_int(w, pl.dim);
        PUT(w, ", \"offset\": ");
        put_ranked_div(w, rank, replicas, ip->local[pl.dim]);
        PUT(w, ", \"length\": ");
        put_int(w, ip->local[pl.dim]);
        if (replicas > 1) {
            PUT(w, ", \"replicas\": ");
            put_int(w, replicas);
        }
        PUT(w, "}}");
    } else {
        PUT(w, ", \"slice\": null}");
    }
}

/* ", "key": value" for an integer field of an op. */
#define PUT_INT_FIELD(w, key, v) do { PUT((w), ", \"" key "\": "); put_int((w), (v)); } while (0)

/* An attention size (tp_ir_attention_size), which the op or its query
 * must give. */
static int64_t query_size(writer *w, const tp_ir_op *op, int index, int64_t v, int d)
{
    int64_t size = tp_ir_attention_size(w->ir, op, v, d);
    if (size <= 0)
        fail(w, "op %d (attention): no sizes, and the query is not a [batch, seq, heads, head_dim] buffer", index);
    return size;
}

/* Attention's kv heads: from the op, else the keys' shape [b, s, kv, d],
 * else as many as the query heads. */
static int64_t kv_heads(writer *w, const tp_ir_op *op, int index)
{
    const tp_ir *ir = w->ir;
    if (op->groups > 0)
        return op->groups;
    if (op->nin > 1 && ir->bufs[op->in[1]].rank == 4)
        return ir->bufs[op->in[1]].shape[2];
    return query_size(w, op, index, op->heads, 2);
}

/* The value of an attribute of each type (sched/ops.def). */
#define PUT_VALUE_SIZE(w, v, key, index) put_int((w), (v))
#define PUT_VALUE_COUNT PUT_VALUE_SIZE
#define PUT_VALUE_DIM PUT_VALUE_SIZE
#define PUT_VALUE_CHUNK PUT_VALUE_SIZE
#define PUT_VALUE_REAL(w, v, key, index) put_real((w), (v), (key), (index))
#define PUT_VALUE_BOOL(w, v, key, index) put_bool((w), (v))
#define PUT_VALUE_REDUCE(w, v, key, index) put_str((w), (v) ? "max" : "sum")
#define PUT_VALUE_ROPE_TYPE(w, v, key, index) put_str((w), tp_rope_type_name(v))

/* The kind's attributes, as sched/ops.def lists them: each key with the
 * value the table gives for the IR op. */
static void put_attrs(writer *w, const tp_ir_op *op, int index, int64_t rank)
{
#define ATTR(key, type, field, value) \
    PUT(w, ", \"" #key "\": ");      \
    PUT_VALUE_##type(w, value, #key, index);
#define RANKED(key, type, field, mul) \
    PUT(w, ", \"" #key "\": ");      \
    put_ranked(w, rank, mul);
#define OP(NAME, name, role, in_min, in_max, ids, out, weight, bias, place, f32, attrs, sizes, flops, kernels) \
    case TP_OP_##NAME:                                                                                         \
        attrs break;
    switch (op->kind) {
#include "sched/ops.def"
    case TP_OP_COUNT:
        break;
    }
#undef OP
#undef RANKED
#undef ATTR
}

/* ", "out": [b, null, ...]": every output of a kind with several, null
 * where one is not computed */
static void put_outs(writer *w, const tp_ir_op *op)
{
    PUT(w, ", \"out\": [");
    for (int o = 0; o < tp_ops[op->kind].nout; o++) {
        if (o)
            PUT(w, ", ");
        if (op->outs[o] >= 0)
            put_int(w, op->outs[o]);
        else
            PUT(w, "null");
    }
    PUT(w, "]");
}

static void put_op(writer *w, const tp_ir_op *op, int index, int64_t rank)
{
    PUT(w, "{\"op\": ");
    put_str(w, tp_op_names[op->kind]);
    PUT(w, ", \"in\": [");
    for (int k = 0; k < op->nin; k++) {
        if (k)
            PUT(w, ", ");
        put_int(w, op->in[k]);
    }
    PUT(w, "]");
    if (tp_ops[op->kind].nout > 1)
        put_outs(w, op);
    else if (op->out >= 0)
        PUT_INT_FIELD(w, "out", op->out);
    if (op->weight >= 0)
        PUT_INT_FIELD(w, "weight", op->weight);
    if (op->weight_from > 0)
        PUT_INT_FIELD(w, "weight_buf", op->weight_from - 1);
    if (op->bias >= 0)
        PUT_INT_FIELD(w, "bias", op->bias);
    if (op->bias_from > 0)
        PUT_INT_FIELD(w, "bias_buf", op->bias_from - 1);

    put_attrs(w, op, index, rank);

    if (op->module) {
        PUT(w, ", \"module\": ");
        put_str(w, op->module);
    }
    if (op->entry) {
        PUT(w, ", \"entry\": ");
        put_str(w, op->entry);
    }
    if (op->implicit)
        PUT(w, ", \"implicit\": true");
    if (op->recompute)
        PUT(w, ", \"recompute\": true");
    if (op->phase != TP_PHASE_FORWARD) {
        PUT(w, ", \"phase\": ");
        put_str(w, tp_phase_names[op->phase]);
    }
    PUT(w, "}");
}

/* Rank 0's item at span s (recorded), or NULL: write it plainly. */
static void begin_item(writer *w, span *s)
{
    if (s) {
        s->at = w->out.len;
        s->hole = NO_HOLE;
    }
    w->rec = s;
}

static void end_item(writer *w)
{
    if (w->rec)
        w->rec->len = w->out.len - w->rec->at;
    w->rec = NULL;
}

/* Another rank's copy of a recorded item: the same bytes, with its
 * rank-dependent integer, if any, for this rank. */
static void replay_item(writer *w, const span *s, int64_t rank)
{
    /* Room first, so the copies below read from a buffer that stays put
     * (an integer is at most 20 characters). */
    out_room(&w->out, s->len + 24);
    if (s->hole == NO_HOLE) {
        memcpy(w->out.data + w->out.len, w->out.data + s->at, s->len);
        w->out.len += s->len;
        return;
    }
    memcpy(w->out.data + w->out.len, w->out.data + s->at, s->hole);
    w->out.len += s->hole;
    put_int(w, rank / s->div * s->mul);
    size_t rest = s->hole + s->hole_len;
    memcpy(w->out.data + w->out.len, w->out.data + s->at + rest, s->len - rest);
    w->out.len += s->len - rest;
}

/* One rank: {"rank": r, "weights": [...], "ops": [...]}, spread over
 * lines unless both arrays are empty. wspan and ospan (weights, then live
 * ops) are recorded when rec, or replayed when replay; else the rank is
 * written in full. */
static void put_rank(writer *w, int64_t r, int live_ops, span *wspan, span *ospan, bool rec, bool replay)
{
    const tp_ir *ir = w->ir;
    if (ir->nparams <= 0 && live_ops == 0) {
        PUT(w, "{\"rank\": ");
        put_int(w, r);
        PUT(w, ", \"weights\": [], \"ops\": []}");
        return;
    }
    PUT(w, "{\n      \"rank\": ");
    put_int(w, r);
    PUT(w, ",\n      \"weights\": ");
    if (ir->nparams <= 0) {
        PUT(w, "[]");
    } else {
        PUT(w, "[\n");
        for (int p = 0; p < ir->nparams; p++) {
            PUT(w, "        ");
            if (replay) {
                replay_item(w, &wspan[p], r);
            } else {
                begin_item(w, rec ? &wspan[p] : NULL);
                put_weight(w, &ir->params[p], r);
                end_item(w);
            }
            if (p + 1 < ir->nparams)
                PUT(w, ",\n");
            else
                PUT(w, "\n");
        }
        PUT(w, "      ]");
    }
    PUT(w, ",\n      \"ops\": ");
    if (live_ops == 0) {
        PUT(w, "[]");
    } else {
        PUT(w, "[\n");
        int written = 0;
        for (int i = 0; i < ir->nops; i++) {
            if (ir->ops[i].dead)
                continue;
            PUT(w, "        ");
            if (replay) {
                replay_item(w, &ospan[written], r);
            } else {
                begin_item(w, rec ? &ospan[written] : NULL);
                put_op(w, &ir->ops[i], i, r);
                end_item(w);
            }
            if (++written < live_ops)
                PUT(w, ",\n");
            else
                PUT(w, "\n");
        }
        PUT(w, "      ]");
    }
    PUT(w, "\n    }");
}

/* Every rank. Ranks differ only in one integer field of some weights and
 * ops (docs/schedule.md, "Ranks"), so rank 0 is written in full and
 * recorded, and ranks 1.. copy its text around their own value of that
 * field. Nothing else in put_weight or put_op depends on the rank, and
 * neither can fail on one rank but not on another. */
static void put_ranks(writer *w)
{
    const tp_ir *ir = w->ir;
    int live_ops = 0;
    for (int i = 0; i < ir->nops; i++)
        live_ops += !ir->ops[i].dead;
    /* Like the other arrays: "[]" when no rank is written (the document
     * is discarded then anyway: world < 1 or an earlier error). */
    if (ir->world < 1 || w->failed) {
        PUT(w, "[]");
        return;
    }
    span *wspan = NULL, *ospan = NULL;
    bool rec = ir->world > 1;
    if (rec) {
        wspan = tp_xreallocarray(NULL, (size_t)ir->nparams + 1, sizeof *wspan);
        ospan = tp_xreallocarray(NULL, (size_t)live_ops + 1, sizeof *ospan);
        w->replay_ok = true;
    }
    PUT(w, "[\n");
    for (int64_t r = 0; r < ir->world && !w->failed; r++) {
        if (r)
            PUT(w, ",\n");
        PUT(w, "    ");
        put_rank(w, r, live_ops, wspan, ospan, rec && r == 0, rec && r > 0 && w->replay_ok);
    }
    PUT(w, "\n  ]");
    free(wspan);
    free(ospan);
}

/* Comma-joined names as a JSON list: "bias,norm" as ["bias", "norm"]. */
static void put_names(writer *w, const char *names)
{
    PUT(w, "[");
    size_t n;
    for (const char *at = names, *name; tp_train_names_next(&at, &name, &n);) {
        char *one = tp_xstrndup(name, n);
        if (name != names)
            PUT(w, ", ");
        put_str(w, one);
        free(one);
    }
    PUT(w, "]");
}

/* The plan's train { } settings, those it gives, under its keys. */
static void put_train(writer *w, const tp_train_values *t)
{
    PUT(w, "{");
    const char *sep = "";
    for (int i = 0; i < tp_train_nkeys; i++) {
        const tp_train_key *k = &tp_train_keys[i];
        if (!tp_train_given(t, k->field))
            continue;
        put_n(w, sep, strlen(sep));
        sep = ", ";
        put_str(w, k->name);
        PUT(w, ": ");
        double x = t->v[k->field];
        if (k->kind == TP_TK_WORD)
            put_str(w, k->words[(int)x]);
        else if (k->kind == TP_TK_BOOL)
            put_bool(w, x != 0);
        else if (k->kind == TP_TK_COUNT || k->kind == TP_TK_ID)
            put_int(w, (int64_t)x);
        else if (k->kind == TP_TK_NAMES)
            put_names(w, t->no_decay);
        else if (k->kind == TP_TK_REAL)
            put_real(w, x, k->name, -1);
        else {
            PUT(w, "[");
            put_real(w, x, k->name, -1);
            PUT(w, ", ");
            put_real(w, t->v[k->field + 1], k->name, -1);
            PUT(w, "]");
        }
    }
    PUT(w, "}");
}

static void put_document(writer *w)
{
    const tp_ir *ir = w->ir;
    const tp_schedule_meta *m = w->meta;
    char hash[17];
    snprintf(hash, sizeof hash, "%016" PRIx64, m->input_hash);
    PUT(w, "{\n  \"magic\": ");
    put_str(w, TP_SCHEDULE_MAGIC);
    PUT(w, ",\n  \"format_version\": ");
    put_int(w, TP_SCHEDULE_VERSION);
    PUT(w, ",\n  \"producer\": ");
    put_str(w, m->producer ? m->producer : "tpcc");
    PUT(w, ",\n  \"input_hash\": ");
    put_str(w, hash);
    PUT(w, ",\n  \"plan\": ");
    if (m->plan_path)
        put_str(w, m->plan_path);
    else
        PUT(w, "null");
    PUT(w, ",\n  \"world_size\": ");
    put_int(w, ir->world);
    if (m->data_parallel > 1) {
        PUT(w, ",\n  \"data_parallel\": ");
        put_int(w, m->data_parallel);
    }
    if (m->data_parallel > 1 && m->dp_shard != TP_DP_SHARD_NONE) {
        PUT(w, ",\n  \"dp_shard\": ");
        put_str(w, tp_dp_shard_names[m->dp_shard]);
    }
    if (m->train && m->train->given) {
        PUT(w, ",\n  \"train\": ");
        put_train(w, m->train);
    }
    PUT(w, ",\n  \"dtype\": ");
    put_str(w, tp_dtype_name(m->dtype));
    PUT(w, ",\n  \"config\": ");
    put_config(w);
    PUT(w, ",\n  \"arena_bytes\": ");
    put_int(w, ir->arena_bytes);
    PUT(w, ",\n  \"inputs\": ");
    put_io(w);
    PUT(w, ",\n  \"outputs\": ");
    put_outputs(w);
    PUT(w, ",\n  \"buffers\": ");
    put_buffers(w);
    PUT(w, ",\n  \"ranks\": ");
    put_ranks(w);
    PUT(w, "\n}\n");
}

int tp_schedule_write(const tp_ir *ir, const tp_schedule_meta *meta, const char *path, char *err, size_t errlen)
{
    if (!ir || !meta || !path || !path[0]) {
        tp_error(err, errlen, "cannot write a schedule: %s", !path || !path[0] ? "no output path" : "no program");
        return -1;
    }
    writer w = {.ir = ir, .meta = meta, .err = err, .errlen = errlen};
    check_ir(&w);
    if (w.failed)
        return -1;
    put_document(&w);
    int rc = w.failed ? -1 : tp_write_file_atomic(path, &(tp_bytes){w.out.data, w.out.len}, 1, err, errlen);
    free(w.out.data);
    return rc;
}
