// attention_flash.cuh: the bf16 attention forward on tensor cores, for head
// dimensions 64 and 128 (attention.cu picks it; other shapes and fp32 keep
// attention_kernel, a warp per query in fp32).
//
// FlashAttention-2's forward: a block takes 64 queries of one head (16 per
// warp, 4 warps), walks the keys its queries see (causal: up to its last
// query) in tiles of 64, and keeps an online softmax per query. The scores
// S = Q K^T of a tile and its part of P V are m16n8k16 bf16 tensor-core
// products (mma_sm80.cuh) accumulated in fp32, and everything between them
// stays in registers: the queries as A fragments, loaded once; the scores
// as C fragments, on which the softmax works in place (a row's values are
// spread over the four lanes of a quad, so its maximum takes two
// shuffles); the probabilities rounded to bf16 as the A fragments of P V;
// and the output accumulator. The probabilities P are rounded to bf16 for
// the P V product and the denominator sums the rounded values, so the
// output is an exact convex combination of the values with weights within
// 2^-8 of the softmax's.
//
// Key and value tiles come into shared memory by cp.async, each thread its
// share of 16-byte pieces, the next key tile loading while the block
// multiplies the current values and the next values while it scores the
// next keys. Rows are padded by 16 bytes, so the lanes of a fragment load
// (eight rows, one per quad) fall on distinct banks.
// defines: FLASH_*, flash_attention_supports, flash_attention_launch
#ifndef TPRUN_KERNELS_ATTENTION_FLASH_CUH
#define TPRUN_KERNELS_ATTENTION_FLASH_CUH

#include "attention.cuh"
#include "mma_sm80.cuh"

#define FLASH_WARPS 4
#define FLASH_QUERIES (FLASH_WARPS * 16)
#define FLASH_KEYS 64

// Head dimensions 64 and 128, and 16-byte aligned operands (the arena's
// buffers are 256-byte aligned; anything else takes the fp32 kernel).
static inline bool flash_attention_supports(int64_t d, const void *q, const void *k, const void *v)
{
    return (d == 64 || d == 128) && ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 == 0;
}

// Shared memory of a block: a key and a value tile, 34 KiB for d 128.
template <int D> struct __align__(16) flash_smem {
    static constexpr int STRIDE = D + 8; // elements per staged row
    __nv_bfloat16 k[FLASH_KEYS * STRIDE];
    __nv_bfloat16 v[FLASH_KEYS * STRIDE];
};

// Rows [r0, r0 + FLASH_KEYS) of kv head `head` of x ([batch, s, g, D],
// batch bi) into tile, zeros past the sequence: this thread's pieces of 16
// bytes, in a group of its own.
template <int D>
__device__ __forceinline__ void flash_stage(__nv_bfloat16 *tile, const __nv_bfloat16 *x, int64_t bi, int64_t s,
                                            int64_t g, int64_t head, int64_t r0)
{
    constexpr int PER_ROW = D / 8, PIECES = FLASH_KEYS * PER_ROW / (FLASH_WARPS * 32);
    TP_UNROLL
    for (int i = 0; i < PIECES; i++) {
        const int e = threadIdx.x + i * FLASH_WARPS * 32, row = e / PER_ROW, col = e % PER_ROW * 8;
        const int64_t r = r0 + row;
        const __nv_bfloat16 *src = x + ((bi * s + (r < s ? r : 0)) * g + head) * D + col;
        tp_cp_async_16(tile + row * flash_smem<D>::STRIDE + col, src, r < s ? 16u : 0u);
    }
    tp_cp_async_commit();
}

// What a warp carries from tile to tile: its queries as A fragments, and
// per query row (g and g + 8 of the lane's quad) the running maximum, this
// lane's part of the denominator, and its columns of the output.
template <int D> struct flash_warp {
    uint32_t q[D / 16][4];
    float mx[2], denom[2], o[D / 8][4];
};

