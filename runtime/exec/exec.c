/* exec.c: see exec.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/exec/exec.h"
#include "runtime/comm/progress.h"
#include "runtime/exec/kernels_check.h"
#include "runtime/exec/limits_check.h"
#include "runtime/exec/op_view.h"
#include "runtime/io/weights.h"
#include "sched/dp_shard.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *buf_ptr(const tr_exec *x, int b) { return x->arena + x->s->bufs[b].offset; }
static float *fbuf(const tr_exec *x, int b) { return (float *)buf_ptr(x, b); }
/* Weights are stored in the backend's dtype: offsets count elements (with
 * FSDP this rank's run of each, sched/load.h's stored_offset). In a bf16
 * backend the float * is only a handle passed to its kernels. */
static float *weight(const tr_exec *x, int w)
{
    return w < 0 ? NULL
                 : (float *)(void *)(x->weights + x->s->weights[w].stored_offset * (int64_t)tp_dtype_size(x->be->dtype));
}

/* The staging a rank needs for its largest collective: TP_STAGING_BUFFERS
 * buffers (sched/workspace.h) of the largest tensor any collective
 * touches, this size each; of the data-parallel collectives only a
 * padded weight's reduce-scatter stages, its dp runs
 * (tp_dp_shard_staging_elems). The collectives below use them by role:
 * staging[0] sends, staging[1] receives an all-to-all's blocks.
 * (compiler/report/report.c counts the same.) */
_Static_assert(TP_STAGING_BUFFERS == 2, "the collectives use staging[0] and staging[1]");
static size_t largest_collective_bytes(const tr_schedule *s)
{
    size_t most = 0;
    for (int i = 0; i < s->nops; i++) {
        const tr_op *op = &s->ops[i];
        if (!tp_op_is_collective(op->kind))
            continue;
        size_t in = 0, out = 0;
        if (!tp_op_is_dp_collective(op->kind)) {
            in = (size_t)s->bufs[op->in[0]].bytes;
            out = (size_t)s->bufs[op->out].bytes;
        } else if (op->kind == TP_OP_DP_REDUCE_SCATTER) {
            in = (size_t)tp_dp_shard_staging_elems(s->weights[op->weight].local_elems, s->data_parallel) *
                 tp_dtype_size(s->bufs[op->out].dtype);
        }
        if (in > most) most = in;
        if (out > most) most = out;
    }
    return most;
}

/* Every rotating op's inv_freq table: its attributes and shapes are fixed
 * by the schedule, so it is computed here once, not at every run. Dynamic
 * scaling depends on the positions seen: pos_offset + seq. The op's
 * rotary / 2 frequencies are followed by their negations, which rotate by
 * minus each angle (cos stays, sin flips): rope's inverse, which a rope op
 * with `inverse` takes as its own, and by which rope_attention_grad
 * rotates dq and dk back. */
static double **rope_tables(const tr_schedule *s)
{
    double **tables = tp_xcalloc((size_t)s->nops + 1, sizeof *tables);
    for (int i = 0; i < s->nops; i++) {
        const tr_op *op = &s->ops[i];
        if (op->kind != TP_OP_ROPE && op->kind != TP_OP_ROPE_ATTENTION && op->kind != TP_OP_ROPE_ATTENTION_GRAD)
            continue;
        const int64_t *shape = s->bufs[op->in[0]].shape;   /* q, k or x: [batch, seq, ...] */
        const int64_t half = op->rotary_dim / 2;
        tables[i] = tp_xmalloc((size_t)(2 * half + 1) * sizeof **tables);
        tp_rope_inv_freq(&op->rope, op->theta, op->rotary_dim, op->pos_offset + shape[1], tables[i]);
        for (int64_t f = 0; f < half; f++) {
            if (op->inverse)
                tables[i][f] = -tables[i][f];
            tables[i][half + f] = -tables[i][f];
        }
    }
    return tables;
}

/* Host memory comes from calloc as untouched zero pages: write them now,
 * so the first step pays no page faults (the weights are written when
 * they are loaded). Device memory has no such first touch. */
