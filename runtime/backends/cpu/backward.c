/* backward.c: the CPU backend's backward kernels, each the gradient of the
 * forward kernel of backend_cpu.c that it names (attention's is in
 * attention_grad.c).
 *
 * The numerics follow the forward's: row statistics (norms, softmaxes) are
 * recomputed from the saved input in double exactly as the forward
 * computes them, and every sum whose length grows with the model (over
 * tokens for a weight's or a bias's gradient, over hidden for a norm's
 * input gradient, over the vocabulary) accumulates in double. Sums over
 * tokens write float outputs column by column, so they go through a
 * fixed-size stack block of double accumulators (COLUMN_BLOCK columns at a
 * time; a norm's row statistics are computed once, into a scratch array).
 * The exceptions are matmul_tn (sgemm, as the forward matmul) and the
 * embedding's scatter-add (float, as the rows it adds into are only known
 * from the ids).
 *
 * Every kernel writes its whole output (zeros where the gradient is 0).
 *
 * Threads (pool.h): row-wise kernels split rows; sums over tokens split
 * columns (blocks of COLUMN_BLOCK), each column summed over all rows in
 * order by one thread; so no result depends on --threads. */
#include "runtime/backends/cpu/cpu_training.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backends/cpu/ce_rows.h"
#include "runtime/backends/cpu/narrow_dims.h"
#include "runtime/backends/cpu/norm_stats.h"
#include "runtime/backends/cpu/pool.h"
#include "runtime/backends/cpu/vec.h"
#include "util/xalloc.h"

/* double accumulators for the columns [j0, j0 + COLUMN_BLOCK) of a sum over
 * rows; also what the threads split such sums into */
#define COLUMN_BLOCK 64

/* ------------------------------------------------------------------------ */
/* linear algebra                                                            */
/* ------------------------------------------------------------------------ */

/* out[n, k] = a[m, n]^T . b[m, k]: a Linear's weight gradient dy^T x, a
 * Conv1D's x^T dy. The threads take blocks of GEMM_ROWS rows of out (the
 * parts start at multiples of it), each one single-threaded sgemm. */
#define GEMM_ROWS 64

typedef struct tn_args {
    float *out;
    const float *a, *b;
    int64_t m, n, k;
} tn_args;

static void matmul_tn_part(void *ctx, int64_t b0, int64_t b1)
{
    const tn_args *t = ctx;
    const int64_t i0 = b0 * GEMM_ROWS, i1 = b1 * GEMM_ROWS < t->n ? b1 * GEMM_ROWS : t->n;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(i1 - i0), (int)t->k, (int)t->m, 1.0f, t->a + i0,
                (int)t->n, t->b, (int)t->k, 0.0f, t->out + i0 * t->k, (int)t->k);
}

