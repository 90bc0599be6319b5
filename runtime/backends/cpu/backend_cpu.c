/* backend_cpu.c: the CPU backend — OpenBLAS sgemm for matmul, plain C for
 * everything else.
 *
 * Tensors are fp32 in memory (the schedule's contract), but every reduction
 * whose length grows with the model (norms over hidden, softmax over the
 * sequence or the vocabulary, the loss over tokens) accumulates in double:
 * a float sum over 128k vocabulary columns or 8k keys loses digits that the
 * tests, and tensor-parallel runs compared against a single-rank run, would
 * otherwise see as noise. Softmaxes subtract the row maximum so exp() never
 * overflows.
 *
 * Preconditions the executor or the compiler guarantees (shapes that split
 * evenly, labels in range, ids in range for unmasked embeddings) are
 * asserted; a kernel never exits or aborts otherwise. No kernel allocates:
 * the table has no way to report a failure, so scratch space lives on the
 * stack in small fixed blocks (attention's score block, one per thread,
 * and the loss's partial sums come from tp_xmalloc, which aborts rather
 * than fail).
 *
 * Every kernel splits its work over the pool's threads (pool.h) by rows,
 * heads, column blocks or elements, never by a reduction, so the results
 * do not depend on --threads. The exps (fp32, vexp.h), the activations
 * built on them and the row reductions (norms, softmax max and sum) run in
 * vec.h's loops, vectorised for the host's ISA with the same bits on every
 * one. */
#include "runtime/backends/backend.h"
#include "runtime/backends/cpu/ce_rows.h"
#include "runtime/backends/cpu/cpu_training.h"
#include "runtime/backends/cpu/documents.h"
#include "runtime/backends/cpu/narrow_dims.h"
#include "runtime/backends/cpu/norm_stats.h"
#include "runtime/backends/cpu/pool.h"
#include "runtime/backends/cpu/rope_table.h"
#include "runtime/backends/cpu/swiglu.h"
#include "runtime/backends/cpu/vec.h"
#include "runtime/backends/cpu/vexp.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util/xalloc.h"

/* ------------------------------------------------------------------------ */
/* memory                                                                    */
/* ------------------------------------------------------------------------ */

/* The arena and the weights are host memory: "device" copies are memcpy. */
static void *cpu_alloc(size_t bytes)
{
    /* calloc(0) may legitimately return NULL, which the caller would take
     * for an out-of-memory failure; an empty buffer gets one byte instead. */
    return calloc(bytes ? bytes : 1, 1);
}

static void cpu_release(void *p) { free(p); }

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes) /* memcpy with a NULL pointer is undefined even for 0 bytes */
        memcpy(dst, src, bytes);
}

/* ------------------------------------------------------------------------ */
/* embedding                                                                 */
/* ------------------------------------------------------------------------ */

/* A vocab-parallel (RowwiseParallel) embedding holds rows [vocab_start,
 * vocab_start + rows) and emits zeros for the other ids; the all-reduce that
 * follows sums the one non-zero contribution per token. */
typedef struct embedding_args {
    float *out;
    const int32_t *ids;
    const float *w;
    int64_t rows, dim, vocab_start;
    bool masked;
} embedding_args;

static void embedding_part(void *ctx, int64_t t0, int64_t t1)
{
    const embedding_args *a = ctx;
    for (int64_t t = t0; t < t1; t++) {
        int64_t r = (int64_t)a->ids[t] - a->vocab_start;
        float *o = a->out + t * a->dim;
        if (r < 0 || r >= a->rows) {
            /* unmasked out-of-range ids are reported by the executor first */
            assert(a->masked && "embedding id out of range");
            memset(o, 0, (size_t)a->dim * sizeof *o);
            continue;
        }
        memcpy(o, a->w + r * a->dim, (size_t)a->dim * sizeof *o);
    }
}

static void cpu_embedding(float *out, const int32_t *ids, int64_t ntok, const float *w, int64_t rows, int64_t dim,
                          int64_t vocab_start, bool masked)
{
    embedding_args a = {out, ids, w, rows, dim, vocab_start, masked};
    tp_cpu_parallel(ntok, 16, embedding_part, &a);
}

/* ------------------------------------------------------------------------ */
/* linear algebra                                                            */
/* ------------------------------------------------------------------------ */

/* out[m, n] = x[m, k] . w, w stored [n, k] (nn.Linear: out_features,
 * in_features; sgemm with the second operand transposed) or [k, n]
 * (transformers' Conv1D: in, out). The threads take blocks of GEMM_COLUMNS
 * output columns, each one single-threaded sgemm: a column's sum over k is
 * the same whichever part holds it (the parts start at multiples of the
 * block, so the columns fall into OpenBLAS's kernel tiles alike). */
#define GEMM_COLUMNS 64

typedef struct gemm_args {
    float *out;
    const float *x, *w;
    int64_t m, n, k;
    bool w_in_out;
} gemm_args;

