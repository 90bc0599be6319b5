// swiglu.cu: the fused SwiGLU activation silu(a) * b and its gradient, one
// pass over memory each (a Llama MLP's act(gate) * up, which tpcc -O1 fuses
// from a silu and a mul).
// defines: tp_k_silu_mul, tp_k_silu_mul_grad
#include "common.cuh"
#include "pack.cuh"
#include "silu.cuh"

#define SWIGLU_THREADS 256

// ---- CUDA kernels

// silu(a) * b through tp_map2 (pack.cuh); the gradient's two outputs the
// same way by hand. A thread reads every element of its pack before
// writing it, so an output may be exactly an input. The math is fp32 and
// the unfused kernels' (silu.cuh): in fp32 the same bits; in bf16 one
// rounding at the store where the unfused pair rounds twice.

template <typename T> __global__ void silu_mul_kernel(T *out, const T *a, const T *b, int64_t n, bool vec)
{
    tp_map2(out, a, b, n, n, vec, [](float x, float y) { return tp_silu(x) * y; });
}

// da = (dy * b) * silu'(a), db = dy * silu(a); either may be NULL
template <typename T>
__global__ void silu_mul_grad_kernel(T *da, T *db, const T *a, const T *b, const T *dy, int64_t n, bool vec)
{
    constexpr int P = tp_pack16<T>::n;
    TP_GRID_STRIDE(j, TP_CEIL_DIV(n, (int64_t)P))
    {
        const int64_t i0 = j * P;
        if (vec && i0 + P <= n) {
            const tp_pack16<T> x = tp_load16(a + i0), y = tp_load16(b + i0), g = tp_load16(dy + i0);
            tp_pack16<T> ga, gb;
            TP_UNROLL
            for (int e = 0; e < P; e++) {
                const float av = tp_to_float(x.v[e]), gv = tp_to_float(g.v[e]);
                ga.v[e] = tp_from_float<T>(gv * tp_to_float(y.v[e]) * tp_silu_grad(av));
                gb.v[e] = tp_from_float<T>(gv * tp_silu(av));
            }
            if (da)
                tp_store16(da + i0, ga);
            if (db)
                tp_store16(db + i0, gb);
            continue;
        }
        for (int64_t i = i0; i < i0 + P && i < n; i++) {
            const float av = tp_to_float(a[i]), gv = tp_to_float(dy[i]), bv = tp_to_float(b[i]);
            if (da)
                da[i] = tp_from_float<T>(gv * bv * tp_silu_grad(av));
            if (db)
                db[i] = tp_from_float<T>(gv * tp_silu(av));
        }
    }
}

// ---- kernel launchers

extern "C" void tp_k_silu_mul(tp_stream s, tp_kernel_dtype t, void *out, const void *a, const void *b, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0)
        return;
    const bool vec = tp_map2_vec(t, out, a, b, n, n);
    const unsigned blocks = tp_pack_blocks(t, n, SWIGLU_THREADS);
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(silu_mul_kernel<float>, blocks, SWIGLU_THREADS, 0, s, (float *)out, (const float *)a,
                  (const float *)b, n, vec);
    else
        TP_LAUNCH(silu_mul_kernel<__nv_bfloat16>, blocks, SWIGLU_THREADS, 0, s, (__nv_bfloat16 *)out,
                  (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, n, vec);
}

extern "C" void tp_k_silu_mul_grad(tp_stream s, tp_kernel_dtype t, void *da, void *db, const void *a, const void *b,
                                   const void *dy, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0 || (!da && !db))
        return;
    const bool vec = tp_aligned16(da) && tp_aligned16(db) && tp_aligned16(a) && tp_aligned16(b) && tp_aligned16(dy);
    const unsigned blocks = tp_pack_blocks(t, n, SWIGLU_THREADS);
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(silu_mul_grad_kernel<float>, blocks, SWIGLU_THREADS, 0, s, (float *)da, (float *)db,
                  (const float *)a, (const float *)b, (const float *)dy, n, vec);
    else
        TP_LAUNCH(silu_mul_grad_kernel<__nv_bfloat16>, blocks, SWIGLU_THREADS, 0, s, (__nv_bfloat16 *)da,
                  (__nv_bfloat16 *)db, (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, (const __nv_bfloat16 *)dy,
                  n, vec);
}