void tp_cpu_matmul_tn(float *out, const float *a, const float *b, int64_t m, int64_t n, int64_t k)
{
    /* the CBLAS interface takes int (blasint) sizes */
    assert(m >= 0 && n >= 0 && k >= 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    if (n == 0 || k == 0)
        return;
    if (m == 0) { /* an empty sum; the leading dimensions below would be 0 */
        memset(out, 0, (size_t)(n * k) * sizeof *out);
        return;
    }
    tn_args t = {out, a, b, m, n, k};
    tp_cpu_parallel((n + GEMM_ROWS - 1) / GEMM_ROWS, 1, matmul_tn_part, &t);
}

/* The arguments of the row-wise and column-block kernels below. */
typedef struct grad_args {
    float *out;
    const float *x, *dy, *w;
    const float *add;       /* norm_dx: added to dx, or NULL */
    const int32_t *ids;
    int64_t m, n, rows, vocab_start;
    double offset;
    float eps, scale;
    bool centered, masked;
} grad_args;

/* rows per part at least */
#define ROW_GRAIN 8

static void sum_rows_part(void *ctx, int64_t c0, int64_t c1)
{
    const grad_args *a = ctx;
    const int64_t n = a->n;
    double acc[COLUMN_BLOCK];
    for (int64_t j0 = c0 * COLUMN_BLOCK; j0 < n && j0 < c1 * COLUMN_BLOCK; j0 += COLUMN_BLOCK) {
        const int64_t nb = n - j0 < COLUMN_BLOCK ? n - j0 : COLUMN_BLOCK;
        memset(acc, 0, sizeof acc);
        for (int64_t i = 0; i < a->m; i++)
            for (int64_t j = 0; j < nb; j++)
                acc[j] += a->x[i * n + j0 + j];
        for (int64_t j = 0; j < nb; j++)
            a->out[j0 + j] = (float)((double)a->scale * acc[j]);
    }
}

/* out[j] = scale * sum_i x[i, j]: a bias's gradient (scale is bias_add's,
 * 1 / tp for a bias added to a Partial tensor). */
void tp_cpu_sum_rows(float *out, const float *x, int64_t m, int64_t n, float scale)
{
    grad_args a = {.out = out, .x = x, .m = m, .n = n, .scale = scale};
    tp_cpu_parallel((n + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, sum_rows_part, &a);
}

/* ------------------------------------------------------------------------ */
/* normalisation                                                             */
/* ------------------------------------------------------------------------ */

/* RMSNorm is LayerNorm's uncentred case (norm_stats.h), so one pair of
 * kernels serves both; the statistics are the forward kernels' own. */

/* With gy = dy * w' (w' = offset + w), the input gradient is
 *   dx = inv * (gy - mean(gy) - xhat * mean(gy * xhat))
 * (RMSNorm: without the mean(gy) term, as its mean is not subtracted). All
 * sums are read before dx is written, so dx may equal x or dy. */
static void norm_dx_part(void *ctx, int64_t i0, int64_t i1)
{
    const grad_args *a = ctx;
    const int64_t n = a->n;
    const double offset = a->offset;
    for (int64_t i = i0; i < i1; i++) {
        const float *xr = a->x + i * n, *dyr = a->dy + i * n;
        const tp_row_norm st = tp_cpu_norm_stats(xr, n, a->eps, a->centered);
        double sum_gy = 0.0, sum_gy_xhat = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double gy = (double)dyr[j] * (offset + a->w[j]);
            sum_gy += gy;
            sum_gy_xhat += gy * ((double)xr[j] - st.mean) * st.inv;
        }
        const double mean_gy = a->centered ? sum_gy / (double)n : 0.0, mean_gy_xhat = sum_gy_xhat / (double)n;
        for (int64_t j = 0; j < n; j++) {
            double gy = (double)dyr[j] * (offset + a->w[j]);
            double xhat = ((double)xr[j] - st.mean) * st.inv;
            const float dx = (float)(st.inv * (gy - mean_gy - xhat * mean_gy_xhat));
            a->out[i * n + j] = a->add ? a->add[i * n + j] + dx : dx;
        }
    }
}

static void norm_dx(float *dx, const float *x, const float *dy, const float *w, double offset, int64_t m, int64_t n,
                    float eps, bool centered, const float *add)
{
    assert(n > 0 && w);
    grad_args a = {.out = dx, .x = x, .dy = dy, .w = w, .add = add, .n = n, .offset = offset, .eps = eps,
                   .centered = centered};
    tp_cpu_parallel(m, ROW_GRAIN, norm_dx_part, &a);
}

/* dw[j] = sum_i dy[i, j] * xhat[i, j]: the same whatever the weight's
 * offset (d(offset + w) / dw = 1). Each row's statistics are computed once
 * (threads over rows), then the sums (threads over column blocks). */
typedef struct dw_args {
    grad_args g;
    tp_row_norm *stats; /* [m] */
} dw_args;

static void norm_stats_part(void *ctx, int64_t i0, int64_t i1)
{
    const dw_args *a = ctx;
    for (int64_t i = i0; i < i1; i++)
        a->stats[i] = tp_cpu_norm_stats(a->g.x + i * a->g.n, a->g.n, a->g.eps, a->g.centered);
}

static void norm_dw_part(void *ctx, int64_t c0, int64_t c1)
{
    const dw_args *a = ctx;
    const int64_t n = a->g.n;
    double acc[COLUMN_BLOCK];
    for (int64_t j0 = c0 * COLUMN_BLOCK; j0 < n && j0 < c1 * COLUMN_BLOCK; j0 += COLUMN_BLOCK) {
        const int64_t nb = n - j0 < COLUMN_BLOCK ? n - j0 : COLUMN_BLOCK;
        memset(acc, 0, sizeof acc);
        for (int64_t i = 0; i < a->g.m; i++) {
            const float *xr = a->g.x + i * n + j0, *dyr = a->g.dy + i * n + j0;
            const tp_row_norm st = a->stats[i];
            for (int64_t j = 0; j < nb; j++)
                acc[j] += (double)dyr[j] * (((double)xr[j] - st.mean) * st.inv);
        }
        for (int64_t j = 0; j < nb; j++)
            a->g.out[j0 + j] = (float)acc[j];
    }
}

static void norm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps, bool centered)
{
    assert(n > 0);
    dw_args a = {{.out = dw, .x = x, .dy = dy, .m = m, .n = n, .eps = eps, .centered = centered}, NULL};
    a.stats = tp_xmalloc((size_t)m * sizeof *a.stats + 1);
    tp_cpu_parallel(m, ROW_GRAIN, norm_stats_part, &a);
    tp_cpu_parallel((n + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, norm_dw_part, &a);
    free(a.stats);
}

void tp_cpu_rmsnorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps,
                       bool unit_offset, const float *add)
{
    norm_dx(dx, x, dy, w, unit_offset ? 1.0 : 0.0, m, n, eps, false, add);
}