static void gemm_part(void *ctx, int64_t b0, int64_t b1)
{
    const gemm_args *a = ctx;
    const int64_t j0 = b0 * GEMM_COLUMNS, j1 = b1 * GEMM_COLUMNS < a->n ? b1 * GEMM_COLUMNS : a->n;
    const float *w = a->w + (a->w_in_out ? j0 : j0 * a->k);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, a->w_in_out ? CblasNoTrans : CblasTrans, (int)a->m, (int)(j1 - j0),
                (int)a->k, 1.0f, a->x, (int)a->k, w, a->w_in_out ? (int)a->n : (int)a->k, 0.0f, a->out + j0,
                (int)a->n);
}

static void cpu_gemm(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k, bool w_in_out)
{
    /* the CBLAS interface takes int (blasint) sizes */
    assert(m >= 0 && n >= 0 && k >= 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    if (m == 0 || n == 0)
        return;
    if (k == 0) { /* an empty sum; the leading dimensions below would be 0 */
        memset(out, 0, (size_t)(m * n) * sizeof *out);
        return;
    }
    gemm_args a = {out, x, w, m, n, k, w_in_out};
    tp_cpu_parallel((n + GEMM_COLUMNS - 1) / GEMM_COLUMNS, 1, gemm_part, &a);
}

static void cpu_matmul(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k)
{
    cpu_gemm(out, x, w, m, n, k, false);
}

static void cpu_conv1d(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k)
{
    cpu_gemm(out, x, w, m, n, k, true);
}

/* Rows of a row-wise op (norms, bias): the arguments every one of them
 * takes, so one struct serves them all. */
typedef struct rows_args {
    float *out;
    const float *x, *w, *b;
    int64_t n;
    float eps, scale;
    bool unit_offset;
} rows_args;

/* rows per part at least: a part is worth a thread's wake-up */
#define ROW_GRAIN 8

/* one row of bias_add (and of bias_unary's h): out may be x */
static void bias_row(float *out, const float *x, const float *b, int64_t n, float scale)
{
    tp_cpu_vec_host()->add_scaled(out, x, b, n, scale);
}

static void bias_add_part(void *ctx, int64_t i0, int64_t i1)
{
    const rows_args *a = ctx;
    const int64_t n = a->n;
    for (int64_t i = i0; i < i1; i++)
        bias_row(a->out + i * n, a->x + i * n, a->b, n, a->scale);
}

/* scale is 1 normally; a bias on a Partial tensor is added as b / tp by
 * every rank so that the sum over ranks adds it once. */
static void cpu_bias_add(float *out, const float *x, const float *b, int64_t m, int64_t n, float scale)
{
    rows_args a = {.out = out, .x = x, .b = b, .n = n, .scale = scale};
    tp_cpu_parallel(m, ROW_GRAIN, bias_add_part, &a);
}

/* ------------------------------------------------------------------------ */
/* normalisation                                                             */
/* ------------------------------------------------------------------------ */

/* Statistics are read from the whole row before any element is written, so
 * out may equal x. unit_offset scales by (1 + w), Gemma's weights being
 * stored as offsets from 1. */
/* One row: out = x / sqrt(mean(x^2) + eps) * w (or * (1 + w)); the one
 * definition rmsnorm and add_rmsnorm share, so the two agree bit for bit. */
static void rmsnorm_row(const tp_cpu_vec *vec, float *out, const float *x, const float *w, int64_t n, float eps,
                        bool unit_offset)
{
    const tp_row_norm st = tp_cpu_norm_stats(x, n, eps, false);
    vec->norm_row(out, x, w, NULL, n, st.mean, st.inv, unit_offset); /* x - 0 = x */
}

static void rmsnorm_part(void *ctx, int64_t i0, int64_t i1)
{
    const rows_args *a = ctx;
    const int64_t n = a->n;
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    for (int64_t i = i0; i < i1; i++)
        rmsnorm_row(vec, a->out + i * n, a->x + i * n, a->w, n, a->eps, a->unit_offset);
}

static void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t m, int64_t n, float eps, bool unit_offset)
{
    assert(n > 0);
    rows_args a = {.out = out, .x = x, .w = w, .n = n, .eps = eps, .unit_offset = unit_offset};
    tp_cpu_parallel(m, ROW_GRAIN, rmsnorm_part, &a);
}

/* add_rmsnorm: a row's sum (the add kernel's float add) stored in s, or
 * in out when s is not wanted, then normalised by rmsnorm_row from the
 * stored row, so the pair and the fused op give the same bits. Each
 * element is read before its place is written and a norm row's statistics
 * come before its outputs, so each output may be exactly an input. Either
 * output may be NULL. */
typedef struct add_norm_args {
    float *s, *out;
    const float *a, *b, *w;
    int64_t n;
    float eps;
    bool unit_offset;
} add_norm_args;

static void add_rmsnorm_part(void *ctx, int64_t i0, int64_t i1)
{
    const add_norm_args *p = ctx;
    const int64_t n = p->n;
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    for (int64_t i = i0; i < i1; i++) {
        float *sum = (p->s ? p->s : p->out) + i * n;
        vec->add_scaled(sum, p->a + i * n, p->b + i * n, n, 1.0f);
        if (p->out)
            rmsnorm_row(vec, p->out + i * n, sum, p->w, n, p->eps, p->unit_offset);
    }
}

