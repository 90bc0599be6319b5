// grad_reference.h: the backward kernels in double, with the backend
// table's signatures, standing in for the CPU backend's until it has them
// (test_kernels_grad.cc takes the CPU's where they exist).
#ifndef TP_GRAD_REFERENCE_H
#define TP_GRAD_REFERENCE_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
}

namespace tp_gradref {

inline void matmul_tn(float *out, const float *a, const float *b, int64_t m, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) {
            double s = 0.0;
            for (int64_t r = 0; r < m; r++)
                s += (double)a[r * n + i] * b[r * k + j];
            out[i * k + j] = (float)s;
        }
}

inline void sum_rows(float *out, const float *x, int64_t m, int64_t n, float scale)
{
    for (int64_t j = 0; j < n; j++) {
        double s = 0.0;
        for (int64_t i = 0; i < m; i++)
            s += x[i * n + j];
        out[j] = (float)(scale * s);
    }
}

inline double rms_inv(const float *x, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t j = 0; j < n; j++)
        ss += (double)x[j] * x[j];
    return 1.0 / std::sqrt(ss / (double)n + eps);
}

inline double mean_inv(const float *x, int64_t n, float eps, double *mean)
{
    double s = 0.0, sq = 0.0;
    for (int64_t j = 0; j < n; j++)
        s += x[j];
    *mean = s / (double)n;
    for (int64_t j = 0; j < n; j++)
        sq += (x[j] - *mean) * (x[j] - *mean);
    return 1.0 / std::sqrt(sq / (double)n + eps);
}

inline void rmsnorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps,
                       bool unit_offset)
{
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * n, *g = dy + i * n;
        const double r = rms_inv(xr, n, eps);
        double dot = 0.0;
        for (int64_t j = 0; j < n; j++)
            dot += (double)g[j] * ((unit_offset ? 1.0 : 0.0) + w[j]) * xr[j];
        for (int64_t j = 0; j < n; j++)
            dx[i * n + j] = (float)(r * g[j] * ((unit_offset ? 1.0 : 0.0) + w[j]) - xr[j] * r * r * r * dot / (double)n);
    }
}

inline void rmsnorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    std::vector<double> acc((size_t)n, 0.0);
    for (int64_t i = 0; i < m; i++) {
        const double r = rms_inv(x + i * n, n, eps);
        for (int64_t j = 0; j < n; j++)
            acc[(size_t)j] += (double)dy[i * n + j] * x[i * n + j] * r;
    }
    for (int64_t j = 0; j < n; j++)
        dw[j] = (float)acc[(size_t)j];
}

inline void layernorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps)
{
    for (int64_t i = 0; i < m; i++) {
        const float *xr = x + i * n, *g = dy + i * n;
        double mean;
        const double r = mean_inv(xr, n, eps, &mean);
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = 0; j < n; j++) {
            sg += (double)g[j] * w[j];
            sgx += (double)g[j] * w[j] * (xr[j] - mean) * r;
        }
        for (int64_t j = 0; j < n; j++)
            dx[i * n + j] = (float)(r * ((double)g[j] * w[j] - sg / (double)n - (xr[j] - mean) * r * sgx / (double)n));
    }
}

inline void layernorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    std::vector<double> acc((size_t)n, 0.0);
    for (int64_t i = 0; i < m; i++) {
        double mean;
        const double r = mean_inv(x + i * n, n, eps, &mean);
        for (int64_t j = 0; j < n; j++)
            acc[(size_t)j] += (double)dy[i * n + j] * (x[i * n + j] - mean) * r;
    }
    for (int64_t j = 0; j < n; j++)
        dw[j] = (float)acc[(size_t)j];
}