void tp_cpu_rmsnorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    norm_dw(dw, x, dy, m, n, eps, false);
}

void tp_cpu_layernorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps)
{
    norm_dx(dx, x, dy, w, 0.0, m, n, eps, true, NULL);
}

void tp_cpu_layernorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    norm_dw(dw, x, dy, m, n, eps, true);
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                               */
/* ------------------------------------------------------------------------ */

/* The derivatives, in double, of the forward's functions (SiLU's and
 * gelu_new's: vec.h, from an fp32 exp). */
static double gelu_erf_grad(double x)
{
    /* 0.5 (1 + erf(x / sqrt(2))) + x phi(x), phi the standard normal density */
    const double inv_sqrt_2pi = 0.3989422804014327;
    return 0.5 * (1.0 + erf(x * 0.7071067811865476)) + x * inv_sqrt_2pi * exp(-0.5 * x * x);
}

/* elements per part at least */
#define ELEMENT_GRAIN 4096

typedef struct unary_grad_args {
    tp_unary op;
    float *dx;
    const float *x, *dy;
    float cap; /* softcap's */
} unary_grad_args;

static void unary_grad_part(void *ctx, int64_t i0, int64_t i1)
{
    const unary_grad_args *a = ctx;
    float *dx = a->dx;
    const float *x = a->x, *dy = a->dy;
    switch (a->op) {
    case TP_UNARY_SILU:
        tp_cpu_vec_host()->silu_grad(dx + i0, x + i0, dy + i0, i1 - i0);
        break;
    case TP_UNARY_GELU_TANH:
        tp_cpu_vec_host()->gelu_tanh_grad(dx + i0, x + i0, dy + i0, i1 - i0);
        break;
    case TP_UNARY_GELU_ERF:
        for (int64_t i = i0; i < i1; i++)
            dx[i] = (float)((double)dy[i] * gelu_erf_grad(x[i]));
        break;
    case TP_UNARY_RELU:
        /* torch's threshold_backward: the gradient passes where the output
         * is positive, so 0 at x = 0 and at NaN */
        for (int64_t i = i0; i < i1; i++)
            dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
        break;
    default:
        assert(!"unknown unary op");
    }
}

void tp_cpu_unary_grad(tp_unary op, float *dx, const float *x, const float *dy, int64_t n)
{
    unary_grad_args a = {.op = op, .dx = dx, .x = x, .dy = dy};
    tp_cpu_parallel(n, ELEMENT_GRAIN, unary_grad_part, &a);
}

