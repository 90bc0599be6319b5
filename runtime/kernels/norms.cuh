// norms.cuh: a row's normalisation statistics, shared by the norms
// (norms.cu) and their gradients (norms_grad.cu), so both see the same bits.
// defines: tp_row_rms_inv, tp_row_mean_inv
//
// Block-level: every thread of the block calls them (they reduce across it)
// with the row's n elements; each thread reads j = threadIdx.x + k * blockDim.x.
#ifndef TPRUN_KERNELS_NORMS_CUH
#define TPRUN_KERNELS_NORMS_CUH

#include "common.cuh"

// 1 / sqrt(mean(x^2) + eps)
template <typename T> __device__ __forceinline__ float tp_row_rms_inv(const T *xr, int64_t n, float eps)
{
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float v = tp_to_float(xr[j]);
        ss += v * v;
    }
    ss = tp_block_sum(ss);
    return rsqrtf(ss / (float)n + eps);
}

// The mean and 1 / sqrt(var + eps). Two passes (the mean, then the mean
// squared deviation, biased as in nn.LayerNorm) rather than E[x^2] - E[x]^2,
// which cancels when |mean| >> std.
template <typename T> __device__ __forceinline__ float tp_row_mean_inv(const T *xr, int64_t n, float eps, float *mean)
{
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sum += tp_to_float(xr[j]);
    const float mu = tp_block_sum(sum) / (float)n;
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float d = tp_to_float(xr[j]) - mu;
        sq += d * d;
    }
    *mean = mu;
    return rsqrtf(tp_block_sum(sq) / (float)n + eps);
}

#endif // TPRUN_KERNELS_NORMS_CUH
