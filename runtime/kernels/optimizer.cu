// optimizer.cu: AdamW's update, on weights in the storage type or on fp32
// master weights of bf16 ones, and the sum of squares of the
// gradient-norm clipping.
// defines: tp_k_adamw, tp_k_adamw_master, tp_k_sum_squares, tp_k_accumulate_grad
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

// torch.optim.AdamW's single-tensor step on one element, in its order:
// w *= 1 - lr wd; m = m.lerp(g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
// w -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). torch's lerp is one
// fused multiply-add from the nearer end: fma(wt, g - m, m) for a weight
// below 0.5, else fma(wt - 1, g - m, g) (the CPU backend's too). Returns
// the new w; m and v are updated in place.
__device__ __forceinline__ float adamw_update(float w, float g, float &m, float &v, const adamw_consts &k)
{
    const float wi = w * k.decay;
    m = k.beta1_w < 0.5f ? fmaf(k.beta1_w, g - m, m) : fmaf(k.beta1_w - 1.0f, g - m, g);
    v = k.beta2 * v + k.beta2_w * g * g;
    return wi - k.step_size * m / (sqrtf(v) / k.bc2_sqrt + k.eps);
}

template <typename T> __global__ void adamw_kernel(T *w, const T *g, T *m, T *v, int64_t n, adamw_consts k)
{
    TP_GRID_STRIDE(i, n)
    {
        float mi = tp_to_float(m[i]), vi = tp_to_float(v[i]);
        const float wn = adamw_update(tp_to_float(w[i]), tp_to_float(g[i]), mi, vi, k);
        m[i] = tp_from_float<T>(mi);
        v[i] = tp_from_float<T>(vi);
        w[i] = tp_from_float<T>(wn);
    }
}

// Mixed precision: the step on the fp32 master from g (storage type, read
// as fp32 and scaled by grad_scale, clipping's factor, so the gradient is
// not rounded to T once more), m and v fp32; w, what the kernels compute
// with, becomes the master rounded to T (to nearest even).
template <typename T>
__global__ void adamw_master_kernel(float *master, T *w, const T *g, float *m, float *v, int64_t n, float grad_scale,
                                    adamw_consts k)
{
    TP_GRID_STRIDE(i, n)
    {
        const float wn = adamw_update(master[i], tp_to_float(g[i]) * grad_scale, m[i], v[i], k);
        master[i] = wn;
        w[i] = tp_from_float<T>(wn);
    }
}

// Gradient accumulation over micro-batches, in fp32: phase 0 copies g
// into acc, 1 adds it, 2 writes acc + g back into g, rounded once to T.
template <typename T> __global__ void accumulate_grad_kernel(float *acc, T *g, int64_t n, int phase)
{
    TP_GRID_STRIDE(i, n)
    {
        const float gi = tp_to_float(g[i]);
        if (phase == 0)
            acc[i] = gi;
        else if (phase == 1)
            acc[i] += gi;
        else
            g[i] = tp_from_float<T>(acc[i] + gi);
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

// The launchers' preconditions and the step's constants, in double as
// torch computes them in Python floats; false when there is nothing to
// update.
static bool adamw_prepare(tp_kernel_dtype t, int64_t n, double lr, double beta1, double beta2, double eps,
                          double weight_decay, int64_t step, adamw_consts *k)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0 && step >= 1, "a step from 1 on");
    *k = {(float)(1.0 - lr * weight_decay),
          (float)(1.0 - beta1),
          (float)beta2,
          (float)(1.0 - beta2),
          (float)(lr / (1.0 - pow(beta1, (double)step))),
          (float)sqrt(1.0 - pow(beta2, (double)step)),
          (float)eps};
    return n > 0;
}

extern "C" void tp_k_adamw(tp_stream s, tp_kernel_dtype t, void *w, const void *g, void *m, void *v, int64_t n,
                           double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step)
{
    adamw_consts k;
    if (!adamw_prepare(t, n, lr, beta1, beta2, eps, weight_decay, step, &k))
        return;
    if (t == TP_KERNEL_F32)
        launch_adamw(s, (float *)w, (const float *)g, (float *)m, (float *)v, n, k);
    else
        launch_adamw(s, (__nv_bfloat16 *)w, (const __nv_bfloat16 *)g, (__nv_bfloat16 *)m, (__nv_bfloat16 *)v, n, k);
}

template <typename T>
static void launch_adamw_master(tp_stream s, float *master, T *w, const T *g, float *m, float *v, int64_t n,
                                float grad_scale, adamw_consts k)
{
    TP_LAUNCH(adamw_master_kernel<T>, tp_elementwise_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, master, w, g, m, v, n,
              grad_scale, k);
}

extern "C" void tp_k_adamw_master(tp_stream s, tp_kernel_dtype t, float *master, void *w, const void *g, float *m,
                                  float *v, int64_t n, float grad_scale, double lr, double beta1, double beta2,
                                  double eps, double weight_decay, int64_t step)
{
    adamw_consts k;
    if (!adamw_prepare(t, n, lr, beta1, beta2, eps, weight_decay, step, &k))
        return;
    if (t == TP_KERNEL_F32)
        launch_adamw_master(s, master, (float *)w, (const float *)g, m, v, n, grad_scale, k);
    else
        launch_adamw_master(s, master, (__nv_bfloat16 *)w, (const __nv_bfloat16 *)g, m, v, n, grad_scale, k);
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

extern "C" void tp_k_accumulate_grad(tp_stream s, tp_kernel_dtype t, float *acc, void *g, int64_t n, int phase)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    TP_KCHECK(phase >= 0 && phase <= 2, "first, add or last");
    if (n == 0)
        return;
    const unsigned blocks = tp_elementwise_blocks(n, OPT_THREADS);
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(accumulate_grad_kernel<float>, blocks, OPT_THREADS, 0, s, acc, (float *)g, n, phase);
    else
        TP_LAUNCH(accumulate_grad_kernel<__nv_bfloat16>, blocks, OPT_THREADS, 0, s, acc, (__nv_bfloat16 *)g, n, phase);
}