/* d/dx cap tanh(x / cap) = 1 - tanh^2(x / cap) */
static void softcap_grad_part(void *ctx, int64_t i0, int64_t i1)
{
    const unary_grad_args *a = ctx;
    for (int64_t i = i0; i < i1; i++) {
        double th = tanh((double)a->x[i] / a->cap);
        a->dx[i] = (float)((double)a->dy[i] * (1.0 - th * th));
    }
}

void tp_cpu_softcap_grad(float *dx, const float *x, const float *dy, int64_t n, float cap)
{
    unary_grad_args a = {.dx = dx, .x = x, .dy = dy, .cap = cap};
    tp_cpu_parallel(n, ELEMENT_GRAIN, softcap_grad_part, &a);
}

/* ------------------------------------------------------------------------ */
/* embedding and layout                                                      */
/* ------------------------------------------------------------------------ */

/* The lookup's transpose: every token adds its row of dy into the row of
 * its id. A vocab-parallel rank holds rows [vocab_start, vocab_start +
 * rows); the tokens whose ids it does not hold got zeros from the forward
 * and add nothing here. The threads take blocks of columns, every token in
 * order for each, so a row that several tokens add into sums them in the
 * same order whatever the thread count. */
static void embedding_grad_part(void *ctx, int64_t c0, int64_t c1)
{
    const grad_args *a = ctx;
    const int64_t dim = a->n, j0 = c0 * COLUMN_BLOCK, j1 = c1 * COLUMN_BLOCK < dim ? c1 * COLUMN_BLOCK : dim;
    for (int64_t r = 0; r < a->rows; r++)
        memset(a->out + r * dim + j0, 0, (size_t)(j1 - j0) * sizeof *a->out);
    for (int64_t t = 0; t < a->m; t++) {
        int64_t r = (int64_t)a->ids[t] - a->vocab_start;
        if (r < 0 || r >= a->rows) {
            assert(a->masked && "embedding id out of range");
            continue;
        }
        float *o = a->out + r * dim;
        const float *g = a->dy + t * dim;
        for (int64_t c = j0; c < j1; c++)
            o[c] += g[c];
    }
}

void tp_cpu_embedding_grad(float *dw, const int32_t *ids, const float *dy, int64_t ntok, int64_t rows, int64_t dim,
                           int64_t vocab_start, bool masked)
{
    grad_args a = {.out = dw, .dy = dy, .ids = ids, .m = ntok, .n = dim, .rows = rows, .vocab_start = vocab_start,
                   .masked = masked};
    tp_cpu_parallel((dim + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, embedding_grad_part, &a);
}

/* narrow's transpose: zeros, with dy's run of each outer slab placed at
 * [start, start + length) of dim (narrow_dims.h). */
void tp_cpu_narrow_grad(float *out, const float *dy, const int64_t *shape, int rank, int dim, int64_t start,
                        int64_t length)
{
    const narrow_dims nd = narrow_dims_of(shape, rank, dim, start, length);
    const size_t total = (size_t)(nd.outer * nd.extent * nd.inner) * sizeof *out;
    const size_t run = (size_t)(length * nd.inner) * sizeof *out;
    if (total == 0)
        return;
    memset(out, 0, total);
    for (int64_t o = 0; run && o < nd.outer; o++)
        memcpy(out + (o * nd.extent + start) * nd.inner, dy + o * length * nd.inner, run);
}

/* ------------------------------------------------------------------------ */
/* cross-entropy                                                             */
/* ------------------------------------------------------------------------ */

/* The rows the mean is over: those with a label. Every rank has all the
 * labels, so a vocab-parallel rank counts the same N. */
static int64_t labelled_rows(const int32_t *labels, int64_t b, int64_t s, int shift)
{
    int64_t count = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t < s; t++)
            count += row_label(labels, bi, t, s, shift) != CE_IGNORE;
    return count;
}