inline void attention_grad(tp_attention_grad which, float *out, const float *q, const float *k, const float *v,
                           const float *dy, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, double scale,
                           double softcap)
{
    const int64_t nq = b * s * h * d, nk = b * s * g * d;
    std::vector<double> dq((size_t)nq, 0.0), dk((size_t)nk, 0.0), dv((size_t)nk, 0.0), p((size_t)s), dp((size_t)s),
        capd((size_t)s);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t hi = 0; hi < h; hi++) {
            const int64_t kh = hi / (h / g);
            for (int64_t t = 0; t < s; t++) {
                const float *qt = q + ((bi * s + t) * h + hi) * d, *dyt = dy + ((bi * s + t) * h + hi) * d;
                double mx = -INFINITY, sum = 0.0, dsum = 0.0;
                for (int64_t j = 0; j <= t; j++) {
                    const float *kj = k + ((bi * s + j) * g + kh) * d, *vj = v + ((bi * s + j) * g + kh) * d;
                    double raw = 0.0, dpj = 0.0;
                    for (int64_t c = 0; c < d; c++) {
                        raw += (double)qt[c] * kj[c];
                        dpj += (double)dyt[c] * vj[c];
                    }
                    raw *= scale;
                    const double th = softcap > 0 ? std::tanh(raw / softcap) : 0.0;
                    p[(size_t)j] = softcap > 0 ? softcap * th : raw;
                    capd[(size_t)j] = softcap > 0 ? 1.0 - th * th : 1.0;
                    dp[(size_t)j] = dpj;
                    mx = std::max(mx, p[(size_t)j]);
                }
                for (int64_t j = 0; j <= t; j++)
                    sum += (p[(size_t)j] = std::exp(p[(size_t)j] - mx));
                for (int64_t j = 0; j <= t; j++)
                    dsum += (p[(size_t)j] /= sum) * dp[(size_t)j];
                for (int64_t j = 0; j <= t; j++) {
                    const double ds = p[(size_t)j] * (dp[(size_t)j] - dsum) * capd[(size_t)j];
                    const int64_t kj = ((bi * s + j) * g + kh) * d, qi = ((bi * s + t) * h + hi) * d;
                    for (int64_t c = 0; c < d; c++) {
                        dq[(size_t)(qi + c)] += scale * ds * k[kj + c];
                        dk[(size_t)(kj + c)] += scale * ds * q[qi + c];
                        dv[(size_t)(kj + c)] += p[(size_t)j] * dy[qi + c];
                    }
                }
            }
        }
    const std::vector<double> &r = which == TP_ATTENTION_DQ ? dq : which == TP_ATTENTION_DK ? dk : dv;
    for (size_t i = 0; i < r.size(); i++)
        out[i] = (float)r[i];
}

inline void unary_grad(tp_unary op, float *dx, const float *x, const float *dy, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const double v = x[i];
        double f;
        if (op == TP_UNARY_SILU) {
            const double sg = 1.0 / (1.0 + std::exp(-v));
            f = sg * (1.0 + v * (1.0 - sg));
        } else if (op == TP_UNARY_GELU_TANH) {
            const double kc = std::sqrt(2.0 / M_PI), th = std::tanh(kc * (v + 0.044715 * v * v * v));
            f = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * kc * (1.0 + 3.0 * 0.044715 * v * v);
        } else if (op == TP_UNARY_GELU_ERF) {
            f = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
        } else {
            f = v > 0 ? 1.0 : 0.0;
        }
        dx[i] = (float)(dy[i] * f);
    }
}

inline void softcap_grad(float *dx, const float *x, const float *dy, int64_t n, float cap)
{
    for (int64_t i = 0; i < n; i++) {
        const double th = std::tanh((double)x[i] / cap);
        dx[i] = (float)(dy[i] * (1.0 - th * th));
    }
}

inline void embedding_grad(float *dw, const int32_t *ids, const float *dy, int64_t ntok, int64_t rows, int64_t dim,
                           int64_t vocab_start, bool)
{
    std::vector<double> acc((size_t)(rows * dim), 0.0);
    for (int64_t t = 0; t < ntok; t++) {
        const int64_t r = ids[t] - vocab_start;
        if (r >= 0 && r < rows)
            for (int64_t c = 0; c < dim; c++)
                acc[(size_t)(r * dim + c)] += dy[t * dim + c];
    }
    for (size_t i = 0; i < acc.size(); i++)
        dw[i] = (float)acc[i];
}

