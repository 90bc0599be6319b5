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
 * time; a norm's row statistics are recomputed once per block), keeping
 * the rule of backend_cpu.c that no kernel allocates. The exceptions are
 * matmul_tn (sgemm, as the forward matmul) and the embedding's scatter-add
 * (float, as the rows it adds into are only known from the ids).
 *
 * Every kernel writes its whole output (zeros where the gradient is 0). */
#include "runtime/backends/cpu/cpu_training.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "runtime/backends/cpu/ce_rows.h"
#include "runtime/backends/cpu/narrow_dims.h"

/* double accumulators for the columns [j0, j0 + COLUMN_BLOCK) of a sum over rows */
#define COLUMN_BLOCK 256

/* ------------------------------------------------------------------------ */
/* linear algebra                                                            */
/* ------------------------------------------------------------------------ */

/* out[n, k] = a[m, n]^T . b[m, k]: a Linear's weight gradient dy^T x, a
 * Conv1D's x^T dy. */
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
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)k, (int)m, 1.0f, a, (int)n, b, (int)k, 0.0f, out,
                (int)k);
}

/* out[j] = scale * sum_i x[i, j]: a bias's gradient (scale is bias_add's,
 * 1 / tp for a bias added to a Partial tensor). */
void tp_cpu_sum_rows(float *out, const float *x, int64_t m, int64_t n, float scale)
{
    double acc[COLUMN_BLOCK];
    for (int64_t j0 = 0; j0 < n; j0 += COLUMN_BLOCK) {
        const int64_t nb = n - j0 < COLUMN_BLOCK ? n - j0 : COLUMN_BLOCK;
        memset(acc, 0, sizeof acc);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nb; j++)
                acc[j] += x[i * n + j0 + j];
        for (int64_t j = 0; j < nb; j++)
            out[j0 + j] = (float)((double)scale * acc[j]);
    }
}

/* ------------------------------------------------------------------------ */
/* normalisation                                                             */
/* ------------------------------------------------------------------------ */

/* RMSNorm and LayerNorm both compute y = xhat * w' (+ b) with xhat =
 * (x - mean) * inv, inv = 1 / sqrt(var + eps): RMSNorm is the uncentred
 * case (mean 0, var the mean square), so one pair of kernels serves both.
 * The statistics are computed exactly as cpu_rmsnorm and cpu_layernorm do
 * (two passes for LayerNorm's variance). */
typedef struct row_norm {
    double mean, inv;
} row_norm;

static row_norm norm_stats(const float *xr, int64_t n, float eps, bool centered)
{
    row_norm st = {0.0, 0.0};
    if (centered) {
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++)
            sum += xr[j];
        st.mean = sum / (double)n;
    }
    double sq = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double dlt = xr[j] - st.mean;
        sq += dlt * dlt;
    }
    st.inv = 1.0 / sqrt(sq / (double)n + (double)eps);
    return st;
}

/* With gy = dy * w' (w' = offset + w), the input gradient is
 *   dx = inv * (gy - mean(gy) - xhat * mean(gy * xhat))
 * (RMSNorm: without the mean(gy) term, as its mean is not subtracted). All
 * sums are read before dx is written, so dx may equal x or dy. */
static void norm_dx(float *dx, const float *x, const float *dy, const float *w, double offset, int64_t m, int64_t n,
                    float eps, bool centered)
{
    assert(n > 0 && w);
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * n, *dyr = dy + i * n;
        const row_norm st = norm_stats(xr, n, eps, centered);
        double sum_gy = 0.0, sum_gy_xhat = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double gy = (double)dyr[j] * (offset + w[j]);
            sum_gy += gy;
            sum_gy_xhat += gy * ((double)xr[j] - st.mean) * st.inv;
        }
        const double mean_gy = centered ? sum_gy / (double)n : 0.0, mean_gy_xhat = sum_gy_xhat / (double)n;
        for (int64_t j = 0; j < n; j++) {
            double gy = (double)dyr[j] * (offset + w[j]);
            double xhat = ((double)xr[j] - st.mean) * st.inv;
            dx[i * n + j] = (float)(st.inv * (gy - mean_gy - xhat * mean_gy_xhat));
        }
    }
}

