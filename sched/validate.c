/* sched/validate.c: see validate.h. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include "sched/validate.h"
#include "util/errmsg.h"

typedef struct checker {
    const tr_schedule *s;
    const char *path;
    char *err;
    size_t errlen;
} checker;

static int fail(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(checker *c, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tp_error(c->err, c->errlen, "%s: %s; the schedule was not written by this tpcc or was edited: compile it "
                    "again with tpcc PLAN -o FILE.sched", c->path, msg);
}

/* "rank 0 op 12 (rmsnorm)" */
static const char *op_name(const checker *c, int i, char *buf, size_t len)
{
    snprintf(buf, len, "rank %d op %d (%s)", c->s->rank, i, tp_op_names[c->s->ops[i].kind]);
    return buf;
}

int64_t tr_schedule_token_vocab(const tr_schedule *s)
{
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].kind == TP_OP_EMBEDDING && s->ops[i].in[0] == s->input_ids)
            return s->weights[s->ops[i].weight].logical[0];
    return INT32_MAX;
}

/* ---- buffers ------------------------------------------------------------ */

/* Every buffer in the arena at an offset its element type can be read at
 * (the kernels index float * and int32_t *). */
static int check_alignment(checker *c)
{
    for (int b = 0; b < c->s->nbufs; b++) {
        const tr_buf *t = &c->s->bufs[b];
        size_t size = tp_dtype_size(t->dtype);
        if (t->offset >= 0 && t->offset % (int64_t)size)
            return fail(c, "buffer %d ('%s') is at arena offset %lld, not a multiple of its %s element's %zu bytes", b,
                        t->name, (long long)t->offset, tp_dtype_name(t->dtype), size);
    }
    return 0;
}

/* A buffer tprun itself writes or reads (inputs, outputs) needs a place
 * in the arena, whatever the ops do with it. */
static int check_placed(checker *c, int b, const char *what)
{
    if (b >= 0 && c->s->bufs[b].offset < 0)
        return fail(c, "the %s are buffer %d, which has no place in the arena", what, b);
    return 0;
}

static int check_io(checker *c)
{
    const tr_schedule *s = c->s;
    if (check_placed(c, s->input_ids, "input ids") || check_placed(c, s->labels, "labels") ||
        check_placed(c, s->segments, "segments") ||
        check_placed(c, s->loss, "loss") || check_placed(c, s->logits, "logits"))
        return -1;
    /* tprun reads the loss into one float */
    if (s->loss >= 0 && (s->bufs[s->loss].dtype == TP_I32 || tr_buf_elems(&s->bufs[s->loss]) != 1))
        return fail(c, "the loss is buffer %d, which is not one float", s->loss);
    for (int w = 0; s->grads && w < s->nweights; w++)
        if (check_placed(c, s->grads[w], "grads"))
            return -1;
    return 0;
}

/* ---- operands ----------------------------------------------------------- */

/* Does operand `in` of op (-1 - o: its output o) hold f32 whatever the
 * schedule's dtype? The loss and its per-token pieces do
 * (runtime/backends/backend.h), and attention's log-sum-exp: the f32
 * column of sched/ops.def. */
static bool holds_f32(const tr_schedule *s, const tr_op *op, int in)
{
    unsigned f32 = tp_ops[op->kind].f32;
    if (f32 & TP_F32_LIKE_IN0 && s->bufs[op->in[0]].dtype == TP_F32)
        return true;
    return f32 & (in < 0 ? TP_F32_OUT_AT(-1 - in) : TP_F32_IN(in));
}

/* A float operand holds the element type its kernel reads or writes: the
 * schedule's (the backend's), or f32 for the loss's pieces. */
static int check_float_dtype(checker *c, int i, int in, int b)
{
    const tr_op *op = &c->s->ops[i];
    const tr_buf *t = &c->s->bufs[b];
    tp_dtype want = holds_f32(c->s, op, in) ? TP_F32 : c->s->dtype;
    if (t->dtype == TP_I32 || t->dtype == want)
        return 0;
    char name[64];
    return fail(c, "%s: buffer %d ('%s') holds %s; its kernel %s %s there", op_name(c, i, name, sizeof name), b,
                t->name, tp_dtype_name(t->dtype), in < 0 ? "writes" : "reads", tp_dtype_name(want));
}

/* Kinds whose kernels read each element (or row, or pair) before writing
 * it, so that out may be exactly an input: IN_PLACE in the place column of
 * sched/ops.def. Every other kind needs an output apart from its inputs. */
static bool works_in_place(tp_op_kind k) { return tp_ops[k].in_place; }

