// attention_flash.cuh: the bf16 attention forward on tensor cores, for head
// dimensions 64 and 128 (attention.cu picks it; other shapes and fp32 keep
// attention_kernel, a warp per query in fp32).
//
// FlashAttention's forward: a block takes 64 queries of one head (16 per
// warp, 4 warps), walks the keys its queries see (causal: up to its last
// query) in tiles staged in shared memory, and keeps an online softmax per
// query: the scores S = Q K^T of a tile and the tile's part of P V are
// 16x16x16 bf16 tensor-core products (nvcuda::wmma) accumulated in fp32;
// the softmax statistics and the output accumulator are fp32 registers.
// The probabilities P are rounded to bf16 for the P V product, and the
// denominator sums the rounded values, so the output is an exact convex
// combination of the values with weights within 2^-8 of the softmax's.
//
// A fragment's element-to-lane mapping is unspecified, so the kernel never
// relies on one: the scores and each 16x16 piece of P V go through shared
// memory (store_matrix_sync), where each lane reads the row and columns it
// owns: row lane / 2, half lane % 2 of the columns.
// defines: FLASH_*, flash_attention_supports, flash_attention_launch
#ifndef TPRUN_KERNELS_ATTENTION_FLASH_CUH
#define TPRUN_KERNELS_ATTENTION_FLASH_CUH

#include "attention.cuh"

#define FLASH_WARPS 4
#define FLASH_QUERIES (FLASH_WARPS * 16)

// Head dimensions 64 and 128, and 16-byte aligned operands (the arena's
// buffers are 256-byte aligned; anything else takes the fp32 kernel).
static inline bool flash_attention_supports(int64_t d, const void *q, const void *k, const void *v)
{
    return (d == 64 || d == 128) && ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 == 0;
}

// Shared memory of a block, 48 KiB for d 64 and 44 KiB for d 128: within
// the 48 KiB a block gets without opt-in. Every array is a multiple of 32
// bytes, so each starts 256-bit aligned, as wmma's loads and stores require.
// The queries stay here rather than in fragments (registers): with d 128
// those would push the kernel into spilling.
template <int D> struct __align__(32) flash_smem {
    static constexpr int KEYS = 4096 / D;  // keys per tile: 64 for d 64, 32 for d 128
    __nv_bfloat16 q[FLASH_QUERIES * D];    // the block's queries (zeros past the sequence)
    __nv_bfloat16 kv[2 * KEYS * D];        // the key and value tiles (zeros past the sequence)
    float s[FLASH_WARPS][16 * KEYS];         // per warp: its scores, then pieces of P V
    __nv_bfloat16 p[FLASH_WARPS][16 * KEYS]; // per warp: its probabilities
};

// A thread's share of ROWS rows of D values staged from global memory:
// 16-byte pieces (8 values; a row is D * 2 bytes, a multiple of 16, and
// the launcher checks that the operands are 16-byte aligned), piece
// threadIdx.x + i * threads of the tile in p[i]. Held in registers, so the
// next key tile is on its way while the block works on the current one.
template <int D, int ROWS> struct flash_pieces {
    static constexpr int PER_ROW = D / 8, N = ROWS * PER_ROW / (FLASH_WARPS * 32);
    static_assert(ROWS * PER_ROW % (FLASH_WARPS * 32) == 0, "whole pieces per thread");
    uint4 p[N];

    // rows [r0, r0 + ROWS) of head `head` of x ([batch, s, heads, D], batch
    // bi), zeros past the sequence
    __device__ __forceinline__ void load(const __nv_bfloat16 *x, int64_t bi, int64_t s, int64_t heads, int64_t head,
                                         int64_t r0)
    {
        TP_UNROLL
        for (int i = 0; i < N; i++) {
            const int e = threadIdx.x + i * FLASH_WARPS * 32;
            const int64_t r = r0 + e / PER_ROW;
            p[i] = uint4{0u, 0u, 0u, 0u};
            if (r < s)
                p[i] = *reinterpret_cast<const uint4 *>(x + ((bi * s + r) * heads + head) * D + e % PER_ROW * 8);
        }
    }

    // into dst (ROWS x D, row-major)
    __device__ __forceinline__ void store(__nv_bfloat16 *dst) const
    {
        TP_UNROLL
        for (int i = 0; i < N; i++) {
            const int e = threadIdx.x + i * FLASH_WARPS * 32;
            *reinterpret_cast<uint4 *>(dst + e / PER_ROW * D + e % PER_ROW * 8) = p[i];
        }
    }
};