static void cpu_add_rmsnorm(float *s, float *out, const float *a, const float *b, const float *w, int64_t m, int64_t n,
                            float eps, bool unit_offset)
{
    assert(n > 0 && s != out && (s || out));
    add_norm_args p = {.s = s, .out = out, .a = a, .b = b, .w = w, .n = n, .eps = eps, .unit_offset = unit_offset};
    tp_cpu_parallel(m, ROW_GRAIN, add_rmsnorm_part, &p);
}

/* the statistics: norm_stats.h (two passes for the variance) */
static void layernorm_part(void *ctx, int64_t i0, int64_t i1)
{
    const rows_args *a = ctx;
    const int64_t n = a->n;
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    for (int64_t i = i0; i < i1; i++) {
        const float *xr = a->x + i * n;
        const tp_row_norm st = tp_cpu_norm_stats(xr, n, a->eps, true);
        vec->norm_row(a->out + i * n, xr, a->w, a->b, n, st.mean, st.inv, false);
    }
}

static void cpu_layernorm(float *out, const float *x, const float *w, const float *b, int64_t m, int64_t n, float eps)
{
    assert(n > 0 && w);
    rows_args a = {.out = out, .x = x, .w = w, .b = b, .n = n, .eps = eps};
    tp_cpu_parallel(m, ROW_GRAIN, layernorm_part, &a);
}

/* ------------------------------------------------------------------------ */
/* rotary position embedding                                                 */
/* ------------------------------------------------------------------------ */

/* Hugging Face's rotate_half convention on the first r = `rotary` dims of
 * each head: the pairs are (i, i + r/2), not adjacent elements, and cos/sin
 * = cat(freqs, freqs), so
 *   out[i]       = x[i] cos(p f_i) - x[i + r/2] sin(p f_i)
 *   out[i + r/2] = x[i + r/2] cos(p f_i) + x[i] sin(p f_i)
 * with f_i = inv_freq[i], cos and sin times scale (yarn's attention_factor,
 * as transformers multiplies them); dims [r, d) pass through (partial rotary, as
 * Phi-3's apply_rotary_pos_emb concatenates them back). Angles are computed
 * in double: in float, p f_i at p ~ 8k is off by ~5e-4 rad. Each pair is
 * read before it is written, so out may equal x. A sequence shard passes
 * pos_offset = rank * s. */
typedef struct rope_args {
    float *out;
    const float *x;
    int64_t s, h, d, rotary;
    const double *cos_sin; /* rope_table.h: from position 0 with pos, else from pos_offset */
    const int32_t *pos;    /* each token's position (by document), or NULL */
} rope_args;

/* tokens [t0, t1) of the b x s */
static void rope_part(void *ctx, int64_t t0, int64_t t1)
{
    const rope_args *a = ctx;
    const int64_t h = a->h, d = a->d, rotary = a->rotary, half = rotary / 2;
    for (int64_t t = t0; t < t1; t++) {
        const double *cs = a->cos_sin + 2 * (a->pos ? a->pos[t] : t % a->s) * half; /* token t's position */
        for (int64_t hi = 0; hi < h; hi++) {
            const float *xr = a->x + (t * h + hi) * d;
            float *o = a->out + (t * h + hi) * d;
            if (o != xr && rotary < d)
                memcpy(o + rotary, xr + rotary, (size_t)(d - rotary) * sizeof *o);
            for (int64_t i = 0; i < half; i++) {
                const double c = cs[2 * i], sn = cs[2 * i + 1];
                double x1 = xr[i], x2 = xr[i + half];
                o[i] = (float)(x1 * c - x2 * sn);
                o[i + half] = (float)(x2 * c + x1 * sn);
            }
        }
    }
}

static void cpu_rope(float *out, const float *x, int64_t b, int64_t s, int64_t h, int64_t d, int64_t rotary,
                     int64_t pos_offset, const double *inv_freq, double scale, const int32_t *pos)
{
    assert(rotary % 2 == 0 && rotary <= d);
    const double *table = pos ? tp_cpu_rope_table(inv_freq, rotary / 2, 0, pos_offset + s, scale)
                              : tp_cpu_rope_table(inv_freq, rotary / 2, pos_offset, s, scale);
    rope_args a = {out, x, s, h, d, rotary, table, pos};
    tp_cpu_parallel(b * s, ROW_GRAIN, rope_part, &a);
}

/* ------------------------------------------------------------------------ */
/* attention                                                                 */
/* ------------------------------------------------------------------------ */

/* Flash-style: for each kv head and block of ATTN_QBLOCK query positions,
 * the query heads sharing that kv head (all h / g of them, GQA's group)
 * are stacked into one block of rows, copied contiguous, and the keys are
 * visited in blocks of ATTN_KBLOCK with an online softmax (a running max
 * and denominator per row, rescaling what was accumulated when the max
 * grows), so no s x s matrix is formed and key blocks past the block's last
 * position (causal) are never touched. The scores of a block are one SGEMM
 * (Q . K^T, K read in place at stride g*d) and the weighted values another
 * (P . V), each over the whole group: the group's heads share one packing
 * of K and V and give BLAS group times the rows. fp32 as PyTorch's CPU
 * attention computes them; the denominators are summed in double. Causal
 * masking and soft-capping act on the block of scores between the two.
 * Each row's arithmetic is the same whatever the grouping, the blocks and
 * --threads. The threads take (batch, kv head, query block) tasks, each
 * with its own buffers. */