// S = Q K^T for the warp's 16 queries and the tile's keys: s[n] is the
// 16x8 C fragment of keys 8n .. 8n + 7.
template <int D>
__device__ __forceinline__ void flash_scores(float (&s)[FLASH_KEYS / 8][4], const flash_warp<D> &w,
                                             const __nv_bfloat16 *kt)
{
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    TP_UNROLL
    for (int n = 0; n < FLASH_KEYS / 8; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    TP_UNROLL
    for (int c = 0; c < D / 16; c++)
        TP_UNROLL
        for (int n = 0; n < FLASH_KEYS / 8; n++) {
            // B[k][n] = K[key n][dim k]: two consecutive dims of key 8n + g
            const __nv_bfloat16 *key = kt + (n * 8 + g) * flash_smem<D>::STRIDE + c * 16 + 2 * t;
            const uint32_t b[2] = {*reinterpret_cast<const uint32_t *>(key),
                                   *reinterpret_cast<const uint32_t *>(key + 8)};
            tp_mma_bf16_16816(s[n], w.q[c], b);
        }
}

// The online softmax over one tile's scores (keys from k0; row0 the
// lane's first query, the second is row0 + 8): the rows' maxima grow, the
// accumulator and denominator are rescaled, and s is replaced by the
// probabilities, packed as the A fragments p of the P V product.
template <int D>
__device__ __forceinline__ void flash_softmax(uint32_t (&p)[FLASH_KEYS / 16][4], flash_warp<D> &w,
                                              float (&s)[FLASH_KEYS / 8][4], int64_t k0, int64_t row0, int64_t seq,
                                              float scale, float softcap)
{
    const int t = threadIdx.x % 4;
    float tile_max[2] = {-INFINITY, -INFINITY};
    TP_UNROLL
    for (int n = 0; n < FLASH_KEYS / 8; n++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) {
            const int64_t key = k0 + n * 8 + 2 * t + i % 2, row = row0 + 8 * (i / 2);
            s[n][i] = key <= row && key < seq ? attn_score(s[n][i], scale, softcap) : -INFINITY;
            tile_max[i / 2] = fmaxf(tile_max[i / 2], s[n][i]);
        }
    float base[2];
    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(TP_FULL_MASK, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(TP_FULL_MASK, tile_max[r], 2));
        const float mx = fmaxf(w.mx[r], tile_max[r]);
        base[r] = mx == -INFINITY ? 0.0f : mx; // a row that has seen no key (past the sequence)
        const float rescale = expf(w.mx[r] - base[r]); // 0 for the first keys
        w.mx[r] = mx;
        w.denom[r] *= rescale;
        TP_UNROLL
        for (int n = 0; n < D / 8; n++) {
            w.o[n][2 * r] *= rescale;
            w.o[n][2 * r + 1] *= rescale;
        }
    }
    TP_UNROLL
    for (int n = 0; n < FLASH_KEYS / 8; n++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) {
            // the denominator sums what P V multiplies: the bf16 rounding
            s[n][i] = __bfloat162float(__float2bfloat16(expf(s[n][i] - base[i / 2])));
            w.denom[i / 2] += s[n][i];
        }
    // keys 16c .. 16c + 15 are C fragments 2c and 2c + 1
    TP_UNROLL
    for (int c = 0; c < FLASH_KEYS / 16; c++) {
        p[c][0] = tp_pack_bf16x2(s[2 * c][0], s[2 * c][1]);
        p[c][1] = tp_pack_bf16x2(s[2 * c][2], s[2 * c][3]);
        p[c][2] = tp_pack_bf16x2(s[2 * c + 1][0], s[2 * c + 1][1]);
        p[c][3] = tp_pack_bf16x2(s[2 * c + 1][2], s[2 * c + 1][3]);
    }
}

// O += P V over the tile's values (vt, row-major [key][dim]): ldmatrix
// .trans reads four 8x8 blocks, the B fragments of two 8-column tiles of
// the output for 16 keys.
template <int D>
__device__ __forceinline__ void flash_pv(flash_warp<D> &w, const uint32_t (&p)[FLASH_KEYS / 16][4],
                                         const __nv_bfloat16 *vt)
{
    const int lane = threadIdx.x % 32, block = lane / 8, row = lane % 8;
    TP_UNROLL
    for (int c = 0; c < FLASH_KEYS / 16; c++)
        TP_UNROLL
        for (int n = 0; n < D / 16; n++) {
            // block 0: keys 16c .. +7, dims 16n .. +7; 1: keys +8; 2: dims +8; 3: both
            uint32_t b[4];
            tp_ldmatrix_x4_trans(b, vt + (c * 16 + block % 2 * 8 + row) * flash_smem<D>::STRIDE + n * 16 +
                                        block / 2 * 8);
            const uint32_t lo[2] = {b[0], b[1]}, hi[2] = {b[2], b[3]};
            tp_mma_bf16_16816(w.o[2 * n], p[c], lo);
            tp_mma_bf16_16816(w.o[2 * n + 1], p[c], hi);
        }
}

