// elementwise_grad.cu: the gradients of the activations and of soft-capping,
// and the seed gradient of a summed loss.
// defines: tp_k_unary_grad, tp_k_softcap_grad, tp_k_ones
#include "common.cuh"
#include "pack.cuh"
#include "silu.cuh"

// op numbers of tp_k_unary_grad (= tp_unary of backend.h, as tp_k_unary)
enum { UNARY_SILU = 0, UNARY_GELU = 1, UNARY_RELU = 2, UNARY_GELU_ERF = 3 };

#define GRAD_THREADS 256

// ---- CUDA kernels

// gelu_new = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3):
// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__device__ __forceinline__ float gelu_tanh_grad(float x)
{
    const float kc = 0.7978845608028654f; // sqrt(2 / pi)
    const float th = tanhf(kc * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kc * (1.0f + 3.0f * 0.044715f * x * x);
}

// 0.5 x (1 + erf(x / sqrt(2))): 0.5 (1 + erf(x / sqrt(2))) + x phi(x)
__device__ __forceinline__ float gelu_erf_grad(float x)
{
    const float inv_sqrt_2pi = 0.3989422804014327f;
    return 0.5f * (1.0f + erff(x * 0.7071067811865476f)) + x * inv_sqrt_2pi * expf(-0.5f * x * x);
}

// dx = dy * f'(x), through tp_map2 (pack.cuh): dx may be x or dy
template <typename T> __global__ void unary_grad_kernel(int op, T *dx, const T *x, const T *dy, int64_t n, bool vec)
{
    tp_map2(dx, x, dy, n, n, vec, [op](float v, float g) {
        if (op == UNARY_SILU)
            return g * tp_silu_grad(v);
        if (op == UNARY_GELU)
            return g * gelu_tanh_grad(v);
        if (op == UNARY_GELU_ERF)
            return g * gelu_erf_grad(v);
        return g * (v > 0.0f ? 1.0f : 0.0f);
    });
}

// cap * tanh(x / cap): dy (1 - tanh^2(x / cap))
template <typename T>
__global__ void softcap_grad_kernel(T *dx, const T *x, const T *dy, int64_t n, float cap, bool vec)
{
    tp_map2(dx, x, dy, n, n, vec, [cap](float v, float g) {
        const float th = tanhf(v / cap);
        return g * (1.0f - th * th);
    });
}

// out = 1: d loss / d x of loss = x.sum()
template <typename T> __global__ void ones_kernel(T *out, int64_t n)
{
    TP_GRID_STRIDE(i, n) out[i] = tp_from_float<T>(1.0f);
}

// ---- kernel launchers

template <typename T>
static void launch_unary_grad(tp_stream s, tp_kernel_dtype t, int op, T *dx, const T *x, const T *dy, int64_t n)
{
    TP_LAUNCH(unary_grad_kernel<T>, tp_pack_blocks(t, n, GRAD_THREADS), GRAD_THREADS, 0, s, op, dx, x, dy, n,
              tp_map2_vec(t, dx, x, dy, n, n));
}

extern "C" void tp_k_unary_grad(tp_stream s, tp_kernel_dtype t, int op, void *dx, const void *x, const void *dy,
                                int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(op == UNARY_SILU || op == UNARY_GELU || op == UNARY_RELU || op == UNARY_GELU_ERF, "unknown unary op");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_unary_grad(s, t, op, (float *)dx, (const float *)x, (const float *)dy, n);
    else
        launch_unary_grad(s, t, op, (__nv_bfloat16 *)dx, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)dy, n);
}

template <typename T>
static void launch_softcap_grad(tp_stream s, tp_kernel_dtype t, T *dx, const T *x, const T *dy, int64_t n, float cap)
{
    TP_LAUNCH(softcap_grad_kernel<T>, tp_pack_blocks(t, n, GRAD_THREADS), GRAD_THREADS, 0, s, dx, x, dy, n, cap,
              tp_map2_vec(t, dx, x, dy, n, n));
}

extern "C" void tp_k_softcap_grad(tp_stream s, tp_kernel_dtype t, void *dx, const void *x, const void *dy, int64_t n,
                                  float cap)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(cap > 0.0f && n >= 0, "a positive cap");
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_softcap_grad(s, t, (float *)dx, (const float *)x, (const float *)dy, n, cap);
    else
        launch_softcap_grad(s, t, (__nv_bfloat16 *)dx, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)dy, n, cap);
}

extern "C" void tp_k_ones(tp_stream s, tp_kernel_dtype t, void *out, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(ones_kernel<float>, tp_elementwise_blocks(n, GRAD_THREADS), GRAD_THREADS, 0, s, (float *)out, n);
    else
        TP_LAUNCH(ones_kernel<__nv_bfloat16>, tp_elementwise_blocks(n, GRAD_THREADS), GRAD_THREADS, 0, s,
                  (__nv_bfloat16 *)out, n);
}