// One query row of the online softmax: this lane's half of the row's
// output accumulator and the row's statistics (the same on both lanes).
template <int D> struct flash_row {
    float mx, denom, o[D / 2];
};

// Warp `warp`'s part of one key tile (keys k0 .. k0 + KEYS, staged in
// kt and vt): scores, the softmax update, and P V into the accumulator.
template <int D>
__device__ __forceinline__ void flash_tile(flash_row<D> &r, flash_smem<D> &sm, int warp, int64_t k0, int64_t t,
                                           int64_t s, float scale, float softcap)
{
    using namespace nvcuda;
    constexpr int KEYS = flash_smem<D>::KEYS, HALF = KEYS / 2;
    const __nv_bfloat16 *qt = sm.q + warp * 16 * D, *kt = sm.kv, *vt = sm.kv + KEYS * D;
    float *sw = sm.s[warp];
    __nv_bfloat16 *pw = sm.p[warp];
    const int lane = threadIdx.x % 32, row = lane / 2, half = lane % 2;

    // S = Q K^T: 16 queries x KEYS keys (K^T is K read column-major)
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[KEYS / 16];
    TP_UNROLL
    for (int n = 0; n < KEYS / 16; n++)
        wmma::fill_fragment(acc[n], 0.0f);
    TP_UNROLL
    for (int c = 0; c < D / 16; c++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> qf;
        wmma::load_matrix_sync(qf, qt + c * 16, D);
        TP_UNROLL
        for (int n = 0; n < KEYS / 16; n++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> kf;
            wmma::load_matrix_sync(kf, kt + n * 16 * D + c * 16, D);
            wmma::mma_sync(acc[n], qf, kf, acc[n]);
        }
    }
    TP_UNROLL
    for (int n = 0; n < KEYS / 16; n++)
        wmma::store_matrix_sync(sw + n * 16, acc[n], KEYS, wmma::mem_row_major);
    __syncwarp(); // a lane reads scores other lanes stored

    // the softmax update of this lane's row, over its half of the tile's keys
    float sc[HALF], tile_max = -INFINITY;
    TP_UNROLL
    for (int j = 0; j < HALF; j++) {
        const int64_t key = k0 + half * HALF + j;
        sc[j] = key <= t && key < s ? attn_score(sw[row * KEYS + half * HALF + j], scale, softcap) : -INFINITY;
        tile_max = fmaxf(tile_max, sc[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(TP_FULL_MASK, tile_max, 1));
    const float mx = fmaxf(r.mx, tile_max);
    const float base = mx == -INFINITY ? 0.0f : mx; // a row that has seen no key (past the sequence)
    const float rescale = expf(r.mx - base);        // 0 for the first keys
    float sum = 0.0f;
    TP_UNROLL
    for (int j = 0; j < HALF; j++) {
        const __nv_bfloat16 p = __float2bfloat16(expf(sc[j] - base));
        pw[row * KEYS + half * HALF + j] = p;
        sum += __bfloat162float(p);
    }
    sum += __shfl_xor_sync(TP_FULL_MASK, sum, 1);
    r.denom = r.denom * rescale + sum;
    r.mx = mx;
    TP_UNROLL
    for (int i = 0; i < D / 2; i++)
        r.o[i] *= rescale;
    __syncwarp(); // the P V product reads probabilities other lanes wrote

    // O += P V, a 16x16 piece of the output at a time, added through sw
    TP_UNROLL
    for (int c = 0; c < D / 16; c++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> pv;
        wmma::fill_fragment(pv, 0.0f);
        TP_UNROLL
        for (int n = 0; n < KEYS / 16; n++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> pf;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> vf;
            wmma::load_matrix_sync(pf, pw + n * 16, KEYS);
            wmma::load_matrix_sync(vf, vt + n * 16 * D + c * 16, D);
            wmma::mma_sync(pv, pf, vf, pv);
        }
        wmma::store_matrix_sync(sw, pv, 16, wmma::mem_row_major); // waits for every lane's reads of sw
        __syncwarp();
        TP_UNROLL
        for (int i = 0; i < 8; i++)
            r.o[c * 8 + i] += sw[row * 16 + half * 8 + i];
    }
}

// Block (query tile of 64, head, batch). kTrailingBarrier is false only in
// the emulated tests, which show that its absence is caught.
template <int D, bool kTrailingBarrier>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                           const __nv_bfloat16 *v, int64_t s, int64_t h, int64_t g, float scale, float softcap)
{
    constexpr int KEYS = flash_smem<D>::KEYS;
    TP_SHARED(flash_smem<D>, smem, 1);
    flash_smem<D> &sm = smem[0];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int64_t q0 = (int64_t)blockIdx.x * FLASH_QUERIES;
    const int64_t kend = q0 + FLASH_QUERIES < s ? q0 + FLASH_QUERIES : s; // keys any query here sees
    const int64_t warp_last = q0 + warp * 16 + 15;                        // the warp's last query
    const int64_t t = q0 + warp * 16 + lane / 2;                          // this lane's query

    {
        flash_pieces<D, FLASH_QUERIES> qp;
        qp.load(q, bi, s, h, hi, q0);
        qp.store(sm.q); // read after the first tile's barrier
    }
    flash_pieces<D, KEYS> kp, vp; // the next key tile
    kp.load(k, bi, s, g, kh, 0);
    vp.load(v, bi, s, g, kh, 0);
    flash_row<D> r;
    r.mx = -INFINITY;
    r.denom = 0.0f;
    TP_UNROLL
    for (int i = 0; i < D / 2; i++)
        r.o[i] = 0.0f;
    for (int64_t k0 = 0; k0 < kend; k0 += KEYS) {
        kp.store(sm.kv);
        vp.store(sm.kv + KEYS * D);
        __syncthreads();
        if (k0 + KEYS < kend) {
            kp.load(k, bi, s, g, kh, k0 + KEYS);
            vp.load(v, bi, s, g, kh, k0 + KEYS);
        }
        if (k0 <= warp_last) // causal: a tile past all of the warp's queries is skipped
            flash_tile<D>(r, sm, warp, k0, t, s, scale, softcap);
        if (kTrailingBarrier)
            __syncthreads(); // the next tile overwrites kv
    }
    if (t >= s)
        return;
    __nv_bfloat16 *out_row = out + ((bi * s + t) * h + hi) * D;
    const float inv = 1.0f / r.denom;
    TP_UNROLL
    for (int c = 0; c < D / 16; c++)
        TP_UNROLL
        for (int i = 0; i < 8; i++)
            out_row[c * 16 + (lane % 2) * 8 + i] = __float2bfloat16(r.o[c * 8 + i] * inv);
}

// [b, s, h, D] queries, [b, s, g, D] keys and values, D 64 or 128.
template <int D, bool kTrailingBarrier = true>
static void flash_attention_launch(tp_stream st, __nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                   const __nv_bfloat16 *v, int64_t b, int64_t s, int64_t h, int64_t g, float scale,
                                   float softcap)
{
    const dim3 grid((unsigned)TP_CEIL_DIV(s, FLASH_QUERIES), (unsigned)h, (unsigned)b);
    TP_LAUNCH((flash_attention_kernel<D, kTrailingBarrier>), grid, FLASH_WARPS * 32, 0, st, out, q, k, v, s, h, g,
              scale, softcap);
}

#endif // TPRUN_KERNELS_ATTENTION_FLASH_CUH
