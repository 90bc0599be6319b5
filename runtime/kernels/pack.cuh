// pack.cuh: elementwise kernels over 16-byte packs (4 floats, 8 bf16): one
// 128-bit load per input and one 128-bit store per pack where every buffer
// is 16-byte aligned, element by element otherwise and for the tail. A
// memory-bound kernel moves the same bytes in a quarter (fp32) or an
// eighth (bf16) of the instructions.
// defines: tp_pack16<T>, tp_load16, tp_store16, tp_aligned16, tp_pack_blocks,
// tp_map1, tp_map2, tp_two, tp_map2_two, tp_map1_vec, tp_map2_vec
#ifndef TPRUN_KERNELS_PACK_CUH
#define TPRUN_KERNELS_PACK_CUH

#include "common.cuh"

#include <stdint.h>
#include <string.h>

template <typename T> struct tp_pack16 {
    static constexpr int n = 16 / sizeof(T);
    T v[n];
};

template <typename T> __device__ __forceinline__ tp_pack16<T> tp_load16(const T *p)
{
    const uint4 bits = *reinterpret_cast<const uint4 *>(p);
    tp_pack16<T> r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

template <typename T> __device__ __forceinline__ void tp_store16(T *p, const tp_pack16<T> &r)
{
    uint4 bits;
    memcpy(&bits, &r, sizeof bits);
    *reinterpret_cast<uint4 *>(p) = bits;
}

// NULL counts as aligned: an output a kernel does not write
static inline bool tp_aligned16(const void *p) { return p == NULL || (uintptr_t)p % 16 == 0; }

// Blocks for a grid-stride loop over the packs of n elements of type t.
static inline unsigned tp_pack_blocks(tp_kernel_dtype t, int64_t n, int threads)
{
    return tp_elementwise_blocks(TP_CEIL_DIV(n, (int64_t)(t == TP_KERNEL_F32 ? 4 : 8)), threads);
}

// out[i] = f(x[i]) for i in [0, n), f on floats. Each thread owns whole
// packs and reads a pack before writing it, so out may be x. `vec`: out
// and x are 16-byte aligned.
template <typename T, typename F>
__device__ __forceinline__ void tp_map1(T *out, const T *x, int64_t n, bool vec, F f)
{
    constexpr int P = tp_pack16<T>::n;
    TP_GRID_STRIDE(j, TP_CEIL_DIV(n, (int64_t)P))
    {
        const int64_t i0 = j * P;
        if (vec && i0 + P <= n) {
            tp_pack16<T> v = tp_load16(x + i0);
            TP_UNROLL
            for (int e = 0; e < P; e++)
                v.v[e] = tp_from_float<T>(f(tp_to_float(v.v[e])));
            tp_store16(out + i0, v);
            continue;
        }
        for (int64_t i = i0; i < i0 + P && i < n; i++)
            out[i] = tp_from_float<T>(f(tp_to_float(x[i])));
    }
}

// A pair of results, one for each output of tp_map2_two.
struct tp_two {
    float o0, o1;
};

// (o0[i], o1[i]) = f(a[i], b[i % nb]) for i in [0, n), f returning a
// tp_two: b repeats over a (nb divides n; nb = n, no repeat). Either
// output may be NULL (not wanted), and each may be a or b. `vec`
// (tp_map2_vec): the buffers are 16-byte aligned and nb is n or a whole
// number of packs, so a pack of a meets one pack of b, at i0 % nb (one
// division a pack, none when nb = n).
template <typename T, typename F>
__device__ __forceinline__ void tp_map2_two(T *o0, T *o1, const T *a, const T *b, int64_t n, int64_t nb, bool vec, F f)
{
    constexpr int P = tp_pack16<T>::n;
    TP_GRID_STRIDE(j, TP_CEIL_DIV(n, (int64_t)P))
    {
        const int64_t i0 = j * P;
        int64_t k = nb == n ? i0 : i0 % nb;
        if (vec && i0 + P <= n) {
            const tp_pack16<T> y = tp_load16(b + k), x = tp_load16(a + i0);
            tp_pack16<T> r0, r1;
            TP_UNROLL
            for (int e = 0; e < P; e++) {
                const tp_two r = f(tp_to_float(x.v[e]), tp_to_float(y.v[e]));
                r0.v[e] = tp_from_float<T>(r.o0);
                r1.v[e] = tp_from_float<T>(r.o1);
            }
            if (o0)
                tp_store16(o0 + i0, r0);
            if (o1)
                tp_store16(o1 + i0, r1);
            continue;
        }
        for (int64_t i = i0; i < i0 + P && i < n; i++, k = k + 1 == nb ? 0 : k + 1) {
            const tp_two r = f(tp_to_float(a[i]), tp_to_float(b[k]));
            if (o0)
                o0[i] = tp_from_float<T>(r.o0);
            if (o1)
                o1[i] = tp_from_float<T>(r.o1);
        }
    }
}

// out[i] = f(a[i], b[i % nb]) for i in [0, n): tp_map2_two with one output.
template <typename T, typename F>
__device__ __forceinline__ void tp_map2(T *out, const T *a, const T *b, int64_t n, int64_t nb, bool vec, F f)
{
    tp_map2_two((T *)NULL, out, a, b, n, nb, vec, [f](float x, float y) { return tp_two{0.0f, f(x, y)}; });
}

// Whether tp_map1's 16-byte path applies to these buffers.
static inline bool tp_map1_vec(const void *out, const void *x) { return tp_aligned16(out) && tp_aligned16(x); }

// Whether tp_map2's (or tp_map2_two's, whose other output the caller
// checks as well) 16-byte path applies to these buffers: aligned, and b either
// not repeating (nb = n) or a whole number of packs long.
static inline bool tp_map2_vec(tp_kernel_dtype t, const void *out, const void *a, const void *b, int64_t n, int64_t nb)
{
    return tp_aligned16(out) && tp_aligned16(a) && tp_aligned16(b) &&
           (nb == n || nb % (t == TP_KERNEL_F32 ? 4 : 8) == 0);
}

#endif // TPRUN_KERNELS_PACK_CUH