#define ATTN_QBLOCK 64
#define ATTN_KBLOCK 512

typedef struct attention_args {
    float *out, *lse;          /* lse: [b, h, s], or NULL */
    const float *q, *k, *v;
    int64_t s, h, g, d, nqblocks;
    double scale, softcap;
    const int32_t *segments;   /* [b, s], or NULL */
} attention_args;

/* One row's scores against keys k0 .. k0 + nk - 1 (row, in place: its
 * weights e^(score - max)), of which the first `seen` are visible; folds
 * them into the row's running max and denominator and rescales its
 * accumulated output o[0, d). */
static void attention_row(const tp_cpu_vec *vec, float *row, int64_t seen, int64_t nk, double softcap, float *mx,
                          double *denom, float *o, int64_t d)
{
    for (int64_t j = 0; j < seen && softcap > 0; j++)
        if (row[j] > -INFINITY)   /* a key of another document stays hidden */
            row[j] = (float)(softcap * tanh(row[j] / softcap));
    const float bmax = seen > 0 ? vec->max(row, seen) : -INFINITY;
    if (bmax == -INFINITY) {   /* every key of the block hidden: causally, or by its document */
        memset(row, 0, (size_t)nk * sizeof *row);
        return;
    }
    const float nmax = bmax > *mx ? bmax : *mx;
    /* exp(-inf) = 0 on the first block: nothing to rescale */
    const float rescale = tp_vexpf(*mx - nmax);
    const double sum = vec->exp_sum(row, row, seen, nmax);
    for (int64_t j = seen; j < nk; j++)
        row[j] = 0;
    *denom = *denom * rescale + sum;
    if (rescale != 1.0f)
        for (int64_t c = 0; c < d; c++)
            o[c] *= rescale;
    *mx = nmax;
}

/* tasks [t0, t1) of b x g x query blocks, in that order; row r of a task's
 * block is query head kh * group + r / nq at position q0 + r % nq */
static void attention_part(void *ctx, int64_t t0, int64_t t1)
{
    const attention_args *a = ctx;
    const int64_t s = a->s, h = a->h, g = a->g, d = a->d, group = h / g; /* query heads per kv head */
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    const size_t rows = (size_t)group * ATTN_QBLOCK;
    float *p = tp_xmalloc(rows * ATTN_KBLOCK * sizeof *p), *qb = tp_xmalloc(rows * (size_t)d * sizeof *qb);
    float *ob = tp_xmalloc(rows * (size_t)d * sizeof *ob), *mx = tp_xmalloc(rows * sizeof *mx);
    double *denom = tp_xmalloc(rows * sizeof *denom);

    for (int64_t task = t0; task < t1; task++) {
        const int64_t bi = task / (g * a->nqblocks), kh = task / a->nqblocks % g;
        const int64_t q0 = task % a->nqblocks * ATTN_QBLOCK;
        const int64_t nq = s - q0 < ATTN_QBLOCK ? s - q0 : ATTN_QBLOCK, m = group * nq;
        const float *kbase = a->k + (bi * s * g + kh) * d, *vbase = a->v + (bi * s * g + kh) * d;
        /* query (b, q0 + i, head kh * group + j) is at this, + (i * h + j) * d */
        const float *qfirst = a->q + ((bi * s + q0) * h + kh * group) * d;
        float *ofirst = a->out + ((bi * s + q0) * h + kh * group) * d;
        for (int64_t r = 0; r < m; r++) {
            memcpy(qb + r * d, qfirst + (r % nq * h + r / nq) * d, (size_t)d * sizeof *qb);
            mx[r] = -INFINITY;
            denom[r] = 0;
        }
        memset(ob, 0, (size_t)m * (size_t)d * sizeof *ob);
        /* causal: the block's queries see keys 0 .. q0 + nq - 1 */
        for (int64_t k0 = 0; k0 < q0 + nq; k0 += ATTN_KBLOCK) {
            const int64_t nk = q0 + nq - k0 < ATTN_KBLOCK ? q0 + nq - k0 : ATTN_KBLOCK;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nk, (int)d, (float)a->scale, qb, (int)d,
                        kbase + k0 * g * d, (int)(g * d), 0.0f, p, (int)nk);
            for (int64_t r = 0; r < m; r++) {
                /* query q0 + i sees keys k0 .. q0 + i of this block */
                const int64_t i = r % nq, seen = q0 + i - k0 + 1 < nk ? q0 + i - k0 + 1 : nk;
                if (a->segments)
                    tp_cpu_hide_other_documents(p + r * nk, seen, a->segments + bi * s, q0 + i, k0);
                attention_row(vec, p + r * nk, seen, nk, a->softcap, &mx[r], &denom[r], ob + r * d, d);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)d, (int)nk, 1.0f, p, (int)nk,
                        vbase + k0 * g * d, (int)(g * d), 1.0f, ob, (int)d);
        }
        for (int64_t r = 0; r < m; r++) {
            float *o = ofirst + (r % nq * h + r / nq) * d;
            const float inv = denom[r] > 0 ? (float)(1.0 / denom[r]) : 0.0f;   /* 0: a row that sees nothing */
            for (int64_t c = 0; c < d; c++)
                o[c] = ob[r * d + c] * inv;
            if (a->lse)   /* P = exp(score - lse) = 0 everywhere for a row that sees nothing */
                a->lse[(bi * h + kh * group + r / nq) * s + q0 + r % nq] =
                    denom[r] > 0 ? (float)(mx[r] + log(denom[r])) : INFINITY;
        }
    }
    free(p);
    free(qb);
    free(ob);
    free(mx);
    free(denom);
}

