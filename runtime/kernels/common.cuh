// common.cuh: what every kernel source of runtime/kernels shares.
// defines: TP_KCHECK, TP_CEIL_DIV, TP_UNROLL, tp_to_float / tp_from_float<T>
// (the storage types: float, __nv_bfloat16), tp_warp_sum / tp_warp_max,
// tp_block_sum / tp_block_max, tp_rows_threads, TP_GRID_STRIDE, tp_elementwise_blocks.
//
// Kernels are 1-D blocks of a multiple of 32 threads (the reductions rely
// on whole warps). All arithmetic is fp32; T is only how values are stored.
#ifndef TPRUN_KERNELS_COMMON_CUH
#define TPRUN_KERNELS_COMMON_CUH

#include "kernels.h"
#include "launch.h"
#include "launch_limits.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// A launcher's precondition: on in release builds too (the backend table
// cannot return an error, and a bad shape would read out of bounds).
#define TP_KCHECK(cond, msg)                                                                             \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "tprun: kernel precondition failed at %s:%d: %s: %s (%s)\n", __FILE__,       \
                    __LINE__, __func__, #cond, msg);                                                     \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

#define TP_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

#ifdef __CUDACC__
#define TP_UNROLL _Pragma("unroll")
#else
#define TP_UNROLL
#endif

#define TP_FULL_MASK 0xffffffffu

// ---- storage types

__device__ __forceinline__ float tp_to_float(float x) { return x; }
__device__ __forceinline__ float tp_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T tp_from_float(float x);
template <> __device__ __forceinline__ float tp_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 tp_from_float<__nv_bfloat16>(float x)
{
    return __float2bfloat16(x); // round to nearest even
}

// ---- reductions
// Butterfly (xor) reductions: every lane ends with the same bits, because
// each step adds the same two numbers on both lanes of a pair. So the
// results are identical across lanes and warps, whatever the schedule.

// F: float, or double where a sum must not lose bits (sum_squares)
template <typename F> __device__ __forceinline__ F tp_warp_sum(F v)
{
    TP_UNROLL
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(TP_FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float tp_warp_max(float v)
{
    TP_UNROLL
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(TP_FULL_MASK, v, off));
    return v;
}

// The sum over the block, returned to every thread. Every thread of the
// block must call it (it has barriers); it may be called again at once.
template <typename F> __device__ __forceinline__ F tp_block_sum(F v)
{
    TP_SHARED(F, tp_partial_sum, 32);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = tp_warp_sum(v);
    if (lane == 0)
        tp_partial_sum[warp] = v;
    __syncthreads();
    v = lane < nwarps ? tp_partial_sum[lane] : (F)0;
    v = tp_warp_sum(v);
    __syncthreads(); // the next call rewrites tp_partial_sum
    return v;
}

// The maximum over the block (NaN-ignoring, as fmaxf), to every thread.
__device__ __forceinline__ float tp_block_max(float v)
{
    TP_SHARED(float, tp_partial_max, 32);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = tp_warp_max(v);
    if (lane == 0)
        tp_partial_max[warp] = v;
    __syncthreads();
    v = lane < nwarps ? tp_partial_max[lane] : -INFINITY;
    v = tp_warp_max(v);
    __syncthreads();
    return v;
}

// ---- launch shapes

// Threads for a one-block-per-row kernel over rows of n: about 8 elements
// per thread, a power of two from 32 to 1024.
static inline int tp_rows_threads(int64_t n)
{
    int threads = 32;
    while (threads < 1024 && (int64_t)threads * 8 < n)
        threads *= 2;
    return threads;
}

// A grid-stride loop over n elements with 64-bit indices, and its blocks.
#define TP_GRID_STRIDE(i, n)                                                                             \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// Blocks for a grid-stride elementwise kernel over n elements.
static inline unsigned tp_elementwise_blocks(int64_t n, int threads)
{
    int64_t blocks = TP_CEIL_DIV(n, (int64_t)threads);
    return (unsigned)(blocks < 65536 ? blocks : 65536);
}

static inline bool tp_dtype_ok(tp_kernel_dtype t) { return t == TP_KERNEL_F32 || t == TP_KERNEL_BF16; }

#endif // TPRUN_KERNELS_COMMON_CUH
