// optimizer.cu: AdamW's update and the sum of squares of the gradient-norm
// clipping.
// defines: tp_k_adamw, tp_k_sum_squares
#include "common.cuh"

#define OPT_THREADS 256
// Blocks of the sum of squares; each leaves a partial in the array below,
// which a second one-block kernel adds up in a fixed order, so the sum is
// deterministic. Static device memory (launchers do not allocate): two
// calls must not run concurrently on one device, which holds with one
// compute stream.
#define SUMSQ_BLOCKS 1024

// AdamW's per-step constants, worked out on the host in double as
// torch.optim.AdamW does in Python floats.
struct adamw_consts {
    float decay;      // 1 - lr * weight_decay
    float beta1_w;    // 1 - beta1: the weight of m's lerp toward g
    float beta2;
    float beta2_w;    // 1 - beta2, from the double: 1 - (float)0.999 is off by 1e-5
    float step_size;  // lr / (1 - beta1^step)
    float bc2_sqrt;   // sqrt(1 - beta2^step)
    float eps;
};

// ---- CUDA kernels

static __device__ double sumsq_partial[SUMSQ_BLOCKS];

// torch.optim.AdamW's single-tensor step, in its order: w *= 1 - lr wd;
// m = m.lerp(g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
// w -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). torch's lerp is one
// fused multiply-add from the nearer end: fma(wt, g - m, m) for a weight
// below 0.5, else fma(wt - 1, g - m, g) (the CPU backend's too).
template <typename T> __global__ void adamw_kernel(T *w, const T *g, T *m, T *v, int64_t n, adamw_consts k)
{
    TP_GRID_STRIDE(i, n)
    {
        const float gi = tp_to_float(g[i]), mi = tp_to_float(m[i]);
        const float wi = tp_to_float(w[i]) * k.decay;
        const float mn = k.beta1_w < 0.5f ? fmaf(k.beta1_w, gi - mi, mi) : fmaf(k.beta1_w - 1.0f, gi - mi, gi);
        const float vn = k.beta2 * tp_to_float(v[i]) + k.beta2_w * gi * gi;
        m[i] = tp_from_float<T>(mn);
        v[i] = tp_from_float<T>(vn);
        w[i] = tp_from_float<T>(wi - k.step_size * mn / (sqrtf(vn) / k.bc2_sqrt + k.eps));
    }
}

// Block i: the sum of x^2 over elements i * blockDim + j (grid-stride), in double.
template <typename T> __global__ void sum_squares_kernel(const T *x, int64_t n)
{
    double acc = 0.0;
    TP_GRID_STRIDE(i, n)
    {
        const double xi = tp_to_float(x[i]);
        acc += xi * xi;
    }
    acc = tp_block_sum(acc);
    if (threadIdx.x == 0)
        sumsq_partial[blockIdx.x] = acc;
}

__global__ void sum_squares_total_kernel(double *out, int nparts)
{
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        acc += sumsq_partial[i];
    acc = tp_block_sum(acc);
    if (threadIdx.x == 0)
        *out = acc;
}

// ---- kernel launchers

template <typename T> static void launch_adamw(tp_stream s, T *w, const T *g, T *m, T *v, int64_t n, adamw_consts k)
{
    TP_LAUNCH(adamw_kernel<T>, tp_elementwise_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, w, g, m, v, n, k);
}

extern "C" void tp_k_adamw(tp_stream s, tp_kernel_dtype t, void *w, const void *g, void *m, void *v, int64_t n,
                           double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0 && step >= 1, "a step from 1 on");
    if (n == 0)
        return;
    const adamw_consts k = {(float)(1.0 - lr * weight_decay),
                            (float)(1.0 - beta1),
                            (float)beta2,
                            (float)(1.0 - beta2),
                            (float)(lr / (1.0 - pow(beta1, (double)step))),
                            (float)sqrt(1.0 - pow(beta2, (double)step)),
                            (float)eps};
    if (t == TP_KERNEL_F32)
        launch_adamw(s, (float *)w, (const float *)g, (float *)m, (float *)v, n, k);
    else
        launch_adamw(s, (__nv_bfloat16 *)w, (const __nv_bfloat16 *)g, (__nv_bfloat16 *)m, (__nv_bfloat16 *)v, n, k);
}

template <typename T> static void launch_sum_squares(tp_stream s, double *out, const T *x, int64_t n)
{
    const unsigned blocks = tp_elementwise_blocks(n, OPT_THREADS);
    const int parts = blocks < SUMSQ_BLOCKS ? (int)blocks : SUMSQ_BLOCKS;
    TP_LAUNCH(sum_squares_kernel<T>, parts, OPT_THREADS, 0, s, x, n);
    TP_LAUNCH(sum_squares_total_kernel, 1, SUMSQ_BLOCKS, 0, s, out, parts);
}

extern "C" void tp_k_sum_squares(tp_stream s, tp_kernel_dtype t, double *out, const void *x, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0) {
        TP_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, (cudaStream_t)s));
        return;
    }
    if (t == TP_KERNEL_F32)
        launch_sum_squares(s, out, (const float *)x, n);
    else
        launch_sum_squares(s, out, (const __nv_bfloat16 *)x, n);
}