/* ---- attention with RoPE (rope_attention): the rope op's rotation of q
 * and k into buffers of its own, then attention of them, and for the
 * gradient the rotated ones' gradients rotated back by rope's inverse: the
 * very computation of the three ops, so -O1's fusion changes no bit. */

/* x [b, s, heads, d] rotated by rope into a new buffer the caller frees */
static float *rotated(const float *x, int64_t b, int64_t s, int64_t heads, int64_t d, const tp_rope_args *rope)
{
    float *out = tp_xmalloc((size_t)(b * s * heads * d) * sizeof *out + 1);
    cpu_rope(out, x, b, s, heads, d, rope->rotary, rope->pos_offset, rope->inv_freq, rope->scale, rope->pos);
    return out;
}

static void cpu_attention(float *out, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t s,
                          int64_t h, int64_t g, int64_t d, double scale, double softcap, const int32_t *segments,
                          const tp_rope_args *rope)
{
    /* the contract of every backend's attention: out apart from the inputs */
    assert(out != q && out != k && out != v);
    assert(g > 0 && h % g == 0 && d > 0);
    float *qr = rope ? rotated(q, b, s, h, d, rope) : NULL, *kr = rope ? rotated(k, b, s, g, d, rope) : NULL;
    const int64_t nqblocks = (s + ATTN_QBLOCK - 1) / ATTN_QBLOCK;
    attention_args a = {out, lse, rope ? qr : q, rope ? kr : k, v, s, h, g, d, nqblocks, scale, softcap, segments};
    tp_cpu_parallel(b * g * nqblocks, 1, attention_part, &a);
    free(qr);
    free(kr);
}

