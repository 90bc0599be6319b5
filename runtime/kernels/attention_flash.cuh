// attention_flash.cuh: the bf16 attention forward on tensor cores, for head
// dimensions 64, 96, 128 and 256 (attention.cu picks it; other shapes and
// fp32 keep attention_kernel, a warp per query in fp32).
//
// FlashAttention-2's forward: a block takes 64 queries of one head (16 per
// warp, 4 warps), walks the keys its queries see (causal: up to its last
// query) in tiles of 64 (16 at d 256), and keeps an online softmax per
// query. The scores
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
// next keys.
//
// Where a gradient follows, the kernel writes each query's log-sum-exp
// beside O, from the same maximum and denominator (the sum of the rounded
// probabilities), which the gradients' kernels read
// (attention_flash_grad.cuh).
//
// With rope (rope_attention), q and k are rotated as they are read, so
// the rotated copies are never stored: each query row's rotated words
// from the pair each rotates with, read from global memory beside it, as
// the queries become A fragments (flash_load_q); each key tile in shared
// memory once it has landed, between two barriers (flash_rope_tile). The
// cos and sin come from a table (tp_k_rope_table), and the rotation is
// rope.cuh's, so the result is the bits of rope, then attention.
//
// With documents (segments, backend.h), a score a query does not see is
// -inf as a causally hidden one is, and a block starts its walk at the
// tile of the first key any of its queries sees (flash_first_key): the
// tiles before its queries' documents are skipped, all of them for a
// block of padding, whose queries are 0.
// defines: FLASH_*, flash_for_head_dim, flash_attention_supports, flash_stride, flash_kv_tiles,
// flash_stage, flash_rope, flash_rope_of, flash_rope_cs, flash_rope_tile, flash_load_q, flash_warp,
// flash_document_sees, flash_first_key, flash_queries_end, flash_block_value,
// flash_softmax, flash_attention_launch
#ifndef TPRUN_KERNELS_ATTENTION_FLASH_CUH
#define TPRUN_KERNELS_ATTENTION_FLASH_CUH

#include "attention.cuh"
#include "rope.cuh"
#include "warp_tiles.cuh"
#include "sched/workspace.h"

#include <type_traits>

#define FLASH_WARPS 4
#define FLASH_QUERIES (FLASH_WARPS * 16)
#define FLASH_KEYS 64

// Keys a tile of the forward holds: FLASH_KEYS, but 16 at d 256, where a
// lane's share of its warp's output rows (128 registers) and queries (64)
// leave room for no more scores: ptxas gives the kernel 255 registers and
// no spills (32 keys spill).
template <int D> __host__ __device__ constexpr int flash_keys() { return D <= 128 ? FLASH_KEYS : 16; }

// The head dimensions with a tensor-core kernel (tp_cuda_flash_head_dim,
// sched/workspace.h, where tpcc --report reads them too) are multiples of
// 16 (the products' k). flash_for_head_dim calls
// f(std::integral_constant<int, d>()) for each of them up to MAX_D: the
// kernels' templates instantiated for each.
template <int MAX_D, typename F> static void flash_for_head_dim(int64_t d, F f)
{
    TP_KCHECK(tp_cuda_flash_head_dim(d) && d <= MAX_D, "no tensor-core attention kernel for this head dimension");
    if constexpr (MAX_D >= 256)
        if (d == 256)
            return f(std::integral_constant<int, 256>());
    if (d == 64)
        f(std::integral_constant<int, 64>());
    else if (d == 96)
        f(std::integral_constant<int, 96>());
    else
        f(std::integral_constant<int, 128>());
}