/* One row's d loss / d logits over its v local columns, of which the first
 * nreal are real: (exp(l - max) / sumexp - [c == label_col]) / N, with
 * label_col local (outside [0, v) when another rank holds the label), 0 in
 * the padded columns. */
static void ce_row_grad(float *out, const float *row, int64_t v, int64_t nreal, float max, double sumexp,
                        int64_t label_col, double inv_count)
{
    tp_cpu_vec_host()->exp_sum(out, row, nreal, max); /* the exps, as the loss sums them */
    for (int64_t c = 0; c < nreal; c++) {
        double p = (double)out[c] / sumexp;
        out[c] = (float)((p - (c == label_col ? 1.0 : 0.0)) * inv_count);
    }
    for (int64_t c = nreal; c < v; c++)
        out[c] = 0.0f;
}

/* 1 / the loss's denominator. With no labelled row the loss is NaN (0/0)
 * but torch's gradient is 0: every row is ignored. */
static double inverse_denominator(tp_ce_rule rule, const int32_t *labels, int64_t b, int64_t s)
{
    const double d = ce_denominator(rule, rule.divisor > 0 ? 0 : labelled_rows(labels, b, s, rule.shift));
    return d > 0 ? 1.0 / d : 0.0;
}

/* The rows of the two gradients below: the full-vocabulary one (max and
 * sumexp NULL: each row's softmax as cpu_cross_entropy computes it) and
 * the vocab-parallel one (the all-reduced max and sumexp of each row). */
typedef struct ce_grad_args {
    float *dlogits;
    const float *logits, *max, *sumexp;
    const int32_t *labels;
    int64_t s, v, vocab_start, nreal;
    int shift;
    double inv_count;
} ce_grad_args;

static void ce_grad_part(void *ctx, int64_t r0, int64_t r1)
{
    const ce_grad_args *a = ctx;
    const int64_t v = a->v;
    for (int64_t r = r0; r < r1; r++) {
        const int32_t label = row_label(a->labels, r / a->s, r % a->s, a->s, a->shift);
        float *out = a->dlogits + r * v;
        const float *row = a->logits + r * v;
        if (label == CE_IGNORE) { /* a shifted loss's last position, or an ignored label */
            memset(out, 0, (size_t)v * sizeof *out);
            continue;
        }
        if (!a->max) {
            assert(label >= 0 && label < a->nreal && "label outside the vocabulary");
            const ce_row st = ce_row_of(row, a->nreal);
            ce_row_grad(out, row, v, a->nreal, (float)st.max, st.sumexp, label, a->inv_count);
        } else {
            ce_row_grad(out, row, v, a->nreal, a->max[r], a->sumexp[r], (int64_t)label - a->vocab_start,
                        a->inv_count);
        }
    }
}

void tp_cpu_cross_entropy_grad(float *dlogits, const float *logits, const int32_t *labels, int64_t b, int64_t s,
                               int64_t v, int64_t vocab, tp_ce_rule rule)
{
    assert(vocab > 0 && vocab <= v);
    ce_grad_args a = {.dlogits = dlogits, .logits = logits, .labels = labels, .s = s, .v = v, .nreal = vocab,
                      .shift = rule.shift, .inv_count = inverse_denominator(rule, labels, b, s)};
    tp_cpu_parallel(b * s, 1, ce_grad_part, &a);
}

/* PyTorch's loss_parallel backward: each rank's columns from the
 * all-reduced max and sumexp, with no communication. */
void tp_cpu_ce_grad(float *dlogits, const float *logits, const float *max, const float *sumexp,
                    const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab,
                    tp_ce_rule rule)
{
    ce_grad_args a = {.dlogits = dlogits, .logits = logits, .max = max, .sumexp = sumexp, .labels = labels, .s = s,
                      .v = v, .vocab_start = vocab_start, .nreal = real_columns(v, vocab_start, vocab),
                      .shift = rule.shift, .inv_count = inverse_denominator(rule, labels, b, s)};
    tp_cpu_parallel(b * s, 1, ce_grad_part, &a);
}

/* d loss / d x of loss = x.sum() */
void tp_cpu_ones(float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f;
}
