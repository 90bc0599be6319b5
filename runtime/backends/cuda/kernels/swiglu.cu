// swiglu.cu: the fused SwiGLU activation silu(a) * b and its gradient, one
// pass over memory each (a Llama MLP's act(gate) * up, which tpcc -O1 fuses
// from a silu and a mul).
// defines: tp_k_silu_mul, tp_k_silu_mul_grad
#include "common.cuh"
#include "silu.cuh"

#include <string.h>

#define SWIGLU_THREADS 256

// ---- CUDA kernels

// 16 bytes of T (4 floats, 8 bf16), moved as one 128-bit load or store.
template <typename T> struct pack16 {
    static constexpr int n = 16 / sizeof(T);
    T v[n];
};

template <typename T> __device__ __forceinline__ pack16<T> load16(const T *p)
{
    const uint4 bits = *reinterpret_cast<const uint4 *>(p);
    pack16<T> r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

template <typename T> __device__ __forceinline__ void store16(T *p, const pack16<T> &r)
{
    uint4 bits;
    memcpy(&bits, &r, sizeof bits);
    *reinterpret_cast<uint4 *>(p) = bits;
}

// Each thread owns runs of pack16<T>::n elements: the whole run through
// 128-bit accesses when the buffers are 16-byte aligned (`vec`) and the run
// is whole, else element by element. A thread reads every element of its
// run before writing it, so an output may be exactly an input. The math is
// fp32 and the unfused kernels' (silu.cuh): in fp32 the same bits; in bf16
// one rounding at the store where the unfused pair rounds twice.

template <typename T> __global__ void silu_mul_kernel(T *out, const T *a, const T *b, int64_t n, bool vec)
{
    constexpr int P = pack16<T>::n;
    TP_GRID_STRIDE(j, TP_CEIL_DIV(n, (int64_t)P))
    {
        const int64_t i0 = j * P;
        if (vec && i0 + P <= n) {
            const pack16<T> x = load16(a + i0), y = load16(b + i0);
            pack16<T> o;
            TP_UNROLL
            for (int e = 0; e < P; e++)
                o.v[e] = tp_from_float<T>(tp_silu(tp_to_float(x.v[e])) * tp_to_float(y.v[e]));
            store16(out + i0, o);
            continue;
        }
        for (int64_t i = i0; i < i0 + P && i < n; i++)
            out[i] = tp_from_float<T>(tp_silu(tp_to_float(a[i])) * tp_to_float(b[i]));
    }
}

// da = (dy * b) * silu'(a), db = dy * silu(a); either may be NULL
template <typename T>
__global__ void silu_mul_grad_kernel(T *da, T *db, const T *a, const T *b, const T *dy, int64_t n, bool vec)
{
    constexpr int P = pack16<T>::n;
    TP_GRID_STRIDE(j, TP_CEIL_DIV(n, (int64_t)P))
    {
        const int64_t i0 = j * P;
        if (vec && i0 + P <= n) {
            const pack16<T> x = load16(a + i0), y = load16(b + i0), g = load16(dy + i0);
            pack16<T> ga, gb;
            TP_UNROLL
            for (int e = 0; e < P; e++) {
                const float av = tp_to_float(x.v[e]), gv = tp_to_float(g.v[e]);
                ga.v[e] = tp_from_float<T>(gv * tp_to_float(y.v[e]) * tp_silu_grad(av));
                gb.v[e] = tp_from_float<T>(gv * tp_silu(av));
            }
            if (da)
                store16(da + i0, ga);
            if (db)
                store16(db + i0, gb);
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

static bool aligned16(const void *p) { return p == NULL || (uintptr_t)p % 16 == 0; }

static unsigned swiglu_blocks(tp_kernel_dtype t, int64_t n)
{
    const int64_t pack = t == TP_KERNEL_F32 ? 4 : 8;
    return tp_elementwise_blocks(TP_CEIL_DIV(n, pack), SWIGLU_THREADS);
}

extern "C" void tp_k_silu_mul(tp_stream s, tp_kernel_dtype t, void *out, const void *a, const void *b, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0)
        return;
    const bool vec = aligned16(out) && aligned16(a) && aligned16(b);
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(silu_mul_kernel<float>, swiglu_blocks(t, n), SWIGLU_THREADS, 0, s, (float *)out, (const float *)a,
                  (const float *)b, n, vec);
    else
        TP_LAUNCH(silu_mul_kernel<__nv_bfloat16>, swiglu_blocks(t, n), SWIGLU_THREADS, 0, s, (__nv_bfloat16 *)out,
                  (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, n, vec);
}

extern "C" void tp_k_silu_mul_grad(tp_stream s, tp_kernel_dtype t, void *da, void *db, const void *a, const void *b,
                                   const void *dy, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    if (n == 0 || (!da && !db))
        return;
    const bool vec = aligned16(da) && aligned16(db) && aligned16(a) && aligned16(b) && aligned16(dy);
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(silu_mul_grad_kernel<float>, swiglu_blocks(t, n), SWIGLU_THREADS, 0, s, (float *)da, (float *)db,
                  (const float *)a, (const float *)b, (const float *)dy, n, vec);
    else
        TP_LAUNCH(silu_mul_grad_kernel<__nv_bfloat16>, swiglu_blocks(t, n), SWIGLU_THREADS, 0, s,
                  (__nv_bfloat16 *)da, (__nv_bfloat16 *)db, (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b,
                  (const __nv_bfloat16 *)dy, n, vec);
}