/* dw[j] = sum_i dy[i, j] * xhat[i, j]: the same whatever the weight's
 * offset (d(offset + w) / dw = 1). */
static void norm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps, bool centered)
{
    assert(n > 0);
    double acc[COLUMN_BLOCK];
    for (int64_t j0 = 0; j0 < n; j0 += COLUMN_BLOCK) {
        const int64_t nb = n - j0 < COLUMN_BLOCK ? n - j0 : COLUMN_BLOCK;
        memset(acc, 0, sizeof acc);
        for (int64_t i = 0; i < m; i++) {
            const float *xr = x + i * n, *dyr = dy + i * n + j0;
            const row_norm st = norm_stats(xr, n, eps, centered);
            for (int64_t j = 0; j < nb; j++)
                acc[j] += (double)dyr[j] * (((double)xr[j0 + j] - st.mean) * st.inv);
        }
        for (int64_t j = 0; j < nb; j++)
            dw[j0 + j] = (float)acc[j];
    }
}

void tp_cpu_rmsnorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps,
                       bool unit_offset)
{
    norm_dx(dx, x, dy, w, unit_offset ? 1.0 : 0.0, m, n, eps, false);
}

void tp_cpu_rmsnorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    norm_dw(dw, x, dy, m, n, eps, false);
}

void tp_cpu_layernorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps)
{
    norm_dx(dx, x, dy, w, 0.0, m, n, eps, true);
}

void tp_cpu_layernorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    norm_dw(dw, x, dy, m, n, eps, true);
}

/* ------------------------------------------------------------------------ */
/* elementwise                                                               */
/* ------------------------------------------------------------------------ */

