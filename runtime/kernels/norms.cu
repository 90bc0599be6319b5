// norms.cu: RMSNorm and LayerNorm over the last dimension, and a residual
// add fused with the RMSNorm that reads it.
// defines: tp_k_rmsnorm, tp_k_add_rmsnorm, tp_k_layernorm
#include "norms.cuh"

// ---- CUDA kernels

// One block per row. Each thread reads only the elements it later writes
// (j = threadIdx.x + k * blockDim.x), and the statistics are complete
// before any write, so out may equal x.

// out = x / sqrt(mean(x^2) + eps) * w, or * (1 + w) with unit_offset (Gemma:
// the offset added in fp32, the product rounded once, as GemmaRMSNorm does)
template <typename T>
__device__ __forceinline__ void rmsnorm_row(T *o, const T *xr, const T *w, int64_t n, float eps, bool unit_offset)
{
    const float offset = unit_offset ? 1.0f : 0.0f;
    const float inv = tp_row_rms_inv(xr, n, eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        o[j] = tp_from_float<T>(tp_to_float(xr[j]) * inv * (offset + tp_to_float(w[j])));
}

template <typename T>
__global__ void rmsnorm_kernel(T *out, const T *x, const T *w, int64_t n, float eps, bool unit_offset)
{
    const int64_t row = (int64_t)blockIdx.x * n;
    rmsnorm_row(out + row, x + row, w, n, eps, unit_offset);
}

// s = a + b, stored (rounded to T) by the thread that later reads it back,
// then out = rmsnorm(s) from the stored s, as the unfused pair computes it.
// Each thread touches only its own columns, so s and out may each be
// exactly a or b. Without s (NULL) the sum is stored in out and normalised
// there; without out, only the sum is stored.
template <typename T>
__global__ void add_rmsnorm_kernel(T *s, T *out, const T *a, const T *b, const T *w, int64_t n, float eps,
                                   bool unit_offset)
{
    const int64_t row = (int64_t)blockIdx.x * n;
    T *sr = (s ? s : out) + row;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sr[j] = tp_from_float<T>(tp_to_float(a[row + j]) + tp_to_float(b[row + j]));
    if (out)
        rmsnorm_row(out + row, sr, w, n, eps, unit_offset);
}

// out = (x - mean) / sqrt(var + eps) * w + b, b optional
template <typename T>
__global__ void layernorm_kernel(T *out, const T *x, const T *w, const T *b, int64_t n, float eps)
{
    const T *xr = x + (int64_t)blockIdx.x * n;
    T *o = out + (int64_t)blockIdx.x * n;
    float mean;
    const float inv = tp_row_mean_inv(xr, n, eps, &mean);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float y = (tp_to_float(xr[j]) - mean) * inv * tp_to_float(w[j]);
        o[j] = tp_from_float<T>(b ? y + tp_to_float(b[j]) : y);
    }
}

// ---- kernel launchers

template <typename T>
static void launch_rmsnorm(tp_stream s, T *out, const T *x, const T *w, int64_t m, int64_t n, float eps,
                           bool unit_offset)
{
    TP_LAUNCH(rmsnorm_kernel<T>, (unsigned)m, tp_rows_threads(n), 0, s, out, x, w, n, eps, unit_offset);
}

template <typename T>
static void launch_add_rmsnorm(tp_stream st, T *s, T *out, const T *a, const T *b, const T *w, int64_t m, int64_t n,
                               float eps, bool unit_offset)
{
    TP_LAUNCH(add_rmsnorm_kernel<T>, (unsigned)m, tp_rows_threads(n), 0, st, s, out, a, b, w, n, eps, unit_offset);
}

template <typename T>
static void launch_layernorm(tp_stream s, T *out, const T *x, const T *w, const T *b, int64_t m, int64_t n, float eps)
{
    TP_LAUNCH(layernorm_kernel<T>, (unsigned)m, tp_rows_threads(n), 0, s, out, x, w, b, n, eps);
}

extern "C" void tp_k_rmsnorm(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const void *w, int64_t m,
                             int64_t n, float eps, bool unit_offset)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n > 0 && m >= 0, "rows of at least one element");
    TP_KCHECK(m <= TP_CUDA_MAX_ROWS, "one block per row: at most 2^31-1 rows");
    if (m == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_rmsnorm(s, (float *)out, (const float *)x, (const float *)w, m, n, eps, unit_offset);
    else
        launch_rmsnorm(s, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w, m, n, eps,
                       unit_offset);
}

extern "C" void tp_k_add_rmsnorm(tp_stream st, tp_kernel_dtype t, void *s, void *out, const void *a, const void *b,
                                 const void *w, int64_t m, int64_t n, float eps, bool unit_offset)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n > 0 && m >= 0, "rows of at least one element");
    TP_KCHECK(m <= TP_CUDA_MAX_ROWS, "one block per row: at most 2^31-1 rows");
    TP_KCHECK(s != out && (s || out), "the sum and its norm in different buffers, at least one wanted");
    if (m == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_add_rmsnorm(st, (float *)s, (float *)out, (const float *)a, (const float *)b, (const float *)w, m, n,
                           eps, unit_offset);
    else
        launch_add_rmsnorm(st, (__nv_bfloat16 *)s, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)a,
                           (const __nv_bfloat16 *)b, (const __nv_bfloat16 *)w, m, n, eps, unit_offset);
}

extern "C" void tp_k_layernorm(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const void *w, const void *b,
                               int64_t m, int64_t n, float eps)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n > 0 && m >= 0, "rows of at least one element");
    TP_KCHECK(w != NULL, "layernorm needs a weight (the bias is optional)");
    TP_KCHECK(m <= TP_CUDA_MAX_ROWS, "one block per row: at most 2^31-1 rows");
    if (m == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_layernorm(s, (float *)out, (const float *)x, (const float *)w, (const float *)b, m, n, eps);
    else
        launch_layernorm(s, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)w,
                         (const __nv_bfloat16 *)b, m, n, eps);
}