static void cpu_attention_grad(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                               const float *dy, const float *o, const float *lse, int64_t b, int64_t s, int64_t h,
                               int64_t g, int64_t d, double scale, double softcap, const int32_t *segments,
                               const tp_rope_args *rope)
{
    if (!rope) {
        tp_cpu_attention_grad(dq, dk, dv, q, k, v, dy, o, lse, b, s, h, g, d, scale, softcap, segments);
        return;
    }
    float *qr = rotated(q, b, s, h, d, rope), *kr = rotated(k, b, s, g, d, rope);
    float *dqr = dq ? tp_xmalloc((size_t)(b * s * h * d) * sizeof *dqr) : NULL;
    float *dkr = dk ? tp_xmalloc((size_t)(b * s * g * d) * sizeof *dkr) : NULL;
    tp_cpu_attention_grad(dqr, dkr, dv, qr, kr, v, dy, o, lse, b, s, h, g, d, scale, softcap, segments);
    if (dq)
        cpu_rope(dq, dqr, b, s, h, d, rope->rotary, rope->pos_offset, rope->inv_freq_back, rope->scale, rope->pos);
    if (dk)
        cpu_rope(dk, dkr, b, s, g, d, rope->rotary, rope->pos_offset, rope->inv_freq_back, rope->scale, rope->pos);
    free(qr);
    free(kr);
    free(dqr);
    free(dkr);
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                               */
/* ------------------------------------------------------------------------ */

/* SiLU and gelu_new: vec.h */

static float gelu_erf(float x)
{
    /* torch's gelu(approximate="none"): 0.5 x (1 + erf(x / sqrt(2))) */
    double xd = x;
    return (float)(0.5 * xd * (1.0 + erf(xd * 0.7071067811865476)));
}

/* elements per part at least */
#define ELEMENT_GRAIN 4096

typedef struct elementwise_args {
    int op;           /* tp_unary or tp_binary */
    float *out;
    const float *x, *b;
    int64_t nb;
    float s;          /* scale's factor, softcap's cap */
} elementwise_args;

/* out[i] = op(x[i]) for i < n; out may be x */
static void unary_span(tp_unary op, float *out, const float *x, int64_t n)
{
    switch (op) {
    case TP_UNARY_SILU:
        tp_cpu_vec_host()->silu(out, x, n);
        break;
    case TP_UNARY_GELU_TANH:
        tp_cpu_vec_host()->gelu_tanh(out, x, n);
        break;
    case TP_UNARY_GELU_ERF:
        for (int64_t i = 0; i < n; i++)
            out[i] = gelu_erf(x[i]);
        break;
    case TP_UNARY_RELU:
        /* written so that NaN propagates, as torch.relu does */
        for (int64_t i = 0; i < n; i++)
            out[i] = x[i] < 0.0f ? 0.0f : x[i];
        break;
    default:
        assert(!"unknown unary op");
    }
}

static void unary_part(void *ctx, int64_t i0, int64_t i1)
{
    const elementwise_args *a = ctx;
    unary_span((tp_unary)a->op, a->out + i0, a->x + i0, i1 - i0);
}

static void cpu_unary(tp_unary op, float *out, const float *x, int64_t n)
{
    elementwise_args a = {.op = op, .out = out, .x = x};
    tp_cpu_parallel(n, ELEMENT_GRAIN, unary_part, &a);
}

/* bias_unary: a row's h by bias_add's loop, stored in h, or in out when h
 * is not wanted, then the activation of the stored row by unary's: the
 * pair's bits. Each element is read before its place is written, so each
 * output may be exactly x. Either output may be NULL. */
typedef struct bias_unary_args {
    tp_unary op;
    float *h, *out;
    const float *x, *b;
    int64_t n;
    float scale;
} bias_unary_args;

static void bias_unary_part(void *ctx, int64_t i0, int64_t i1)
{
    const bias_unary_args *p = ctx;
    const int64_t n = p->n;
    for (int64_t i = i0; i < i1; i++) {
        float *h = (p->h ? p->h : p->out) + i * n;
        bias_row(h, p->x + i * n, p->b, n, p->scale);
        if (p->out)
            unary_span(p->op, p->out + i * n, h, n);
    }
}

static void cpu_bias_unary(tp_unary op, float *h, float *out, const float *x, const float *b, int64_t m, int64_t n,
                           float scale)
{
    assert(h != out && (h || out));
    bias_unary_args p = {.op = op, .h = h, .out = out, .x = x, .b = b, .n = n, .scale = scale};
    tp_cpu_parallel(m, ROW_GRAIN, bias_unary_part, &p);
}

/* b repeats every nb elements (a bias-shaped or same-shaped operand);
 * iterating run by run avoids a modulo per element. */
static void binary_part(void *ctx, int64_t i0, int64_t i1)
{
    const elementwise_args *a = ctx;
    const int64_t nb = a->nb;
    for (int64_t i = i0; i < i1;) {
        const int64_t j0 = i % nb, len = nb - j0 < i1 - i ? nb - j0 : i1 - i;
        float *o = a->out + i;
        const float *x = a->x + i, *b = a->b + j0;
        switch ((tp_binary)a->op) {
        case TP_BINARY_ADD:
            tp_cpu_vec_host()->add_scaled(o, x, b, len, 1.0f);
            break;
        case TP_BINARY_MUL:
            for (int64_t j = 0; j < len; j++)
                o[j] = x[j] * b[j];
            break;
        default:
            assert(!"unknown binary op");
        }
        i += len;
    }
}

static void cpu_binary(tp_binary op, float *out, const float *a, int64_t n, const float *b, int64_t nb)
{
    assert(nb > 0 && n % nb == 0);
    elementwise_args args = {.op = op, .out = out, .x = a, .b = b, .nb = nb};
    tp_cpu_parallel(n, ELEMENT_GRAIN, binary_part, &args);
}

static void scale_part(void *ctx, int64_t i0, int64_t i1)
{
    const elementwise_args *a = ctx;
    for (int64_t i = i0; i < i1; i++)
        a->out[i] = a->x[i] * a->s;
}

static void cpu_scale(float *out, const float *x, int64_t n, float s)
{
    elementwise_args a = {.out = out, .x = x, .s = s};
    tp_cpu_parallel(n, ELEMENT_GRAIN, scale_part, &a);
}

static void softcap_part(void *ctx, int64_t i0, int64_t i1)
{
    const elementwise_args *a = ctx;
    for (int64_t i = i0; i < i1; i++)
        a->out[i] = (float)((double)a->s * tanh((double)a->x[i] / a->s));
}

static void cpu_softcap(float *out, const float *x, int64_t n, float cap)
{
    elementwise_args a = {.out = out, .x = x, .s = cap};
    tp_cpu_parallel(n, ELEMENT_GRAIN, softcap_part, &a);
}

/* ------------------------------------------------------------------------ */
/* layout                                                                    */
/* ------------------------------------------------------------------------ */

/* x.narrow(dim, start, length): one contiguous run from each of the outer
 * slabs (narrow_dims.h). */
static void cpu_narrow(float *out, const float *x, const int64_t *shape, int rank, int dim, int64_t start,
                       int64_t length)
{
    const narrow_dims nd = narrow_dims_of(shape, rank, dim, start, length);
    const size_t run = (size_t)(length * nd.inner) * sizeof *out;
    if (run == 0)
        return;
    for (int64_t o = 0; o < nd.outer; o++)
        memcpy(out + o * length * nd.inner, x + (o * nd.extent + start) * nd.inner, run);
}

/* torch.chunk(x, parts, dim)[index] for an even split. */
static void cpu_slice(float *out, const float *x, const int64_t *shape, int rank, int dim, int index, int parts)
{
    int d = dim < 0 ? dim + rank : dim;
    assert(d >= 0 && d < rank && parts > 0 && index >= 0 && index < parts);
    assert(shape[d] % parts == 0 && "the compiler only emits even splits");
    const int64_t chunk = shape[d] / parts;
    cpu_narrow(out, x, shape, rank, d, index * chunk, chunk);
}

/* Position ids for learned position embeddings and RoPE; a sequence
 * shard passes pos_offset = rank * s. With segments, each document's
 * first position is pos_offset. */
static void cpu_positions(int32_t *out, int64_t b, int64_t s, int64_t pos_offset, const int32_t *segments)
{
    assert(pos_offset >= 0 && pos_offset + s <= INT32_MAX);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t j = 0, first = 0; j < s; j++) {
            if (segments && j > 0 && segments[bi * s + j] != segments[bi * s + j - 1])
                first = j;
            out[bi * s + j] = (int32_t)(pos_offset + j - first);
        }
}