/* The derivatives, in double, of the forward's functions. */
static double silu_grad(double x)
{
    /* silu' = s (1 + x (1 - s)), s = sigmoid(x); for x << 0, e^-x = inf
     * gives s = 0 and the limit 0 rather than NaN */
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

static double gelu_tanh_grad(double x)
{
    /* gelu_new = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
    const double kc = 0.7978845608028654; /* sqrt(2 / pi) */
    double th = tanh(kc * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kc * (1.0 + 3.0 * 0.044715 * x * x);
}

static double gelu_erf_grad(double x)
{
    /* 0.5 (1 + erf(x / sqrt(2))) + x phi(x), phi the standard normal density */
    const double inv_sqrt_2pi = 0.3989422804014327;
    return 0.5 * (1.0 + erf(x * 0.7071067811865476)) + x * inv_sqrt_2pi * exp(-0.5 * x * x);
}

void tp_cpu_unary_grad(tp_unary op, float *dx, const float *x, const float *dy, int64_t n)
{
    switch (op) {
    case TP_UNARY_SILU:
        for (int64_t i = 0; i < n; i++)
            dx[i] = (float)((double)dy[i] * silu_grad(x[i]));
        break;
    case TP_UNARY_GELU_TANH:
        for (int64_t i = 0; i < n; i++)
            dx[i] = (float)((double)dy[i] * gelu_tanh_grad(x[i]));
        break;
    case TP_UNARY_GELU_ERF:
        for (int64_t i = 0; i < n; i++)
            dx[i] = (float)((double)dy[i] * gelu_erf_grad(x[i]));
        break;
    case TP_UNARY_RELU:
        /* torch's threshold_backward: the gradient passes where the output
         * is positive, so 0 at x = 0 and at NaN */
        for (int64_t i = 0; i < n; i++)
            dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
        break;
    default:
        assert(!"unknown unary op");
    }
}

/* d/dx cap tanh(x / cap) = 1 - tanh^2(x / cap) */
void tp_cpu_softcap_grad(float *dx, const float *x, const float *dy, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++) {
        double th = tanh((double)x[i] / cap);
        dx[i] = (float)((double)dy[i] * (1.0 - th * th));
    }
}

/* ------------------------------------------------------------------------ */
/* embedding and layout                                                      */
/* ------------------------------------------------------------------------ */

/* The lookup's transpose: every token adds its row of dy into the row of
 * its id. A vocab-parallel rank holds rows [vocab_start, vocab_start +
 * rows); the tokens whose ids it does not hold got zeros from the forward
 * and add nothing here. */
void tp_cpu_embedding_grad(float *dw, const int32_t *ids, const float *dy, int64_t ntok, int64_t rows, int64_t dim,
                           int64_t vocab_start, bool masked)
{
    memset(dw, 0, (size_t)(rows * dim) * sizeof *dw);
    for (int64_t t = 0; t < ntok; t++) {
        int64_t r = (int64_t)ids[t] - vocab_start;
        if (r < 0 || r >= rows) {
            assert(masked && "embedding id out of range");
            continue;
        }
        float *o = dw + r * dim;
        const float *g = dy + t * dim;
        for (int64_t c = 0; c < dim; c++)
            o[c] += g[c];
    }
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

/* The rows the mean is over: those with a (shifted) label. Every rank has
 * all the labels, so a vocab-parallel rank counts the same N. */
static int64_t labelled_rows(const int32_t *labels, int64_t b, int64_t s)
{
    int64_t count = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t + 1 < s; t++)
            count += shifted_label(labels, bi, t, s) != CE_IGNORE;
    return count;
}

/* One row's d loss / d logits over its v local columns, of which the first
 * nreal are real: (exp(l - max) / sumexp - [c == label_col]) / N, with
 * label_col local (outside [0, v) when another rank holds the label), 0 in
 * the padded columns. */
static void ce_row_grad(float *out, const float *row, int64_t v, int64_t nreal, double max, double sumexp,
                        int64_t label_col, double inv_count)
{
    for (int64_t c = 0; c < nreal; c++) {
        double p = exp((double)row[c] - max) / sumexp;
        out[c] = (float)((p - (c == label_col ? 1.0 : 0.0)) * inv_count);
    }
    for (int64_t c = nreal; c < v; c++)
        out[c] = 0.0f;
}

/* With no labelled row the loss is NaN (0/0) but torch's gradient is 0:
 * every row is ignored. */
static double inverse_count(int64_t count) { return count ? 1.0 / (double)count : 0.0; }

void tp_cpu_cross_entropy_grad(float *dlogits, const float *logits, const int32_t *labels, int64_t b, int64_t s,
                               int64_t v, int64_t vocab)
{
    assert(vocab > 0 && vocab <= v);
    const double inv_count = inverse_count(labelled_rows(labels, b, s));
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t < s; t++) {
            const int64_t r = bi * s + t;
            const int32_t label = shifted_label(labels, bi, t, s);
            if (label == CE_IGNORE) { /* the last position, or an ignored label */
                memset(dlogits + r * v, 0, (size_t)v * sizeof *dlogits);
                continue;
            }
            assert(label >= 0 && label < vocab && "label outside the vocabulary");
            /* the row's softmax as cpu_cross_entropy computes it */
            const ce_row st = ce_row_of(logits + r * v, vocab);
            ce_row_grad(dlogits + r * v, logits + r * v, v, vocab, st.max, st.sumexp, label, inv_count);
        }
}

/* PyTorch's loss_parallel backward: each rank's columns from the
 * all-reduced max and sumexp, with no communication. */
void tp_cpu_ce_grad(float *dlogits, const float *logits, const float *max, const float *sumexp,
                    const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab)
{
    const int64_t nreal = real_columns(v, vocab_start, vocab);
    const double inv_count = inverse_count(labelled_rows(labels, b, s));
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t t = 0; t < s; t++) {
            const int64_t r = bi * s + t;
            const int32_t label = shifted_label(labels, bi, t, s);
            if (label == CE_IGNORE) {
                memset(dlogits + r * v, 0, (size_t)v * sizeof *dlogits);
                continue;
            }
            ce_row_grad(dlogits + r * v, logits + r * v, v, nreal, max[r], sumexp[r], (int64_t)label - vocab_start,
                        inv_count);
        }
}

/* d loss / d x of loss = x.sum() */
void tp_cpu_ones(float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f;
}