static void prefault(tr_exec *x)
{
    if (!x->be->host_memory)
        return;
    memset(x->arena, 0, (size_t)x->s->arena_bytes + 1);
    for (int i = 0; i < TP_STAGING_BUFFERS; i++)
        memset(x->staging[i], 0, x->staging_bytes + 1);
}

int tr_exec_init(tr_exec *x, const tr_schedule *s, const tp_backend *be, tp_comm *comm, char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    x->s = s;
    x->be = be;
    x->comm = comm;
    if (s->dtype != be->dtype) {
        snprintf(err, errlen, "the %s backend computes in %s, the schedule is %s: compile it with tpcc --dtype %s%s",
                 be->name, be->dtype == TP_F32 ? "fp32" : tp_dtype_name(be->dtype), tp_dtype_name(s->dtype),
                 be->dtype == TP_F32 ? "fp32" : tp_dtype_name(be->dtype),
                 s->dtype == TP_BF16 ? " (or run it with --backend cuda)" : "");
        return -1;
    }
    if (tr_exec_check_kernels(s, be, err, errlen) || tr_exec_check_limits(s, be, err, errlen))
        return -1;
    x->staging_bytes = largest_collective_bytes(s);
    x->arena = be->alloc((size_t)s->arena_bytes + 1);
    x->weights = be->alloc((size_t)s->stored_elems * tp_dtype_size(be->dtype) + 1);
    bool staged = true;
    for (int i = 0; i < TP_STAGING_BUFFERS; i++)
        staged &= (x->staging[i] = be->alloc(x->staging_bytes + 1)) != NULL;
    x->trace = tp_xcalloc((size_t)s->nops + 1, sizeof *x->trace);
    x->rope_inv_freq = rope_tables(s);
    if (!x->arena || !x->weights || !staged) {
        snprintf(err, errlen, "cannot allocate %lld bytes of activations and %lld of weights on the %s backend",
                 (long long)s->arena_bytes, (long long)(s->stored_elems * (int64_t)tp_dtype_size(be->dtype)), be->name);
        tr_exec_free(x);
        return -1;
    }
    prefault(x);
    return 0;
}

void tr_exec_free(tr_exec *x)
{
    if (x->be) {
        x->be->release(x->arena);
        x->be->release(x->weights);
        for (int i = 0; i < TP_STAGING_BUFFERS; i++)
            x->be->release(x->staging[i]);
    }
    free(x->trace);
    for (int i = 0; x->rope_inv_freq && i < x->s->nops; i++)
        free(x->rope_inv_freq[i]);
    free(x->rope_inv_freq);
    memset(x, 0, sizeof *x);
}

/* bfloat16 is the upper half of a float32: rounding to nearest even on
 * the way in (tp_f32_to_bf16), exact on the way out. */