/* ------------------------------------------------------------------------ */
/* cross-entropy                                                             */
/* ------------------------------------------------------------------------ */

/* The rows and columns the loss reads: ce_rows.h. The mean is over the
 * rows with a label (or the rule's divisor), and is NaN (0/0) when there
 * are none, as in torch. */

/* The loss is a sum over rows: each block of CE_BLOCK rows (a fixed size,
 * so the order of the additions does not depend on --threads) is summed on
 * one thread, the blocks' sums then in order. */
#define CE_BLOCK 16

typedef struct ce_args {
    float *out;
    const float *logits, *max;
    const int32_t *labels;
    int64_t b, s, v, vocab_start, vocab;
    int shift;
    double *block_sum;    /* cross_entropy: each block's sum and rows counted */
    int64_t *block_count;
} ce_args;

static void cross_entropy_part(void *ctx, int64_t c0, int64_t c1)
{
    const ce_args *a = ctx;
    const int64_t rows = a->b * a->s;
    for (int64_t c = c0; c < c1; c++) {
        double total = 0.0;
        int64_t count = 0;
        for (int64_t r = c * CE_BLOCK; r < (c + 1) * CE_BLOCK && r < rows; r++) {
            const int64_t bi = r / a->s, t = r % a->s;
            int32_t label = row_label(a->labels, bi, t, a->s, a->shift);
            if (label == CE_IGNORE) /* also a shifted loss's last position, which has no label */
                continue;
            assert(label >= 0 && label < a->vocab && "label outside the vocabulary");
            const float *row = a->logits + r * a->v;
            const ce_row st = ce_row_of(row, a->vocab);
            /* -log softmax = log sum exp(l - max) + max - l[label] */
            total += log(st.sumexp) + st.max - (double)row[label];
            count++;
        }
        a->block_sum[c] = total;
        a->block_count[c] = count;
    }
}

static void cpu_cross_entropy(float *loss, const float *logits, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                              int64_t vocab, tp_ce_rule rule)
{
    assert(vocab > 0 && vocab <= v);
    const int64_t blocks = (b * s + CE_BLOCK - 1) / CE_BLOCK;
    ce_args a = {.logits = logits, .labels = labels, .b = b, .s = s, .v = v, .vocab = vocab, .shift = rule.shift};
    a.block_sum = tp_xmalloc((size_t)blocks * sizeof *a.block_sum + 1);
    a.block_count = tp_xmalloc((size_t)blocks * sizeof *a.block_count + 1);
    tp_cpu_parallel(blocks, 1, cross_entropy_part, &a);
    double total = 0.0;
    int64_t count = 0;
    for (int64_t c = 0; c < blocks; c++) {
        total += a.block_sum[c];
        count += a.block_count[c];
    }
    free(a.block_sum);
    free(a.block_count);
    *loss = (float)(total / ce_denominator(rule, count));
}

/* The vocab-parallel pieces, composed by the executor as
 *   ce_max -> all-reduce MAX -> ce_sumexp (with the global max) ->
 *   all-reduce SUM; ce_target -> all-reduce SUM; ce_loss,
 * give cross_entropy's value; each piece reads only local columns. */

/* A rank holding only padding columns reports -inf, the identity of MAX. */
static void ce_max_part(void *ctx, int64_t r0, int64_t r1)
{
    const ce_args *a = ctx;
    const int64_t nreal = real_columns(a->v, a->vocab_start, a->vocab);
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    for (int64_t r = r0; r < r1; r++)
        a->out[r] = vec->max(a->logits + r * a->v, nreal);
}

static void cpu_ce_max(float *out, const float *logits, int64_t rows, int64_t v, int64_t vocab_start, int64_t vocab)
{
    ce_args a = {.out = out, .logits = logits, .v = v, .vocab_start = vocab_start, .vocab = vocab};
    tp_cpu_parallel(rows, 1, ce_max_part, &a);
}

/* max is the global (all-reduced) row max, so every rank's terms are
 * exp(l - max) <= 1 and the SUM all-reduce adds comparable numbers. */
static void ce_sumexp_part(void *ctx, int64_t r0, int64_t r1)
{
    const ce_args *a = ctx;
    const int64_t nreal = real_columns(a->v, a->vocab_start, a->vocab);
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    for (int64_t r = r0; r < r1; r++)
        a->out[r] = (float)vec->exp_sum(NULL, a->logits + r * a->v, nreal, a->max[r]);
}

