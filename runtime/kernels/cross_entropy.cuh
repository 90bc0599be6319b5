// cross_entropy.cuh: what the loss (cross_entropy.cu) and its gradient
// (cross_entropy_grad.cu) share: the rows' labels, the row statistics.
// defines: CE_IGNORE, row_label, ce_denominator, row_max, row_sumexp, real_columns
//
// With shift 1 (Hugging Face's loss) position t of sequence b predicts token
// t+1: the label of row (b, t) is labels[b, t+1] and the last position has
// none; with shift 0 the labels are already the next tokens. -100 is
// ignored.
#ifndef TPRUN_KERNELS_CROSS_ENTROPY_CUH
#define TPRUN_KERNELS_CROSS_ENTROPY_CUH

#include "common.cuh"

#define CE_IGNORE (-100)

__device__ __forceinline__ int32_t row_label(const int32_t *labels, int64_t row, int64_t s, int shift)
{
    return row % s + shift < s ? labels[row + shift] : CE_IGNORE;
}

// What the loss's sum is divided by: the caller's divisor when it gives one
// (a training step's share of the global batch's labelled tokens), else
// the labelled rows counted.
__device__ __forceinline__ float ce_denominator(float divisor, float labelled)
{
    return divisor > 0.0f ? divisor : labelled;
}

// max over row[0, n) (-inf for n = 0), to every thread of the block
template <typename T> __device__ float row_max(const T *row, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
        mx = fmaxf(mx, tp_to_float(row[c]));
    return tp_block_max(mx);
}

// sum of exp(row[c] - mx) over row[0, n), to every thread of the block
template <typename T> __device__ float row_sumexp(const T *row, int64_t n, float mx)
{
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x)
        sum += expf(tp_to_float(row[c]) - mx);
    return tp_block_sum(sum);
}

// Local columns [vocab_start, vocab_start + v) that are real (< vocab); on
// the host (launchers) and in kernels.
__host__ __device__ inline int64_t real_columns(int64_t v, int64_t vocab_start, int64_t vocab)
{
    const int64_t n = vocab - vocab_start;
    return n < 0 ? 0 : n > v ? v : n;
}

#endif // TPRUN_KERNELS_CROSS_ENTROPY_CUH