// A supported head dimension and 16-byte aligned operands (the arena's
// buffers are 256-byte aligned; anything else takes the fp32 kernel).
static inline bool flash_attention_supports(int64_t d, const void *q, const void *k, const void *v)
{
    return tp_cuda_flash_head_dim(d) && ((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) % 16 == 0;
}

// Elements of a row staged in shared memory: padded by 16 bytes, so the
// lanes of a fragment load (eight rows, one per quad) fall on distinct
// banks.
template <int D> __host__ __device__ constexpr int flash_stride() { return D + 8; }

// A key and a value tile of ROWS staged rows: the forward's shared
// memory (flash_keys<D>() rows, 34 KiB for d 128).
template <int D, int ROWS> struct __align__(16) flash_kv_tiles {
    __nv_bfloat16 k[ROWS * flash_stride<D>()];
    __nv_bfloat16 v[ROWS * flash_stride<D>()];
};

// Rows [r0, r0 + ROWS) of head `head` of x ([batch, s, heads, D], batch
// bi) into tile, zeros past the sequence: this thread's pieces of 16 bytes
// (a block of FLASH_WARPS warps), in a group of its own.
template <int D, int ROWS>
__device__ __forceinline__ void flash_stage(__nv_bfloat16 *tile, const __nv_bfloat16 *x, int64_t bi, int64_t s,
                                            int64_t heads, int64_t head, int64_t r0)
{
    constexpr int PER_ROW = D / 8, PIECES = ROWS * PER_ROW / (FLASH_WARPS * 32);
    static_assert(PIECES * FLASH_WARPS * 32 == ROWS * PER_ROW, "whole pieces per thread");
    TP_UNROLL
    for (int i = 0; i < PIECES; i++) {
        const int e = threadIdx.x + i * FLASH_WARPS * 32, row = e / PER_ROW, col = e % PER_ROW * 8;
        const int64_t r = r0 + row;
        const __nv_bfloat16 *src = x + ((bi * s + (r < s ? r : 0)) * heads + head) * D + col;
        tp_cp_async_16(tile + row * flash_stride<D>() + col, src, r < s ? 16u : 0u);
    }
    tp_cp_async_commit();
}

// The rotation the kernels apply as they read q and k (tp_k_rope_in):
// table null for none; token t of batch row bi has row bi batch_rows + t
// of the table (batch_rows 0: one row of positions for all).
struct flash_rope {
    const float2 *table;
    int64_t batch_rows;
    int half; // rotary / 2, even (tp_cuda_rope_in_attention)
};

static inline flash_rope flash_rope_of(const tp_k_rope_in *rope, int64_t s)
{
    if (!rope)
        return flash_rope{nullptr, 0, 0};
    TP_KCHECK((uintptr_t)rope->table % 16 == 0, "the rope table 16-byte aligned (read 16 bytes at a time)");
    return flash_rope{reinterpret_cast<const float2 *>(rope->table), rope->by_batch ? s : 0, (int)(rope->rotary / 2)};
}

// (cos, sin) of frequencies j and j + 1 (j even) at token t of batch row bi.
__device__ __forceinline__ float4 flash_rope_cs(const flash_rope &rope, int64_t bi, int64_t t, int j)
{
    return *reinterpret_cast<const float4 *>(rope.table + (bi * rope.batch_rows + t) * rope.half + j);
}

// Rows [0, ROWS) of a staged tile (rows r0 on of batch row bi's sequence)
// rotated in place, each thread its pairs of words; the rows past the
// sequence are zeros and stay so. The caller waits for the tile and
// takes a barrier before, and another after, before any warp reads it.
template <int D, int ROWS>
__device__ __forceinline__ void flash_rope_tile(__nv_bfloat16 *tile, const flash_rope &rope, int64_t bi, int64_t r0,
                                                int64_t s)
{
    const int words = rope.half / 2; // of each half of a row
    for (int e = threadIdx.x; e < ROWS * words; e += FLASH_WARPS * 32) {
        const int row = e / words, j = e % words * 2;
        if (r0 + row >= s)
            break; // and every row after it
        uint32_t *first = reinterpret_cast<uint32_t *>(tile + row * flash_stride<D>() + j), *second = first + words;
        rope_rotate_words(*first, *second, flash_rope_cs(rope, bi, r0 + row, j));
    }
}

// warp_load_a of 16 query rows (from token t0 of batch row bi), rotated
// by rope: a rotated word from the pair of words it rotates with, both
// read from global memory (the partner is in another lane's fragment).
template <int D>
__device__ __forceinline__ void flash_load_q(uint32_t (&a)[D / 16][4], const __nv_bfloat16 *rows, int64_t stride,
                                             int64_t valid, const flash_rope &rope, int64_t bi, int64_t t0)
{
    warp_load_a<D>(a, rows, stride, valid);
    if (!rope.table)
        return;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    TP_UNROLL
    for (int c = 0; c < D / 16; c++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) { // as warp_load_a's
            const int row = g + 8 * (i % 2), col = c * 16 + 2 * t + 8 * (i / 2);
            if (row >= valid || col >= 2 * rope.half)
                continue;
            const bool second = col >= rope.half;
            const int j = second ? col - rope.half : col;
            const __nv_bfloat16 *at = rows + row * stride + j;
            uint32_t w1 = *reinterpret_cast<const uint32_t *>(at),
                     w2 = *reinterpret_cast<const uint32_t *>(at + rope.half);
            rope_rotate_words(w1, w2, flash_rope_cs(rope, bi, t0 + row, j));
            a[c][i] = second ? w2 : w1;
        }
}

// What a warp carries from tile to tile: its queries as A fragments, and
// per query row (g and g + 8 of the lane's quad) the running maximum, this
// lane's part of the denominator, and its columns of the output.
template <int D> struct flash_warp {
    uint32_t q[D / 16][4];
    float mx[2], denom[2], o[D / 8][4];
};

// Whether query `row` sees `key` by documents (seg: the batch row's, or
// nullptr for none); the caller checks causality (key <= row).
__device__ __forceinline__ bool flash_document_sees(const int32_t *seg, int64_t row, int64_t key, int64_t s)
{
    return !seg || (row < s && attn_sees(seg, row, key));
}

// Documents are numbered in order along a row (backend.h), so the keys the
// queries [q0, qend) see start at the first key of the document of the
// first of them that is not padding (a pad between two of its tokens
// aside); qend when all are padding, and see nothing.
__device__ __forceinline__ int64_t flash_first_key(const int32_t *seg, int64_t q0, int64_t qend)
{
    int64_t t = q0;
    while (t < qend && seg[t] < 0)
        t++;
    if (t == qend)
        return qend;
    int64_t first = t;
    for (int64_t u = t - 1; u >= 0 && (seg[u] == seg[t] || seg[u] < 0); u--)
        if (seg[u] == seg[t])
            first = u;
    return first;
}

// And the queries that see any of the keys [k0, kend) end after the last
// token of the document of the last of them that is not padding; k0 when
// all are padding, seen by none.
__device__ __forceinline__ int64_t flash_queries_end(const int32_t *seg, int64_t k0, int64_t kend, int64_t s)
{
    int64_t k = kend - 1;
    while (k >= k0 && seg[k] < 0)
        k--;
    if (k < k0)
        return k0;
    int64_t end = k + 1;
    for (int64_t u = k + 1; u < s && (seg[u] == seg[k] || seg[u] < 0); u++)
        if (seg[u] == seg[k])
            end = u + 1;
    return end;
}

// f() computed by thread 0 alone and handed to every thread of the block
// (a barrier: every thread calls it, once per kernel).
template <typename F> __device__ __forceinline__ int64_t flash_block_value(F f)
{
    TP_SHARED(int64_t, flash_value, 1);
    if (threadIdx.x == 0)
        flash_value[0] = f();
    __syncthreads();
    return flash_value[0];
}

// The online softmax over one tile's scores (KEYS keys from k0; row0 the
// lane's first query, the second is row0 + 8): the rows' maxima grow, the
// accumulator and denominator are rescaled, and s is replaced by the
// probabilities, packed as the A fragments p of the P V product.
template <int D, int KEYS>
__device__ __forceinline__ void flash_softmax(uint32_t (&p)[KEYS / 16][4], flash_warp<D> &w, float (&s)[KEYS / 8][4],
                                              int64_t k0, int64_t row0, int64_t seq, float scale, float softcap,
                                              const int32_t *seg)
{
    const int t = threadIdx.x % 4;
    float tile_max[2] = {-INFINITY, -INFINITY};
    TP_UNROLL
    for (int n = 0; n < KEYS / 8; n++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) {
            const int64_t key = k0 + n * 8 + 2 * t + i % 2, row = row0 + 8 * (i / 2);
            const bool seen = key <= row && key < seq && flash_document_sees(seg, row, key, seq);
            s[n][i] = seen ? attn_score(s[n][i], scale, softcap) : -INFINITY;
            tile_max[i / 2] = fmaxf(tile_max[i / 2], s[n][i]);
        }
    float base[2];
    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(TP_FULL_MASK, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(TP_FULL_MASK, tile_max[r], 2));
        const float mx = fmaxf(w.mx[r], tile_max[r]);
        base[r] = mx == -INFINITY ? 0.0f : mx; // a row that has seen no key (past the sequence, padding)
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
    for (int n = 0; n < KEYS / 8; n++)
        TP_UNROLL
        for (int i = 0; i < 4; i++) {
            // the denominator sums what P V multiplies: the bf16 rounding
            s[n][i] = __bfloat162float(__float2bfloat16(expf(s[n][i] - base[i / 2])));
            w.denom[i / 2] += s[n][i];
        }
    warp_c_to_a<KEYS>(p, s);
}

// The barriers a forward kernel takes: all but in the emulated tests,
// which show that the absence of either of the others is caught.
enum flash_barriers { FLASH_BARRIERS_ALL, FLASH_NO_TRAILING_BARRIER, FLASH_NO_ROPE_BARRIER };

// Block (query tile, head, batch); the query tiles run last first, so the
// blocks with the most keys start first. lse (or NULL) at [(batch h +
// head) s + query].
template <int D, int kBarriers>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_kernel(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                           const __nv_bfloat16 *v, int64_t s, int64_t h, int64_t g, float scale, float softcap,
                           const int32_t *segments, flash_rope rope)
{
    constexpr int KEYS = flash_keys<D>();
    typedef flash_kv_tiles<D, KEYS> tiles; // (a macro argument holds no comma)
    TP_SHARED(tiles, smem, 1);
    tiles &sm = smem[0];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = lane / 4, t = lane % 4;
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FLASH_QUERIES;
    const int64_t kend = q0 + FLASH_QUERIES < s ? q0 + FLASH_QUERIES : s; // keys any query here sees
    const int64_t warp_q0 = q0 + warp * 16, warp_last = warp_q0 + 15;     // the warp's queries
    const int64_t row0 = warp_q0 + qd;                                    // this lane's first query
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const int64_t first = seg ? flash_block_value([&] { return flash_first_key(seg, q0, kend); }) : 0;
    const int64_t kstart = first < kend ? first / KEYS * KEYS : kend;    // no tile for a block of padding

    flash_stage<D, KEYS>(sm.k, k, bi, s, g, kh, kstart);
    flash_stage<D, KEYS>(sm.v, v, bi, s, g, kh, kstart);

    flash_warp<D> w;
    flash_load_q<D>(w.q, q + ((bi * s + warp_q0) * h + hi) * D, h * D, s - warp_q0, rope, bi, warp_q0);
    TP_UNROLL
    for (int r = 0; r < 2; r++)
        w.mx[r] = -INFINITY, w.denom[r] = 0.0f;
    warp_zero<D>(w.o);

    for (int64_t k0 = kstart; k0 < kend; k0 += KEYS) {
        const bool more = k0 + KEYS < kend, mine = k0 <= warp_last; // causal: skip tiles past the warp
        float sc[KEYS / 8][4];
        uint32_t p[KEYS / 16][4];
        tp_cp_async_wait<1>(); // this tile's keys (its values may still be on their way)
        __syncthreads();
        if (rope.table) {
            flash_rope_tile<D, KEYS>(sm.k, rope, bi, k0, s);
            if (kBarriers != FLASH_NO_ROPE_BARRIER)
                __syncthreads(); // the tile is rotated
        }
        if (mine) {
            warp_zero<KEYS>(sc);
            warp_mma_abt<KEYS, D>(sc, w.q, sm.k, flash_stride<D>());
        }
        __syncthreads(); // every warp is done with the keys
        if (more)
            flash_stage<D, KEYS>(sm.k, k, bi, s, g, kh, k0 + KEYS);
        else
            tp_cp_async_commit(); // an empty group keeps the count the waits expect
        if (mine)
            flash_softmax<D, KEYS>(p, w, sc, k0, row0, s, scale, softcap, seg);
        tp_cp_async_wait<1>(); // this tile's values
        __syncthreads();
        if (mine)
            warp_mma_ab<KEYS, D>(w.o, p, sm.v, flash_stride<D>());
        if (kBarriers != FLASH_NO_TRAILING_BARRIER)
            __syncthreads(); // every warp is done with the values
        if (more)
            flash_stage<D, KEYS>(sm.v, v, bi, s, g, kh, k0 + KEYS);
        else
            tp_cp_async_commit();
    }

    tp_cp_async_wait<0>(); // the first tiles of a block that walked none
    float inv[2];
    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        float denom = w.denom[r];
        denom += __shfl_xor_sync(TP_FULL_MASK, denom, 1);
        denom += __shfl_xor_sync(TP_FULL_MASK, denom, 2);
        inv[r] = denom > 0.0f ? 1.0f / denom : 0.0f; // 0: a row that sees no key (padding)
        const int64_t row = row0 + 8 * r;
        if (lse && row < s && t == 0) // P = exp(score - lse) = 0 for a row that sees nothing
            lse[(bi * h + hi) * s + row] = denom > 0.0f ? w.mx[r] + logf(denom) : INFINITY;
    }
    warp_store_c<D>(out + ((bi * s + warp_q0) * h + hi) * D, h * D, s - warp_q0, w.o, inv);
}

// [b, s, h, D] queries and output, [b, s, g, D] keys and values, [b, h, s]
// lse (or NULL), tp_cuda_flash_head_dim(D); rope or NULL.
template <int D, int kBarriers = FLASH_BARRIERS_ALL>
static void flash_attention_launch(tp_stream st, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                                   const __nv_bfloat16 *k, const __nv_bfloat16 *v, int64_t b, int64_t s, int64_t h,
                                   int64_t g, float scale, float softcap, const int32_t *segments,
                                   const tp_k_rope_in *rope)
{
    const dim3 grid((unsigned)TP_CEIL_DIV(s, FLASH_QUERIES), (unsigned)h, (unsigned)b);
    TP_LAUNCH((flash_attention_kernel<D, kBarriers>), grid, FLASH_WARPS * 32, 0, st, out, lse, q, k, v, s, h, g,
              scale, softcap, segments, flash_rope_of(rope, s));
}

#endif // TPRUN_KERNELS_ATTENTION_FLASH_CUH
