/* attention_grad.c: the gradients of the CPU backend's causal attention
 * (cpu_attention in backend_cpu.c) with respect to q, k or v.
 *
 * For a query row i (one batch element, one query head) with scores
 * S_ij = scale q_i . k_j (capped as softcap tanh(S / softcap) when softcap
 * > 0), P = softmax over the keys j <= i, and the output's gradient dy_i:
 *   dP_ij = dy_i . v_j,   D_i = sum_j P_ij dP_ij,
 *   dS_ij = P_ij (dP_ij - D_i) (times 1 - tanh^2(S_ij / softcap), the cap's
 *           derivative, when softcap > 0),
 *   dq_i = scale sum_j dS_ij k_j,  dk_j += scale dS_ij q_i,  dv_j += P_ij dy_i,
 * where k_j, v_j are those of the kv head i / (h / g) that the query head
 * reads, so a kv head's dk and dv sum over the h / g query heads of its
 * group.
 *
 * Nothing is saved from the forward: each row is recomputed in two passes
 * over its keys, the first for the softmax statistics (max, denominator,
 * D) online as the forward computes them, the second for dS and the
 * output, so the scratch is fixed whatever the sequence length (no kernel
 * of this backend allocates). Scores and probabilities are double. dq's
 * row sums in double over blocks of GRAD_BLOCK keys and is rounded to float
 * once per block, as the forward's output row; dk and dv add one float term
 * per (query head, query row), in a fixed order (query head, then query
 * row), so a kv head's gradient is the same whichever rank computes it. */
#include "runtime/backends/cpu/cpu_training.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define GRAD_BLOCK 128

/* what a row's recomputation needs: kv heads g (key j + 1 is g * d floats
 * after key j), head dim d, and the forward's scale and softcap */
typedef struct attn_shape {
    int64_t g, d;
    double scale, softcap;
} attn_shape;

static double dot(const float *a, const float *b, int64_t d)
{
    double acc = 0.0;
    for (int64_t c = 0; c < d; c++)
        acc += (double)a[c] * b[c];
    return acc;
}

/* The score as the forward computes it; *cap_grad is d score / d (scale q.k). */
static double score(const attn_shape *sh, const float *qr, const float *kr, double *cap_grad)
{
    double sc = dot(qr, kr, sh->d) * sh->scale;
    *cap_grad = 1.0;
    if (sh->softcap > 0) {
        double th = tanh(sc / sh->softcap);
        sc = sh->softcap * th;
        *cap_grad = 1.0 - th * th;
    }
    return sc;
}

/* A query row's softmax max and denominator, and D = sum_j P_j dP_j (only
 * when with_dot: dv does not need it), in one online pass: when the max
 * grows, what was accumulated is rescaled. */
typedef struct row_softmax {
    double max, denom, dot;
} row_softmax;

static row_softmax row_stats(const attn_shape *sh, const float *qr, const float *dyr, const float *k0,
                             const float *v0, int64_t nkeys, bool with_dot)
{
    const int64_t kv_stride = sh->g * sh->d; /* from key j to key j + 1 */
    row_softmax st = {-INFINITY, 0.0, 0.0};
    double cap_grad;
    for (int64_t j = 0; j < nkeys; j++) {
        const double sc = score(sh, qr, k0 + j * kv_stride, &cap_grad);
        if (sc > st.max) {
            /* exp(-inf) = 0 at the first key: nothing to rescale */
            const double rescale = exp(st.max - sc);
            st.denom *= rescale;
            st.dot *= rescale;
            st.max = sc;
        }
        const double e = exp(sc - st.max);
        st.denom += e;
        if (with_dot)
            st.dot += e * dot(dyr, v0 + j * kv_stride, sh->d);
    }
    st.dot /= st.denom;
    return st;
}

/* One query row's contribution to the gradient `which`: dq's row (out_q),
 * or the rows of dk / dv of its keys (out_kv, key j at j * g * d). */
static void row_grad(const attn_shape *sh, tp_attention_grad which, float *out_q, float *out_kv, const float *qr,
                     const float *dyr, const float *k0, const float *v0, int64_t nkeys)
{
    const int64_t kv_stride = sh->g * sh->d, d = sh->d;
    const row_softmax st = row_stats(sh, qr, dyr, k0, v0, nkeys, which != TP_ATTENTION_DV);
    double ds[GRAD_BLOCK], cap_grad;
    for (int64_t kb = 0; kb < nkeys; kb += GRAD_BLOCK) {
        const int64_t nk = nkeys - kb < GRAD_BLOCK ? nkeys - kb : GRAD_BLOCK;
        for (int64_t j = 0; j < nk; j++) {
            const float *kr = k0 + (kb + j) * kv_stride, *vr = v0 + (kb + j) * kv_stride;
            const double p = exp(score(sh, qr, kr, &cap_grad) - st.max) / st.denom;
            if (which == TP_ATTENTION_DV) {
                float *o = out_kv + (kb + j) * kv_stride;
                for (int64_t c = 0; c < d; c++)
                    o[c] = (float)((double)o[c] + p * dyr[c]);
                continue;
            }
            ds[j] = p * (dot(dyr, vr, d) - st.dot) * cap_grad * sh->scale;
            if (which == TP_ATTENTION_DK) {
                float *o = out_kv + (kb + j) * kv_stride;
                for (int64_t c = 0; c < d; c++)
                    o[c] = (float)((double)o[c] + ds[j] * qr[c]);
            }
        }
        if (which != TP_ATTENTION_DQ)
            continue;
        for (int64_t c = 0; c < d; c++) {
            double acc = 0.0;
            for (int64_t j = 0; j < nk; j++)
                acc += ds[j] * k0[(kb + j) * kv_stride + c];
            out_q[c] = (float)((double)out_q[c] + acc);
        }
    }
}

void tp_cpu_attention_grad(tp_attention_grad which, float *out, const float *q, const float *k, const float *v,
                           const float *dy, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, double scale,
                           double softcap)
{
    /* out accumulates: it must not overlap the inputs */
    assert(out != q && out != k && out != v && out != dy);
    assert(g > 0 && h % g == 0 && d > 0);
    assert(which == TP_ATTENTION_DQ || which == TP_ATTENTION_DK || which == TP_ATTENTION_DV);
    const attn_shape sh = {g, d, scale, softcap};
    const int64_t group = h / g; /* query heads per kv head */
    const int64_t out_heads = which == TP_ATTENTION_DQ ? h : g;
    memset(out, 0, (size_t)(b * s * out_heads * d) * sizeof *out);

    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t hi = 0; hi < h; hi++) {
            const int64_t kh = hi / group;
            /* key 0 of this batch element's kv head; key j at j * g * d */
            const float *k0 = k + (bi * s * g + kh) * d, *v0 = v + (bi * s * g + kh) * d;
            float *out_kv = which == TP_ATTENTION_DQ ? NULL : out + (bi * s * g + kh) * d;
            for (int64_t t = 0; t < s; t++) {
                const int64_t row = ((bi * s + t) * h + hi) * d;
                float *out_q = which == TP_ATTENTION_DQ ? out + row : NULL;
                /* causal: query t sees keys 0..t */
                row_grad(&sh, which, out_q, out_kv, q + row, dy + row, k0, v0, t + 1);
            }
        }
}
