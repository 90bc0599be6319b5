// elementwise.cu: activations, broadcast add/mul, scale, soft-capping, bias
// add, and a bias add fused with the activation after it.
// defines: tp_k_unary, tp_k_binary, tp_k_scale, tp_k_softcap, tp_k_bias_add, tp_k_bias_unary
#include "common.cuh"
#include "pack.cuh"
#include "silu.cuh"

// op numbers of tp_k_unary / tp_k_binary (= tp_unary / tp_binary of backend.h)
enum { UNARY_SILU = 0, UNARY_GELU = 1, UNARY_RELU = 2, UNARY_GELU_ERF = 3 };
enum { BINARY_ADD = 0, BINARY_MUL = 1 };

#define ELEMENTWISE_THREADS 256

// ---- CUDA kernels

// tp_map1 / tp_map2 (pack.cuh): every element is read and written by one
// thread, a pack at a time, so out may equal an input.

__device__ __forceinline__ float gelu_tanh(float x)
{
    // GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const float kc = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(kc * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_erf(float x)
{
    // torch's gelu(approximate="none"): 0.5 x (1 + erf(x / sqrt(2)))
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

__device__ __forceinline__ float unary_apply(int op, float v)
{
    if (op == UNARY_SILU)
        return tp_silu(v);
    if (op == UNARY_GELU)
        return gelu_tanh(v);
    if (op == UNARY_GELU_ERF)
        return gelu_erf(v);
    return v < 0.0f ? 0.0f : v; // NaN propagates, as torch.relu
}

template <typename T> __global__ void unary_kernel(int op, T *out, const T *x, int64_t n, bool vec)
{
    tp_map1(out, x, n, vec, [op](float v) { return unary_apply(op, v); });
}

// out[i] = a[i] op b[i % nb]
template <typename T>
__global__ void binary_kernel(int op, T *out, const T *a, int64_t n, const T *b, int64_t nb, bool vec)
{
    tp_map2(out, a, b, n, nb, vec, [op](float x, float y) { return op == BINARY_ADD ? x + y : x * y; });
}

// out = x * s, then cap * tanh(out / cap) when cap > 0
template <typename T> __global__ void scale_kernel(T *out, const T *x, int64_t n, float s, float cap, bool vec)
{
    tp_map1(out, x, n, vec, [s, cap](float v) {
        const float y = v * s;
        return cap > 0.0f ? cap * tanhf(y / cap) : y;
    });
}

// out[i, j] = x[i, j] + scale * b[j]; scale is 1/tp for a bias added on
// every rank of a Partial tensor
template <typename T>
__global__ void bias_add_kernel(T *out, const T *x, const T *b, int64_t total, int64_t n, float scale, bool vec)
{
    tp_map2(out, x, b, total, n, vec, [scale](float v, float c) { return v + scale * c; });
}

// h[i, j] = x[i, j] + scale * b[j] as bias_add_kernel, out = op(h) as
// unary_kernel of the stored h (rounded to T first, as the pair reads it
// back); either output may be NULL
template <typename T>
__global__ void bias_unary_kernel(int op, T *h, T *out, const T *x, const T *b, int64_t total, int64_t n, float scale,
                                  bool vec)
{
    tp_map2_two(h, out, x, b, total, n, vec, [op, scale](float v, float c) {
        const float stored = tp_to_float(tp_from_float<T>(v + scale * c));
        return tp_two{stored, unary_apply(op, stored)};
    });
}

// ---- kernel launchers

template <typename T> static void launch_unary(tp_stream s, tp_kernel_dtype t, int op, T *out, const T *x, int64_t n)
{
    TP_LAUNCH(unary_kernel<T>, tp_pack_blocks(t, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, s, op, out, x, n,
              tp_map1_vec(out, x));
}

template <typename T>
static void launch_binary(tp_stream s, tp_kernel_dtype t, int op, T *out, const T *a, int64_t n, const T *b, int64_t nb)
{
    TP_LAUNCH(binary_kernel<T>, tp_pack_blocks(t, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, s, op, out, a, n,
              b, nb, tp_map2_vec(t, out, a, b, n, nb));
}

template <typename T>
static void launch_scale(tp_stream st, tp_kernel_dtype t, T *out, const T *x, int64_t n, float s, float cap)
{
    TP_LAUNCH(scale_kernel<T>, tp_pack_blocks(t, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, st, out, x, n, s,
              cap, tp_map1_vec(out, x));
}

static void scale_capped(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t n, float scale, float cap)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_scale(s, t, (float *)out, (const float *)x, n, scale, cap);
    else
        launch_scale(s, t, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, n, scale, cap);
}

template <typename T>
static void launch_bias_add(tp_stream s, tp_kernel_dtype t, T *out, const T *x, const T *b, int64_t m, int64_t n,
                            float scale)
{
    TP_LAUNCH(bias_add_kernel<T>, tp_pack_blocks(t, m * n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, s, out, x, b,
              m * n, n, scale, tp_map2_vec(t, out, x, b, m * n, n));
}

template <typename T>
static void launch_bias_unary(tp_stream s, tp_kernel_dtype t, int op, T *h, T *out, const T *x, const T *b, int64_t m,
                              int64_t n, float scale)
{
    TP_LAUNCH(bias_unary_kernel<T>, tp_pack_blocks(t, m * n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, s, op, h, out,
              x, b, m * n, n, scale, tp_aligned16(h) && tp_map2_vec(t, out, x, b, m * n, n));
}

static bool unary_known(int op)
{
    return op == UNARY_SILU || op == UNARY_GELU || op == UNARY_RELU || op == UNARY_GELU_ERF;
}

extern "C" void tp_k_unary(tp_stream s, tp_kernel_dtype t, int op, void *out, const void *x, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(unary_known(op), "unknown unary op");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_unary(s, t, op, (float *)out, (const float *)x, n);
    else
        launch_unary(s, t, op, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, n);
}

extern "C" void tp_k_binary(tp_stream s, tp_kernel_dtype t, int op, void *out, const void *a, int64_t n, const void *b,
                            int64_t nb)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(op == BINARY_ADD || op == BINARY_MUL, "unknown binary op");
    TP_KCHECK(nb > 0 && n >= 0 && n % nb == 0, "b repeats a whole number of times over a");
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_binary(s, t, op, (float *)out, (const float *)a, n, (const float *)b, nb);
    else
        launch_binary(s, t, op, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)a, n, (const __nv_bfloat16 *)b, nb);
}

extern "C" void tp_k_scale(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t n, float scale)
{
    scale_capped(s, t, out, x, n, scale, 0.0f);
}

extern "C" void tp_k_softcap(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t n, float cap)
{
    TP_KCHECK(cap > 0.0f, "a positive cap");
    scale_capped(s, t, out, x, n, 1.0f, cap);
}

extern "C" void tp_k_bias_add(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const void *b, int64_t m,
                              int64_t n, float scale)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(m >= 0 && n >= 0, "negative size");
    if (m == 0 || n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_bias_add(s, t, (float *)out, (const float *)x, (const float *)b, m, n, scale);
    else
        launch_bias_add(s, t, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)b, m, n, scale);
}

extern "C" void tp_k_bias_unary(tp_stream s, tp_kernel_dtype t, int op, void *h, void *out, const void *x, const void *b,
                                int64_t m, int64_t n, float scale)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(unary_known(op), "unknown unary op");
    TP_KCHECK(m >= 0 && n >= 0, "negative size");
    TP_KCHECK(h != out && (h || out), "h and the activation in different buffers, at least one wanted");
    if (m == 0 || n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_bias_unary(s, t, op, (float *)h, (float *)out, (const float *)x, (const float *)b, m, n, scale);
    else
        launch_bias_unary(s, t, op, (__nv_bfloat16 *)h, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x,
                          (const __nv_bfloat16 *)b, m, n, scale);
}
