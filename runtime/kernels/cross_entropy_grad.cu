// cross_entropy_grad.cu: the gradient of the causal-LM loss (a d loss of 1)
// with respect to the logits, whole or over a rank's vocabulary columns.
// defines: tp_k_cross_entropy_grad, tp_k_ce_grad
//
// Row (b, t) with a label: (softmax - onehot(label)) / N, N the caller's
// divisor or else the rows with a label; rows without one and padded
// columns (at or beyond `vocab`) get 0.
#include "cross_entropy.cuh"

#define CE_GRAD_COUNT_THREADS 1024

// ---- CUDA kernels

// N, from the first kernel to the second: static device memory (launchers
// do not allocate), so two calls must not run concurrently on one device,
// which holds with one compute stream.
static __device__ float ce_grad_rows;

// One block: N.
__global__ void ce_grad_count_kernel(const int32_t *labels, int64_t rows, int64_t s, int shift, float divisor)
{
    float count = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
        count += row_label(labels, r, s, shift) != CE_IGNORE ? 1.0f : 0.0f;
    count = tp_block_sum(count);
    if (threadIdx.x == 0)
        ce_grad_rows = ce_denominator(divisor, count);
}

// One block per row of v local columns, global columns vocab_start + c.
// The row's max and sum of exp come from max / sumexp (all-reduced over
// the ranks) or, when those are NULL, from the row itself (one rank holds
// the whole vocabulary).
template <typename T>
__global__ void ce_grad_kernel(T *dlogits, const T *logits, const float *max, const float *sumexp,
                               const int32_t *labels, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab,
                               int shift)
{
    const int64_t r = blockIdx.x;
    const T *row = logits + r * v;
    T *out = dlogits + r * v;
    const int32_t label = row_label(labels, r, s, shift);
    if (label == CE_IGNORE) {
        for (int64_t c = threadIdx.x; c < v; c += blockDim.x)
            out[c] = tp_from_float<T>(0.0f);
        return;
    }
    const int64_t nreal = real_columns(v, vocab_start, vocab);
    float mx, sum;
    if (max) {
        mx = max[r];
        sum = sumexp[r];
    } else {
        assert(label >= 0 && label < vocab && "label outside the vocabulary");
        mx = row_max(row, nreal);
        sum = row_sumexp(row, nreal, mx);
    }
    const float n = ce_grad_rows;
    for (int64_t c = threadIdx.x; c < v; c += blockDim.x) {
        float g = 0.0f;
        if (c < nreal)
            g = expf(tp_to_float(row[c]) - mx) / sum - (vocab_start + c == label ? 1.0f : 0.0f);
        out[c] = tp_from_float<T>(g / n);
    }
}

// ---- kernel launchers

template <typename T>
static void launch_ce_grad(tp_stream st, T *dlogits, const T *logits, const float *max, const float *sumexp,
                           const int32_t *labels, int64_t rows, int64_t s, int64_t v, int64_t vocab_start,
                           int64_t vocab, int shift, float divisor)
{
    TP_LAUNCH(ce_grad_count_kernel, 1, CE_GRAD_COUNT_THREADS, 0, st, labels, rows, s, shift, divisor);
    TP_LAUNCH(ce_grad_kernel<T>, (unsigned)rows, tp_rows_threads(v), 0, st, dlogits, logits, max, sumexp, labels, s, v,
              vocab_start, vocab, shift);
}

static void ce_grad(tp_stream st, tp_kernel_dtype t, void *dlogits, const void *logits, const float *max,
                    const float *sumexp, const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab_start,
                    int64_t vocab, int shift, float divisor)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(b >= 0 && s >= 0 && v > 0 && vocab_start >= 0 && vocab > 0, "negative size");
    TP_KCHECK(b * s <= TP_CUDA_MAX_ROWS, "one block per row: at most 2^31-1 rows");
    TP_KCHECK(shift == 0 || shift == 1, "labels shifted by one position or none");
    if (b * s == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_ce_grad(st, (float *)dlogits, (const float *)logits, max, sumexp, labels, b * s, s, v, vocab_start,
                       vocab, shift, divisor);
    else
        launch_ce_grad(st, (__nv_bfloat16 *)dlogits, (const __nv_bfloat16 *)logits, max, sumexp, labels, b * s, s, v,
                       vocab_start, vocab, shift, divisor);
}

extern "C" void tp_k_cross_entropy_grad(tp_stream st, tp_kernel_dtype t, void *dlogits, const void *logits,
                                        const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab,
                                        int shift, float divisor)
{
    TP_KCHECK(vocab <= v, "the real vocabulary fits the logits' columns");
    ce_grad(st, t, dlogits, logits, NULL, NULL, labels, b, s, v, 0, vocab, shift, divisor);
}

extern "C" void tp_k_ce_grad(tp_stream st, tp_kernel_dtype t, void *dlogits, const void *logits, const float *max,
                             const float *sumexp, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                             int64_t vocab_start, int64_t vocab, int shift, float divisor)
{
    TP_KCHECK(max != NULL && sumexp != NULL, "the all-reduced row statistics");
    ce_grad(st, t, dlogits, logits, max, sumexp, labels, b, s, v, vocab_start, vocab, shift, divisor);
}