// Block (query tile, head, batch); the query tiles run last first, so the
// blocks with the most keys start first. kTrailingBarrier is false only in
// the emulated tests, which show that its absence is caught.
template <int D, bool kTrailingBarrier>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                           const __nv_bfloat16 *v, int64_t s, int64_t h, int64_t g, float scale, float softcap)
{
    TP_SHARED(flash_smem<D>, smem, 1);
    flash_smem<D> &sm = smem[0];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = lane / 4, t = lane % 4;
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FLASH_QUERIES;
    const int64_t kend = q0 + FLASH_QUERIES < s ? q0 + FLASH_QUERIES : s; // keys any query here sees
    const int64_t warp_last = q0 + warp * 16 + 15;                        // the warp's last query
    const int64_t row0 = q0 + warp * 16 + qd;                             // this lane's first query

    flash_stage<D>(sm.k, k, bi, s, g, kh, 0);
    flash_stage<D>(sm.v, v, bi, s, g, kh, 0);

    flash_warp<D> w;
    TP_UNROLL
    for (int c = 0; c < D / 16; c++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) { // rows row0 and row0 + 8, dims 2t and 2t + 8
            const int64_t row = row0 + 8 * (i % 2);
            const __nv_bfloat16 *src = q + ((bi * s + row) * h + hi) * D + c * 16 + 2 * t + 8 * (i / 2);
            w.q[c][i] = row < s ? *reinterpret_cast<const uint32_t *>(src) : 0u;
        }
    TP_UNROLL
    for (int r = 0; r < 2; r++)
        w.mx[r] = -INFINITY, w.denom[r] = 0.0f;
    TP_UNROLL
    for (int n = 0; n < D / 8; n++)
        w.o[n][0] = w.o[n][1] = w.o[n][2] = w.o[n][3] = 0.0f;

    for (int64_t k0 = 0; k0 < kend; k0 += FLASH_KEYS) {
        const bool more = k0 + FLASH_KEYS < kend, mine = k0 <= warp_last; // causal: skip tiles past the warp
        float sc[FLASH_KEYS / 8][4];
        uint32_t p[FLASH_KEYS / 16][4];
        tp_cp_async_wait<1>(); // this tile's keys (its values may still be on their way)
        __syncthreads();
        if (mine)
            flash_scores<D>(sc, w, sm.k);
        __syncthreads(); // every warp is done with the keys
        if (more)
            flash_stage<D>(sm.k, k, bi, s, g, kh, k0 + FLASH_KEYS);
        else
            tp_cp_async_commit(); // an empty group keeps the count the waits expect
        if (mine)
            flash_softmax<D>(p, w, sc, k0, row0, s, scale, softcap);
        tp_cp_async_wait<1>(); // this tile's values
        __syncthreads();
        if (mine)
            flash_pv<D>(w, p, sm.v);
        if (kTrailingBarrier)
            __syncthreads(); // every warp is done with the values
        if (more)
            flash_stage<D>(sm.v, v, bi, s, g, kh, k0 + FLASH_KEYS);
        else
            tp_cp_async_commit();
    }

    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        const int64_t row = row0 + 8 * r;
        float denom = w.denom[r];
        denom += __shfl_xor_sync(TP_FULL_MASK, denom, 1);
        denom += __shfl_xor_sync(TP_FULL_MASK, denom, 2);
        if (row >= s)
            continue;
        const float inv = 1.0f / denom;
        uint32_t *out_row = reinterpret_cast<uint32_t *>(out + ((bi * s + row) * h + hi) * D);
        TP_UNROLL
        for (int n = 0; n < D / 8; n++)
            out_row[n * 4 + t] = tp_pack_bf16x2(w.o[n][2 * r] * inv, w.o[n][2 * r + 1] * inv);
    }
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