static void cpu_ce_sumexp(float *out, const float *logits, const float *max, int64_t rows, int64_t v,
                          int64_t vocab_start, int64_t vocab)
{
    ce_args a = {.out = out, .logits = logits, .max = max, .v = v, .vocab_start = vocab_start, .vocab = vocab};
    tp_cpu_parallel(rows, 1, ce_sumexp_part, &a);
}

/* Exactly one rank holds each label's column, so the SUM all-reduce of the
 * targets yields the label's logit; ignored labels (-100) are nowhere local
 * and give 0, which ce_loss skips anyway. A row's target is a copy: the
 * rows are few and cheap, one thread does them. */
static void cpu_ce_target(float *out, const float *logits, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                          int64_t vocab_start, tp_ce_rule rule)
{
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t < s; t++) {
            int64_t col = (int64_t)row_label(labels, bi, t, s, rule.shift) - vocab_start;
            out[bi * s + t] = (col >= 0 && col < v) ? logits[(bi * s + t) * v + col] : 0.0f;
        }
}

static void cpu_ce_loss(float *loss, const float *sumexp, const float *max, const float *target, const int32_t *labels,
                        int64_t b, int64_t s, tp_ce_rule rule)
{
    double total = 0.0;
    int64_t count = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t < s; t++) {
            if (row_label(labels, bi, t, s, rule.shift) == CE_IGNORE)
                continue;
            const int64_t r = bi * s + t;
            total += log((double)sumexp[r]) + (double)max[r] - (double)target[r];
            count++;
        }
    *loss = (float)(total / ce_denominator(rule, count));
}

/* ------------------------------------------------------------------------ */
/* the table                                                                 */
/* ------------------------------------------------------------------------ */

/* The blocks of a reshard: chunk p of x along dim at out + p * (n / parts). */
static void cpu_split_blocks(float *out, const float *x, const int64_t *shape, int rank, int dim, int parts)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    for (int p = 0; p < parts; p++)
        cpu_slice(out + p * (n / parts), x, shape, rank, dim, p, parts);
}

/* The inverse: `shape` is the joined tensor's; block p becomes its chunk p. */
static void cpu_join_blocks(float *out, const float *blocks, const int64_t *shape, int rank, int dim, int parts)
{
    if (dim < 0)
        dim += rank;
    assert(dim >= 0 && dim < rank && parts > 0 && shape[dim] % parts == 0);
    int64_t outer = 1, inner = 1, n;
    for (int i = 0; i < dim; i++)
        outer *= shape[i];
    for (int i = dim + 1; i < rank; i++)
        inner *= shape[i];
    n = outer * shape[dim] * inner;
    const int64_t chunk = shape[dim] / parts;
    for (int p = 0; p < parts; p++)
        for (int64_t o = 0; o < outer; o++)
            memcpy(out + (o * shape[dim] + p * chunk) * inner, blocks + p * (n / parts) + o * chunk * inner,
                   (size_t)(chunk * inner) * sizeof *out);
}

static void cpu_move(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }


static const tp_backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .release = cpu_release,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .host_memory = true,
    .embedding = cpu_embedding,
    .matmul = cpu_matmul,
    .conv1d = cpu_conv1d,
    .bias_add = cpu_bias_add,
    .bias_unary = cpu_bias_unary,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .layernorm = cpu_layernorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .silu_mul = tp_cpu_silu_mul, /* swiglu.c */
    .slice = cpu_slice,
    .narrow = cpu_narrow,
    .split_blocks = cpu_split_blocks,
    .join_blocks = cpu_join_blocks,
    .copy = cpu_move,
    .set_threads = tp_cpu_pool_resize, /* one thread per rank by default: ranks already share the cores */
    .positions = cpu_positions,
    .cross_entropy = cpu_cross_entropy,
    .ce_max = cpu_ce_max,
    .ce_sumexp = cpu_ce_sumexp,
    .ce_target = cpu_ce_target,
    .ce_loss = cpu_ce_loss,
    /* training: backward.c, attention_grad.c, optimizer.c */
    .matmul_tn = tp_cpu_matmul_tn,
    .sum_rows = tp_cpu_sum_rows,
    .rmsnorm_dx = tp_cpu_rmsnorm_dx,
    .rmsnorm_dw = tp_cpu_rmsnorm_dw,
    .layernorm_dx = tp_cpu_layernorm_dx,
    .layernorm_dw = tp_cpu_layernorm_dw,
    .attention_grad = cpu_attention_grad,
    .unary_grad = tp_cpu_unary_grad,
    .silu_mul_grad = tp_cpu_silu_mul_grad,
    .softcap_grad = tp_cpu_softcap_grad,
    .embedding_grad = tp_cpu_embedding_grad,
    .narrow_grad = tp_cpu_narrow_grad,
    .cross_entropy_grad = tp_cpu_cross_entropy_grad,
    .ce_grad = tp_cpu_ce_grad,
    .ones = tp_cpu_ones,
    .adamw = tp_cpu_adamw,
    .sum_squares = tp_cpu_sum_squares,
    .accumulate_grad = tp_cpu_accumulate_grad,
};

const tp_backend *tp_backend_cpu(void) { return &cpu_backend; }