static float f32_of(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Host float32 -> backend memory in dtype t (n elements). */
static void upload(tr_exec *x, void *dst, const void *src, int64_t n, tp_dtype t)
{
    if (t != TP_BF16) {
        x->be->to_device(dst, src, (size_t)n * tp_dtype_size(t));
        return;
    }
    uint16_t *h = tp_xmalloc((size_t)n * sizeof *h + 1);
    for (int64_t i = 0; i < n; i++)
        h[i] = tp_f32_to_bf16(((const float *)src)[i]);
    x->be->to_device(dst, h, (size_t)n * sizeof *h);
    free(h);
}

void tr_exec_write_buf(tr_exec *x, int b, const void *src)
{
    const tr_buf *buf = &x->s->bufs[b];
    upload(x, buf_ptr(x, b), src, tr_buf_elems(buf), buf->dtype);
}

void tr_exec_download(tr_exec *x, void *dst, const void *src, int64_t n, tp_dtype t)
{
    if (t != TP_BF16) {
        x->be->to_host(dst, src, (size_t)n * tp_dtype_size(t));
        return;
    }
    uint16_t *h = tp_xmalloc((size_t)n * sizeof *h + 1);
    x->be->to_host(h, src, (size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++)
        ((float *)dst)[i] = f32_of(h[i]);
    free(h);
}

void tr_exec_read_buf(tr_exec *x, int b, void *dst)
{
    const tr_buf *buf = &x->s->bufs[b];
    tr_exec_download(x, dst, buf_ptr(x, b), tr_buf_elems(buf), buf->dtype);
}

float *tr_exec_buf(const tr_exec *x, int b) { return fbuf(x, b); }
float *tr_exec_weight(const tr_exec *x, int w) { return weight(x, w); }

void tr_exec_write_weights(tr_exec *x, const float *host)
{
    upload(x, x->weights, host, x->s->weight_elems, x->be->dtype);
}

/* ---- the ops: one exec_<name> per row of sched/ops.def ----
 *
 * The loader has checked each op's operands against its signature and its
 * sizes against its buffers, so these index without checking. */

#define EXEC(name) static int exec_##name(tr_exec *x, const tr_op *op, char *err, size_t errlen)

static const tr_buf *in_buf(const tr_exec *x, const tr_op *op, int i) { return &x->s->bufs[op->in[i]]; }
/* An op's weight and bias: in the weights, or with FSDP in the buffer a
 * dp_all_gather filled. */
static float *op_weight(const tr_exec *x, const tr_op *op)
{
    return op->weight_buf >= 0 ? fbuf(x, op->weight_buf) : weight(x, op->weight);
}
static float *op_bias(const tr_exec *x, const tr_op *op)
{
    return op->bias_buf >= 0 ? fbuf(x, op->bias_buf) : weight(x, op->bias);
}
static float *fin(const tr_exec *x, const tr_op *op, int i) { return fbuf(x, op->in[i]); }
static const int32_t *iin(const tr_exec *x, const tr_op *op, int i) { return (const int32_t *)buf_ptr(x, op->in[i]); }
/* an optional input (segments, positions by document): NULL where the op has none */
static const int32_t *opt_iin(const tr_exec *x, const tr_op *op, int i) { return i < op->nin ? iin(x, op, i) : NULL; }
static float *fout(const tr_exec *x, const tr_op *op) { return fbuf(x, op->out); }
/* output o of a kind with several; NULL where it is not computed */
static float *fouts(const tr_exec *x, const tr_op *op, int o) { return op->outs[o] < 0 ? NULL : fbuf(x, op->outs[o]); }
static int64_t in_elems(const tr_exec *x, const tr_op *op, int i) { return tr_op_in_elems(x->s, op, i); }

/* ids were checked against the vocabulary when they were read */
EXEC(embedding)
{
    int64_t dim = x->s->weights[op->weight].local_elems / op->vocab_local;
    x->be->embedding(fout(x, op), iin(x, op, 0), in_elems(x, op, 0), op_weight(x, op), op->vocab_local, dim,
                     op->vocab_start, op->masked);
    return 0;
}

EXEC(matmul)
{
    x->be->matmul(fout(x, op), fin(x, op, 0), op_weight(x, op), op->m, op->n, op->k);
    return 0;
}

EXEC(conv1d)
{
    x->be->conv1d(fout(x, op), fin(x, op, 0), op_weight(x, op), op->m, op->n, op->k);
    return 0;
}

EXEC(bias_add)
{
    x->be->bias_add(fout(x, op), fin(x, op, 0), op_bias(x, op), op->m, op->n, (float)op->scale);
    return 0;
}

EXEC(bias_gelu)
{
    x->be->bias_unary(op->gelu_tanh ? TP_UNARY_GELU_TANH : TP_UNARY_GELU_ERF, fouts(x, op, 0), fouts(x, op, 1),
                      fin(x, op, 0), op_bias(x, op), op->m, op->n, (float)op->scale);
    return 0;
}

EXEC(rmsnorm)
{
    x->be->rmsnorm(fout(x, op), fin(x, op, 0), op_weight(x, op), op->m, op->n, (float)op->eps,
                   op->unit_offset);
    return 0;
}

EXEC(add_rmsnorm)
{
    x->be->add_rmsnorm(fouts(x, op, 0), fouts(x, op, 1), fin(x, op, 0), fin(x, op, 1), op_weight(x, op), op->m,
                       op->n, (float)op->eps, op->unit_offset);
    return 0;
}

EXEC(layernorm)
{
    x->be->layernorm(fout(x, op), fin(x, op, 0), op_weight(x, op), op_bias(x, op), op->m, op->n,
                     (float)op->eps);
    return 0;
}

EXEC(rope)
{
    const int64_t *shape = in_buf(x, op, 0)->shape;
    x->be->rope(fout(x, op), fin(x, op, 0), shape[0], shape[1], shape[2], shape[3], op->rotary_dim, op->pos_offset,
                x->rope_inv_freq[op - x->s->ops], tp_rope_cos_sin_scale(&op->rope), opt_iin(x, op, 1));
    return 0;
}

/* attention, or rope_attention with its rotation (segments at in[3]) */
static int attention(tr_exec *x, const tr_op *op, const tp_rope_args *rope)
{
    x->be->attention(fouts(x, op, 0), fouts(x, op, 1), fin(x, op, 0), fin(x, op, 1), fin(x, op, 2), op->batch,
                     op->seq, op->heads, op->kv_heads, op->head_dim, op->scale, op->softcap, opt_iin(x, op, 3), rope);
    return 0;
}

/* The rotation of a rope_attention or its gradient, whose positions (with
 * documents) are input positions_in. */
static tp_rope_args rotation(const tr_exec *x, const tr_op *op, int positions_in)
{
    return (tp_rope_args){.rotary = op->rotary_dim, .pos_offset = op->pos_offset,
                          .inv_freq = x->rope_inv_freq[op - x->s->ops],
                          .inv_freq_back = x->rope_inv_freq[op - x->s->ops] + op->rotary_dim / 2,
                          .scale = tp_rope_cos_sin_scale(&op->rope),
                          .pos = opt_iin(x, op, positions_in)};
}

EXEC(attention) { return attention(x, op, NULL); }

EXEC(rope_attention)
{
    const tp_rope_args rope = rotation(x, op, 4);
    return attention(x, op, &rope);
}

static int unary(tr_exec *x, const tr_op *op, tp_unary f)
{
    x->be->unary(f, fout(x, op), fin(x, op, 0), in_elems(x, op, 0));
    return 0;
}

EXEC(silu) { return unary(x, op, TP_UNARY_SILU); }
EXEC(gelu) { return unary(x, op, op->gelu_tanh ? TP_UNARY_GELU_TANH : TP_UNARY_GELU_ERF); }
EXEC(relu) { return unary(x, op, TP_UNARY_RELU); }

static int binary(tr_exec *x, const tr_op *op, tp_binary f)
{
    x->be->binary(f, fout(x, op), fin(x, op, 0), in_elems(x, op, 0), fin(x, op, 1), in_elems(x, op, 1));
    return 0;
}

EXEC(add) { return binary(x, op, TP_BINARY_ADD); }
EXEC(mul) { return binary(x, op, TP_BINARY_MUL); }

EXEC(silu_mul)
{
    x->be->silu_mul(fout(x, op), fin(x, op, 0), fin(x, op, 1), in_elems(x, op, 0));
    return 0;
}

EXEC(scale)
{
    x->be->scale(fout(x, op), fin(x, op, 0), in_elems(x, op, 0), (float)op->scale);
    return 0;
}

EXEC(softcap)
{
    x->be->softcap(fout(x, op), fin(x, op, 0), in_elems(x, op, 0), (float)op->softcap);
    return 0;
}

EXEC(slice)
{
    const tr_buf *in = in_buf(x, op, 0);
    x->be->slice(fout(x, op), fin(x, op, 0), in->shape, in->rank, op->dim, op->index, op->parts);
    return 0;
}

EXEC(narrow)
{
    const tr_buf *in = in_buf(x, op, 0);
    x->be->narrow(fout(x, op), fin(x, op, 0), in->shape, in->rank, op->dim, op->start, op->length);
    return 0;
}

/* Numbered along the last dim of out (its ids, when it has them, are
 * the same shape). */
EXEC(positions)
{
    const tr_buf *out = &x->s->bufs[op->out];
    int64_t seq = out->rank ? out->shape[out->rank - 1] : 1;
    x->be->positions((int32_t *)buf_ptr(x, op->out), tr_buf_elems(out) / seq, seq, op->pos_offset,
                     opt_iin(x, op, 1));
    return 0;
}

/* The schedule's label convention, and the step's divisor (0 outside
 * training: the mean over this rank's labelled rows). */
static tp_ce_rule ce_rule(const tr_exec *x)
{
    return (tp_ce_rule){.shift = x->s->label_shift, .divisor = x->loss_divisor};
}

EXEC(cross_entropy)
{
    const int64_t *shape = in_buf(x, op, 0)->shape;
    x->be->cross_entropy(fout(x, op), fin(x, op, 0), iin(x, op, 1), shape[0], shape[1], shape[2], op->vocab_logical,
                         ce_rule(x));
    return 0;
}

EXEC(ce_max)
{
    x->be->ce_max(fout(x, op), fin(x, op, 0), tr_op_vocab_rows(x->s, op), op->vocab_local, op->vocab_start,
                  op->vocab_logical);
    return 0;
}

EXEC(ce_sumexp)
{
    x->be->ce_sumexp(fout(x, op), fin(x, op, 0), fin(x, op, 1), tr_op_vocab_rows(x->s, op), op->vocab_local,
                     op->vocab_start, op->vocab_logical);
    return 0;
}

EXEC(ce_target)
{
    const int64_t *shape = in_buf(x, op, 0)->shape;
    x->be->ce_target(fout(x, op), fin(x, op, 0), iin(x, op, 1), shape[0], shape[1], op->vocab_local, op->vocab_start,
                     ce_rule(x));
    return 0;
}

EXEC(ce_loss)
{
    const tr_buf *labels = in_buf(x, op, 3);
    x->be->ce_loss(fout(x, op), fin(x, op, 0), fin(x, op, 1), fin(x, op, 2), iin(x, op, 3), labels->shape[0],
                   labels->rank > 1 ? labels->shape[1] : 1, ce_rule(x));
    return 0;
}

/* ---- the backward ops ---- */

EXEC(matmul_tn)
{
    x->be->matmul_tn(fout(x, op), fin(x, op, 0), fin(x, op, 1), op->m, op->n, op->k);
    return 0;
}

EXEC(sum_rows)
{
    x->be->sum_rows(fout(x, op), fin(x, op, 0), op->m, op->n, (float)op->scale);
    return 0;
}

EXEC(rmsnorm_dx)
{
    x->be->rmsnorm_dx(fout(x, op), fin(x, op, 0), fin(x, op, 1), op_weight(x, op), op->m, op->n, (float)op->eps,
                      op->unit_offset, op->nin > 2 ? fin(x, op, 2) : NULL);
    return 0;
}

EXEC(rmsnorm_dw)
{
    x->be->rmsnorm_dw(fout(x, op), fin(x, op, 0), fin(x, op, 1), op->m, op->n, (float)op->eps);
    return 0;
}

EXEC(layernorm_dx)
{
    x->be->layernorm_dx(fout(x, op), fin(x, op, 0), fin(x, op, 1), op_weight(x, op), op->m, op->n,
                        (float)op->eps);
    return 0;
}

EXEC(layernorm_dw)
{
    x->be->layernorm_dw(fout(x, op), fin(x, op, 0), fin(x, op, 1), op->m, op->n, (float)op->eps);
    return 0;
}

static int attention_grad(tr_exec *x, const tr_op *op, const tp_rope_args *rope)
{
    x->be->attention_grad(fouts(x, op, 0), fouts(x, op, 1), fouts(x, op, 2), fin(x, op, 0), fin(x, op, 1),
                          fin(x, op, 2), fin(x, op, 3), fin(x, op, 4), fin(x, op, 5), op->batch, op->seq, op->heads,
                          op->kv_heads, op->head_dim, op->scale, op->softcap, opt_iin(x, op, 6), rope);
    return 0;
}

EXEC(attention_grad) { return attention_grad(x, op, NULL); }

EXEC(rope_attention_grad)
{
    const tp_rope_args rope = rotation(x, op, 7);
    return attention_grad(x, op, &rope);
}

static int unary_grad(tr_exec *x, const tr_op *op, tp_unary f)
{
    x->be->unary_grad(f, fout(x, op), fin(x, op, 0), fin(x, op, 1), in_elems(x, op, 0));
    return 0;
}

EXEC(silu_grad) { return unary_grad(x, op, TP_UNARY_SILU); }
EXEC(gelu_grad) { return unary_grad(x, op, op->gelu_tanh ? TP_UNARY_GELU_TANH : TP_UNARY_GELU_ERF); }
EXEC(relu_grad) { return unary_grad(x, op, TP_UNARY_RELU); }

EXEC(silu_mul_grad)
{
    x->be->silu_mul_grad(fouts(x, op, 0), fouts(x, op, 1), fin(x, op, 0), fin(x, op, 1), fin(x, op, 2),
                         in_elems(x, op, 0));
    return 0;
}

EXEC(softcap_grad)
{
    x->be->softcap_grad(fout(x, op), fin(x, op, 0), fin(x, op, 1), in_elems(x, op, 0), (float)op->softcap);
    return 0;
}

EXEC(embedding_grad)
{
    x->be->embedding_grad(fout(x, op), iin(x, op, 0), fin(x, op, 1), in_elems(x, op, 0), op->vocab_local,
                          tr_op_embedding_grad_dim(x->s, op), op->vocab_start, op->masked);
    return 0;
}

EXEC(narrow_grad)
{
    const tr_buf *out = &x->s->bufs[op->out];
    x->be->narrow_grad(fout(x, op), fin(x, op, 0), out->shape, out->rank, op->dim, op->start, op->length);
    return 0;
}

EXEC(cross_entropy_grad)
{
    const int64_t *shape = in_buf(x, op, 0)->shape;
    x->be->cross_entropy_grad(fout(x, op), fin(x, op, 0), iin(x, op, 1), shape[0], shape[1], shape[2],
                              op->vocab_logical, ce_rule(x));
    return 0;
}

EXEC(ce_grad)
{
    const int64_t *shape = in_buf(x, op, 0)->shape;
    x->be->ce_grad(fout(x, op), fin(x, op, 0), fin(x, op, 1), fin(x, op, 2), iin(x, op, 3), shape[0], shape[1],
                   op->vocab_local, op->vocab_start, op->vocab_logical, ce_rule(x));
    return 0;
}

EXEC(ones)
{
    x->be->ones(fout(x, op), tr_buf_elems(&x->s->bufs[op->out]));
    return 0;
}

/* Collectives: the communicator moves whole blocks; the gathered or
 * scattered dimension is made outermost by the backend's block kernels. */

EXEC(all_gather)
{
    const tr_buf *out = &x->s->bufs[op->out], *in = in_buf(x, op, 0);
    if (x->comm->ops->all_gather(x->comm, in->dtype, x->staging[0], fin(x, op, 0), tr_buf_elems(in), err, errlen))
        return -1;
    x->be->join_blocks(fout(x, op), x->staging[0], out->shape, out->rank, op->dim, x->s->world);
    return 0;
}

EXEC(reduce_scatter)
{
    const tr_buf *in = in_buf(x, op, 0);
    x->be->split_blocks(x->staging[0], fin(x, op, 0), in->shape, in->rank, op->dim, x->s->world);
    return x->comm->ops->reduce_scatter(x->comm, in->dtype, fout(x, op), x->staging[0],
                                        tr_buf_elems(&x->s->bufs[op->out]), err, errlen);
}

EXEC(all_reduce)
{
    const tr_buf *b = &x->s->bufs[op->out];
    if (op->out != op->in[0])
        x->be->copy(buf_ptr(x, op->out), buf_ptr(x, op->in[0]), (size_t)b->bytes);
    return x->comm->ops->all_reduce(x->comm, b->dtype, fout(x, op), tr_buf_elems(b), op->reduce_max, err, errlen);
}

/* Shard(dim) -> Shard(dim2): send chunk r along dim2 to rank r, join what
 * arrives along dim. */
EXEC(all_to_all)
{
    const tr_buf *in = in_buf(x, op, 0), *out = &x->s->bufs[op->out];
    int w = x->s->world;
    x->be->split_blocks(x->staging[0], fin(x, op, 0), in->shape, in->rank, op->dim2, w);
    if (x->comm->ops->all_to_all(x->comm, in->dtype, x->staging[1], x->staging[0], tr_buf_elems(in) / w, err, errlen))
        return -1;
    x->be->join_blocks(fout(x, op), x->staging[1], out->shape, out->rank, op->dim, w);
    return 0;
}

/* The data-parallel collectives run over x->dp, which must be the
 * schedule's replicas (run.c hands it over before a training run). */
static int check_dp_group(const tr_exec *x, char *err, size_t errlen)
{
    if (!x->dp || x->dp->world != x->s->data_parallel)
        return tp_error(err, errlen, "this run has no data-parallel group of the schedule's %d replicas",
                        x->s->data_parallel);
    return 0;
}

/* Over the data-parallel group: the mean of the replicas' gradients of the
 * weight, this rank's run of it. A weight that does not divide into dp
 * runs goes through staging[0] with zeros after it (ones scaled by 0: the
 * backends have no fill), so its padding sums zeros. */
EXEC(dp_reduce_scatter)
{
    if (check_dp_group(x, err, errlen))
        return -1;
    const tr_buf *in = in_buf(x, op, 0);
    int64_t n = tr_buf_elems(in), dp = x->dp->world, c = tp_dp_shard_elems(n, dp);
    const void *g = fin(x, op, 0);
    if (c * dp != n) {
        size_t es = tp_dtype_size(in->dtype);
        float *pad = (float *)(void *)((char *)x->staging[0] + n * (int64_t)es);
        x->be->copy(x->staging[0], g, (size_t)n * es);
        x->be->ones(pad, c * dp - n);
        x->be->scale(pad, pad, c * dp - n, 0.0f);
        g = x->staging[0];
    }
    if (x->dp->ops->reduce_scatter(x->dp, in->dtype, fout(x, op), g, c, err, errlen))
        return -1;
    x->be->scale(fout(x, op), fout(x, op), c, 1.0f / (float)dp);
    return 0;
}

/* FSDP: every dp rank's run of the weight, from the stored runs, into the
 * buffer its readers read (its local elements, then padding). */
EXEC(dp_all_gather)
{
    if (check_dp_group(x, err, errlen))
        return -1;
    int64_t c = op->elems / x->dp->world;
    return x->dp->ops->all_gather(x->dp, x->be->dtype, fout(x, op), weight(x, op->weight), c, err, errlen);
}

#undef EXEC

/* Every kind's executor: a row of sched/ops.def without its exec_<name>
 * does not compile. */
static int (*const exec_of[TP_OP_COUNT])(tr_exec *x, const tr_op *op, char *err, size_t errlen) = {
#define OP(NAME, name, ...) [TP_OP_##NAME] = exec_##name,
#include "sched/ops.def"
#undef OP
};

/* The phases as a rank that dies in one is named (progress.h). ORDER tp_phase */
static const char *const phase_where[TP_PHASE_COUNT] = {
    "in the forward pass", "in the backward pass", "reducing the gradients over the tensor-parallel ranks",
};

int tr_exec_run(tr_exec *x, char *err, size_t errlen)
{
    return tr_exec_run_ops(x, x->s->nops, err, errlen);
}

int tr_exec_run_ops(tr_exec *x, int nops, char *err, size_t errlen)
{
    const tr_schedule *s = x->s;
    const tp_backend *be = x->be;
    double t0 = now_seconds();
    for (int i = 0; i < nops; i++) {
        const tr_op *op = &s->ops[i];
        char why[400], name[600];
        double start = now_seconds();
        if (!i || op->phase != s->ops[i - 1].phase)
            tp_progress_phase(phase_where[op->phase]);
        if (be->begin_op)
            be->begin_op(i, tp_op_names[op->kind], op->module, op->entry);
        if (exec_of[op->kind](x, op, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s", tr_op_describe(s, i, name, sizeof name), why);
            return -1;
        }
        if (x->tracing && be->synchronize)   /* op times of an asynchronous backend */
            be->synchronize();
        double end = now_seconds();
        x->profile.seconds[op->kind] += end - start;
        x->profile.count[op->kind]++;
        x->profile.phase_seconds[op->phase] += end - start;
        if (tp_op_is_collective(op->kind))
            x->profile.comm_bytes += (double)op->bytes;
        x->trace[i] = (tr_trace_event){i, (start - t0) * 1e6, (end - start) * 1e6};
    }
    if (be->synchronize)
        be->synchronize();
    if (be->begin_op)
        be->begin_op(-1, NULL, NULL, NULL);
    x->profile.total_seconds += now_seconds() - t0;
    return 0;
}