static bool overlap(const tr_buf *a, const tr_buf *b)
{
    return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

static bool same_place(const tr_buf *a, const tr_buf *b) { return a->offset == b->offset && a->bytes == b->bytes; }

/* The buffers op writes, into outs: its output, or those of a kind with
 * several that it computes (the loader has checked there is one). */
static int written(const tr_op *op, int outs[TP_MAX_OUTS])
{
    int n = 0;
    for (int o = 0; o < tp_ops[op->kind].nout; o++)
        if (op->outs[o] >= 0)
            outs[n++] = op->outs[o];
    return n;
}

/* Does op write over buffer t? */
static bool writes_over(const tr_schedule *s, const tr_op *op, const tr_buf *t)
{
    int outs[TP_MAX_OUTS], n = written(op, outs);
    for (int o = 0; o < n; o++)
        if (overlap(&s->bufs[outs[o]], t))
            return true;
    return false;
}

/* An output apart from the op's inputs (or exactly one of them, for a kind
 * that works in place) and from its other outputs. */
static int check_overlap(checker *c, int i)
{
    const tr_op *op = &c->s->ops[i];
    int outs[TP_MAX_OUTS], n = written(op, outs);
    char name[64];
    for (int o = 0; o < n; o++) {
        const tr_buf *out = &c->s->bufs[outs[o]];
        for (int k = 0; k < op->nin; k++) {
            const tr_buf *in = &c->s->bufs[op->in[k]];
            if (!overlap(out, in) || (works_in_place(op->kind) && same_place(out, in)))
                continue;
            return fail(c, "%s: its output, buffer %d at [%lld, %lld), overlaps in[%d], buffer %d at [%lld, %lld): "
                        "its kernel %s", op_name(c, i, name, sizeof name), outs[o], (long long)out->offset,
                        (long long)(out->offset + out->bytes), k, op->in[k], (long long)in->offset,
                        (long long)(in->offset + in->bytes),
                        works_in_place(op->kind) ? "works in place only on the same buffer" : "needs them apart");
        }
        const int gathered[2] = {op->weight_buf, op->bias_buf};   /* FSDP's weights, read throughout */
        for (int k = 0; k < 2; k++)
            if (gathered[k] >= 0 && overlap(out, &c->s->bufs[gathered[k]]))
                return fail(c, "%s: its output, buffer %d, overlaps buffer %d, which holds the %s it reads",
                            op_name(c, i, name, sizeof name), outs[o], gathered[k], k ? "bias" : "weight");
        for (int p = 0; p < o; p++)
            if (overlap(out, &c->s->bufs[outs[p]]))
                return fail(c, "%s: its outputs, buffers %d and %d, overlap", op_name(c, i, name, sizeof name),
                            outs[p], outs[o]);
    }
    return 0;
}

/* ---- ids ------------------------------------------------------------------ */

/* The int32 values buffer b holds when op i reads it: [0, *hi), ids or
 * labels tprun wrote before the step (and checked against the token
 * vocabulary), or positions a positions op wrote, with no op writing over
 * them in between. -1 when nothing trustworthy is there. */
static int id_range(checker *c, int i, int b, int64_t *hi)
{
    const tr_schedule *s = c->s;
    const tr_buf *t = &s->bufs[b];
    char name[64], other[64];
    for (int j = i - 1; j >= 0; j--) {
        const tr_op *w = &s->ops[j];
        if (!writes_over(s, w, t))
            continue;
        if (w->out == b && w->kind == TP_OP_POSITIONS) {
            const tr_buf *pos = &s->bufs[b];
            *hi = w->pos_offset + (pos->rank ? pos->shape[pos->rank - 1] : 1);
            return 0;
        }
        return fail(c, "%s reads ids from buffer %d ('%s'), but %s writes over them first",
                    op_name(c, i, name, sizeof name), b, t->name, op_name(c, j, other, sizeof other));
    }
    /* tprun writes the labels only for a schedule that computes a loss */
    if (b == s->input_ids || (b == s->labels && s->loss >= 0)) {
        *hi = tr_schedule_token_vocab(s);
        return 0;
    }
    if (b == s->segments) {   /* documents of a row number below its length */
        *hi = t->shape[t->rank - 1];
        return 0;
    }
    return fail(c, "%s reads ids from buffer %d ('%s'), which neither tprun (input ids, labels of a loss) nor an "
                "earlier positions op writes", op_name(c, i, name, sizeof name), b, t->name);
}

/* The input a rotation reads its positions from (sched/ops.def), or -1. */
static int rope_positions_in(tp_op_kind k)
{
    switch (k) {
    case TP_OP_ROPE: return 1;
    case TP_OP_ROPE_ATTENTION: return 4;
    case TP_OP_ROPE_ATTENTION_GRAD: return 7;
    default: return -1;
    }
}

/* The ids an op indexes with stay within what it indexes: an unmasked
 * lookup (or its gradient) within the table's rows, a loss's labels within
 * its real columns. Masked lookups and the vocab-parallel pieces skip ids
 * outside their range, and -100 is skipped everywhere. */
static int check_ids(checker *c, int i)
{
    const tr_op *op = &c->s->ops[i];
    const tp_op_def *d = &tp_ops[op->kind];
    char name[64];
    for (int k = 0; k < op->nin; k++) {
        if (!(d->ids >> k & 1) || (op->kind == TP_OP_POSITIONS && k == 0))   /* it reads their shape only */
            continue;
        /* the segments hold -1 for padding, which no table has a row for */
        if (k == rope_positions_in(op->kind) && op->in[k] == c->s->segments)
            return fail(c, "%s reads the segments input as its positions; they come from a positions op",
                        op_name(c, i, name, sizeof name));
        int64_t hi;
        if (id_range(c, i, op->in[k], &hi))
            return -1;
        /* a rotation looks its positions up in a table of pos_offset + seq */
        const int64_t seq = c->s->bufs[op->in[0]].shape[1];
        if (k == rope_positions_in(op->kind) && hi > op->pos_offset + seq)
            return fail(c, "%s: its positions reach %lld, past the %lld its table covers",
                        op_name(c, i, name, sizeof name), (long long)hi - 1, (long long)(op->pos_offset + seq));
        bool lookup = op->kind == TP_OP_EMBEDDING || op->kind == TP_OP_EMBEDDING_GRAD;
        if (lookup && !op->masked && (op->vocab_start != 0 || op->vocab_local < hi))
            return fail(c, "%s: an unmasked lookup of rows [%lld, %lld) reads ids up to %lld", op_name(c, i, name,
                        sizeof name), (long long)op->vocab_start, (long long)(op->vocab_start + op->vocab_local),
                        (long long)hi - 1);
        bool loss = op->kind == TP_OP_CROSS_ENTROPY || op->kind == TP_OP_CROSS_ENTROPY_GRAD;
        if (loss && (op->vocab_logical < 1 || op->vocab_logical < hi))
            return fail(c, "%s: vocab_logical %lld does not cover the labels tprun accepts, [0, %lld)",
                        op_name(c, i, name, sizeof name), (long long)op->vocab_logical, (long long)hi);
    }
    return 0;
}

/* ---- collectives ---------------------------------------------------------- */

/* `whole` is `part` with dimension dim `world` times longer: the blocks
 * the communicator moves join and split along dim. */
static bool blocks_of(const tr_buf *whole, const tr_buf *part, int dim, int world)
{
    if (whole->rank != part->rank || dim >= whole->rank)
        return false;
    for (int d = 0; d < whole->rank; d++)
        if (whole->shape[d] != part->shape[d] * (d == dim ? world : 1))
            return false;
    return true;
}

static int check_collective(checker *c, int i)
{
    const tr_schedule *s = c->s;
    const tr_op *op = &s->ops[i];
    const tr_buf *in = &s->bufs[op->in[0]], *out = &s->bufs[op->out];
    bool ok = true;
    if (op->kind == TP_OP_ALL_GATHER)
        ok = blocks_of(out, in, op->dim, s->world);
    else if (op->kind == TP_OP_REDUCE_SCATTER)
        ok = blocks_of(in, out, op->dim, s->world);
    else if (op->kind == TP_OP_ALL_TO_ALL)
        ok = op->dim < out->rank && op->dim2 < in->rank && in->shape[op->dim2] % s->world == 0 &&
             out->shape[op->dim] % s->world == 0;
    if (ok)
        return 0;
    char name[64];
    return fail(c, "%s: buffers %d and %d are not %d blocks along dim %d",
                op_name(c, i, name, sizeof name), op->in[0], op->out, s->world, op->dim);
}

/* ---- the pass ------------------------------------------------------------- */

/* BLAS takes int sizes. */
static int check_blas_sizes(checker *c, int i)
{
    const tr_op *op = &c->s->ops[i];
    bool product = op->kind == TP_OP_MATMUL || op->kind == TP_OP_CONV1D || op->kind == TP_OP_MATMUL_TN;
    if (!product || (op->m <= INT32_MAX && op->n <= INT32_MAX && op->k <= INT32_MAX))
        return 0;
    char name[64];
    return fail(c, "%s: m, n and k must each be below 2^31 (BLAS sizes)", op_name(c, i, name, sizeof name));
}

static int check_op(checker *c, int i)
{
    const tr_op *op = &c->s->ops[i];
    for (int k = 0; k < op->nin; k++)
        if (check_float_dtype(c, i, k, op->in[k]))
            return -1;
    for (int o = 0; o < tp_ops[op->kind].nout; o++)
        if (op->outs[o] >= 0 && check_float_dtype(c, i, -1 - o, op->outs[o]))
            return -1;
    if (check_overlap(c, i) || check_ids(c, i) || check_blas_sizes(c, i))
        return -1;
    /* a data-parallel collective's sizes are the loader's (check_dp_scattered) */
    return tp_op_is_collective(op->kind) && !tp_op_is_dp_collective(op->kind) ? check_collective(c, i) : 0;
}

int tr_schedule_validate(const tr_schedule *s, const char *path, char *err, size_t errlen)
{
    checker c = {s, path, err, errlen};
    if (check_alignment(&c) || check_io(&c))
        return -1;
    for (int i = 0; i < s->nops; i++)
        if (check_op(&c, i))
            return -1;
    return 0;
}