inline void narrow_grad(float *out, const float *dy, const int64_t *shape, int rank, int dim, int64_t start,
                        int64_t length)
{
    if (dim < 0)
        dim += rank;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < dim; i++)
        outer *= shape[i];
    for (int i = dim + 1; i < rank; i++)
        inner *= shape[i];
    std::memset(out, 0, (size_t)(outer * shape[dim] * inner) * sizeof *out);
    for (int64_t o = 0; o < outer; o++)
        std::memcpy(out + (o * shape[dim] + start) * inner, dy + o * length * inner, (size_t)(length * inner) * 4);
}

inline int32_t label_of(const int32_t *labels, int64_t row, int64_t s)
{
    return row % s + 1 < s ? labels[row + 1] : -100;
}

inline void ce_grad(float *dlogits, const float *logits, const float *max, const float *sumexp, const int32_t *labels,
                    int64_t b, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab)
{
    double n = 0.0;
    for (int64_t r = 0; r < b * s; r++)
        n += label_of(labels, r, s) != -100;
    for (int64_t r = 0; r < b * s; r++) {
        const int32_t label = label_of(labels, r, s);
        const float *row = logits + r * v;
        double mx = max ? max[r] : -INFINITY, sum = 0.0;
        if (!max) {
            for (int64_t c = 0; c < vocab && c < v; c++)
                mx = std::max(mx, (double)row[c]);
            for (int64_t c = 0; c < vocab && c < v; c++)
                sum += std::exp(row[c] - mx);
        } else {
            sum = sumexp[r];
        }
        for (int64_t c = 0; c < v; c++) {
            double gr = 0.0;
            if (label != -100 && vocab_start + c < vocab)
                gr = (std::exp(row[c] - mx) / sum - (vocab_start + c == label)) / n;
            dlogits[r * v + c] = (float)gr;
        }
    }
}

inline void cross_entropy_grad(float *dlogits, const float *logits, const int32_t *labels, int64_t b, int64_t s,
                               int64_t v, int64_t vocab)
{
    ce_grad(dlogits, logits, nullptr, nullptr, labels, b, s, v, 0, vocab);
}

inline void adamw(float *w, const float *g, float *m, float *v, int64_t n, const tp_adamw_step *st)
{
    const double bc1 = 1.0 - std::pow(st->beta1, (double)st->step), bc2 = 1.0 - std::pow(st->beta2, (double)st->step);
    for (int64_t i = 0; i < n; i++) {
        double wi = w[i] * (1.0 - st->lr * st->weight_decay);
        const double mi = m[i] + (1.0 - st->beta1) * (g[i] - m[i]);
        const double vi = st->beta2 * v[i] + (1.0 - st->beta2) * (double)g[i] * g[i];
        wi -= st->lr / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + st->eps);
        w[i] = (float)wi;
        m[i] = (float)mi;
        v[i] = (float)vi;
    }
}

inline double sum_squares(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

// The CPU backend's table with these where it has no training kernels.
inline tp_backend with_fallbacks(const tp_backend &cpu)
{
    tp_backend b = cpu;
#define TP_GRADREF_FILL(name)                                                                                           \
    if (!b.name)                                                                                                        \
        b.name = name;
    TP_GRADREF_FILL(matmul_tn)
    TP_GRADREF_FILL(sum_rows)
    TP_GRADREF_FILL(rmsnorm_dx)
    TP_GRADREF_FILL(rmsnorm_dw)
    TP_GRADREF_FILL(layernorm_dx)
    TP_GRADREF_FILL(layernorm_dw)
    TP_GRADREF_FILL(attention_grad)
    TP_GRADREF_FILL(unary_grad)
    TP_GRADREF_FILL(softcap_grad)
    TP_GRADREF_FILL(embedding_grad)
    TP_GRADREF_FILL(narrow_grad)
    TP_GRADREF_FILL(cross_entropy_grad)
    TP_GRADREF_FILL(ce_grad)
    TP_GRADREF_FILL(adamw)
    TP_GRADREF_FILL(sum_squares)
#undef TP_GRADREF_FILL
    return b;
}

} // namespace tp_gradref

#endif // TP_GRAD_REFERENCE_H
