// attention_flash_grad.cuh: the gradients of the tensor-core attention
// (attention_flash.cuh) on tensor cores, bf16 with head dimension 64, 96
// or 128 (attention_grad.cu picks it; other shapes and fp32 keep its fp32
// kernels).
//
// FlashAttention-2's backward, with dq from a kernel of its own instead of
// atomics, so every sum runs in a fixed order and a step's gradients are
// the same bits on every run:
//   1. the forward kernel wrote each query's log-sum-exp L beside its
//      output O, and a first kernel (attention_grad.cu) writes each
//      query's D = dy . O from the stored O;
//   2. dq: a block takes 64 queries of one head (16 a warp) and walks the
//      keys they see in tiles: S = Q K^T and dP = dy V^T, then
//      dS = P (dP - D) with P = exp(S - L), and dq += dS K;
//   3. dk and dv: a block takes 64 keys of one kv head (16 a warp) and
//      walks the queries that see them: S^T = K Q^T and dP^T = V dy^T,
//      then dv += P^T dy and dk += dS^T Q. With one query head per kv
//      head the block writes dk and dv. With several (GQA, and every
//      tensor-parallel rank of a model whose kv heads are fewer than its
//      ranks holds one kv head for several query heads), a block takes
//      one query head and writes fp32 sums of its own, which
//      flash_kv_reduce_kernel adds in head order: the kv heads alone
//      would leave most of a GPU idle (one kv head, 2048 positions: 32
//      blocks).
// Every product is an m16n8k16 bf16 product accumulated in fp32
// (warp_tiles.cuh); the warp's queries or keys stay A fragments, the
// scores C fragments, and P and dS become the next product's A fragments
// rounded to bf16 (2^-9 relative a term). With P from a log-sum-exp that
// the forward computed with rounded weights, and D from the output rounded
// to bf16 as it was stored, each gradient is within
// 2^-7 of the size of its terms (dS's counted before its cancellation:
// P (|dP| + sum_j P_j |dP_j|)), then the store's rounding. Soft-capping
// multiplies dS by 1 - (S / cap)^2, as attn_ds does.
//
// With documents (segments), a pair a query does not see by them is
// hidden as a causally hidden one is; dq's block walks the keys from its
// queries' first document on (flash_first_key), dk and dv's the queries
// up to the end of its keys' last (flash_queries_end).
//
// Tiles come into shared memory by cp.async, rows padded as the forward's.
// dq's key and value tiles are double-buffered; dk and dv keep the 64 keys
// and values of the block staged and bring one tile of queries and output
// gradients at a time: at d 96 and 128 a second tile would pass the 48 KiB
// a block gets without opt-in.
// defines: flash_attention_grad_supports, flash_attention_grad_launch
#ifndef TPRUN_KERNELS_ATTENTION_FLASH_GRAD_CUH
#define TPRUN_KERNELS_ATTENTION_FLASH_GRAD_CUH

#include "attention_flash.cuh"

// Rows a tile of the walk holds: keys for dq, queries for dk and dv. Past
// d 64 fewer, for the registers (dq keeps Q and dy as fragments beside its
// accumulator; dk and dv two accumulators) and the shared memory (dk and
// dv's block takes 36 KiB at d 64, 39 at d 96 and 42.5 at d 128).
template <int D> struct flash_grad_tiles {
    static constexpr int DQ_KEYS = D <= 64 ? 64 : 32;
    static constexpr int DKV_QUERIES = D <= 64 ? 64 : D <= 96 ? 32 : 16;
};

template <int D> struct __align__(16) flash_dkv_smem {
    __nv_bfloat16 k[FLASH_KEYS * flash_stride<D>()];
    __nv_bfloat16 v[FLASH_KEYS * flash_stride<D>()];
    __nv_bfloat16 q[flash_grad_tiles<D>::DKV_QUERIES * flash_stride<D>()];
    __nv_bfloat16 dy[flash_grad_tiles<D>::DKV_QUERIES * flash_stride<D>()];
};

// A head dimension up to 128 (tp_cuda_flash_grad_head_dim), and every
// operand given 16-byte aligned.
static inline bool flash_attention_grad_supports(int64_t d, const void *dq, const void *dk, const void *dv,
                                                 const void *q, const void *k, const void *v, const void *dy)
{
    return tp_cuda_flash_grad_head_dim(d) && flash_attention_supports(d, q, k, v) &&
           ((uintptr_t)dq | (uintptr_t)dk | (uintptr_t)dv | (uintptr_t)dy) % 16 == 0;
}

// P and dS of one (query, key) pair from q . k, dP = dy . v and the
// query's L and D; both 0 for a pair the query does not see.
__device__ __forceinline__ void flash_grad_pair(float &p, float &ds, float dot, float dp, float lse, float dsum,
                                                bool seen, float scale, float softcap)
{
    const float score = attn_score(dot, scale, softcap);
    p = seen ? expf(score - lse) : 0.0f;
    ds = attn_ds(p, score, dsum, dp, softcap);
}

// Block (query tile, head, batch), the query tiles with the most keys first.
template <int D>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_dq_kernel(__nv_bfloat16 *dq, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                              const __nv_bfloat16 *v, const __nv_bfloat16 *dy, const float *lse, const float *dsum,
                              int64_t s, int64_t h, int64_t g, float scale, float softcap, const int32_t *segments)
{
    constexpr int KEYS = flash_grad_tiles<D>::DQ_KEYS, STRIDE = flash_stride<D>();
    typedef flash_kv_tiles<D, KEYS> tiles; // (a macro argument holds no comma)
    TP_SHARED(tiles, smem, 2);             // two stages
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = lane / 4, t = lane % 4;
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FLASH_QUERIES;
    const int64_t kend = q0 + FLASH_QUERIES < s ? q0 + FLASH_QUERIES : s; // keys any query here sees
    const int64_t warp_q0 = q0 + warp * 16, row0 = warp_q0 + qd;
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const int64_t seen_from = seg ? flash_block_value([&] { return flash_first_key(seg, q0, kend); }) : 0;
    const int64_t kstart = seen_from < kend ? seen_from / KEYS * KEYS : kend; // no tile for a block of padding

    flash_stage<D, KEYS>(smem[0].k, k, bi, s, g, kh, kstart);
    flash_stage<D, KEYS>(smem[0].v, v, bi, s, g, kh, kstart);

    uint32_t qa[D / 16][4], dya[D / 16][4];
    const int64_t first = ((bi * s + warp_q0) * h + hi) * D;
    warp_load_a<D>(qa, q + first, h * D, s - warp_q0);
    warp_load_a<D>(dya, dy + first, h * D, s - warp_q0);
    float row_lse[2], row_dsum[2];
    TP_UNROLL
    for (int r = 0; r < 2; r++) {
        const int64_t row = row0 + 8 * r, stat = (bi * h + hi) * s + row;
        row_lse[r] = row < s ? lse[stat] : 0.0f;
        row_dsum[r] = row < s ? dsum[stat] : 0.0f;
    }
    float acc[D / 8][4];
    warp_zero<D>(acc);

    int stage = 0;
    for (int64_t k0 = kstart; k0 < kend; k0 += KEYS, stage ^= 1) {
        const bool mine = k0 <= warp_q0 + 15 && warp_q0 < s; // causal: skip tiles past the warp
        if (k0 + KEYS < kend) {
            flash_stage<D, KEYS>(smem[stage ^ 1].k, k, bi, s, g, kh, k0 + KEYS);
            flash_stage<D, KEYS>(smem[stage ^ 1].v, v, bi, s, g, kh, k0 + KEYS);
        } else {
            tp_cp_async_commit(); // empty groups keep the count the wait expects
            tp_cp_async_commit();
        }
        tp_cp_async_wait<2>(); // this tile's keys and values
        __syncthreads();
        if (mine) {
            const tiles &sm = smem[stage];
            float sc[KEYS / 8][4], dp[KEYS / 8][4];
            warp_zero<KEYS>(sc);
            warp_mma_abt<KEYS, D>(sc, qa, sm.k, STRIDE);
            warp_zero<KEYS>(dp);
            warp_mma_abt<KEYS, D>(dp, dya, sm.v, STRIDE);
            TP_UNROLL
            for (int n = 0; n < KEYS / 8; n++)
                TP_UNROLL
                for (int i = 0; i < 4; i++) {
                    const int64_t key = k0 + n * 8 + 2 * t + i % 2, row = row0 + 8 * (i / 2);
                    float p;
                    flash_grad_pair(p, sc[n][i], sc[n][i], dp[n][i], row_lse[i / 2], row_dsum[i / 2],
                                    key <= row && row < s && flash_document_sees(seg, row, key, s), scale, softcap);
                }
            uint32_t dsa[KEYS / 16][4];
            warp_c_to_a<KEYS>(dsa, sc);
            warp_mma_ab<KEYS, D>(acc, dsa, sm.k, STRIDE);
        }
        __syncthreads(); // every warp is done with this stage before the next tile's copy overwrites it
    }
    tp_cp_async_wait<0>(); // the first tiles of a block that walked none
    const float row_scale[2] = {scale, scale};
    warp_store_c<D>(dq + first, h * D, s - warp_q0, acc, row_scale);
}

// Where dk and dv go: dk and dv ([b, s, g, D], bf16, either null when not
// computed), and for a launch split by query head the fp32 sums of each
// ([b, s, h, D], unscaled; non-null where dk or dv is).
struct flash_kv_out {
    __nv_bfloat16 *dk, *dv;
    float *head_dk, *head_dv;
};

// Block (key tile, kv head, batch) over the kv head's query heads, or,
// kSplit, (key tile, query head, batch) over that head alone: dk and dv of
// 64 keys.
template <int D, bool kSplit>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_dkv_kernel(flash_kv_out out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                               const __nv_bfloat16 *v, const __nv_bfloat16 *dy, const float *lse, const float *dsum,
                               int64_t s, int64_t h, int64_t g, float scale, float softcap,
                               const int32_t *segments)
{
    constexpr int QUERIES = flash_grad_tiles<D>::DKV_QUERIES, STRIDE = flash_stride<D>();
    TP_SHARED(flash_dkv_smem<D>, smem, 1);
    flash_dkv_smem<D> &sm = smem[0];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kd = lane / 4, t = lane % 4;
    const int64_t bi = blockIdx.z, group = h / g, kh = kSplit ? blockIdx.y / group : blockIdx.y;
    const int64_t heads_from = kSplit ? blockIdx.y : kh * group; // the query heads the block walks
    const int64_t heads_to = heads_from + (kSplit ? 1 : group);
    const int64_t k0 = (int64_t)blockIdx.x * FLASH_KEYS, warp_k0 = k0 + warp * 16, key0 = warp_k0 + kd;
    const bool dk = out.dk, dv = out.dv;
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const int64_t kend = k0 + FLASH_KEYS < s ? k0 + FLASH_KEYS : s;
    const int64_t qend = seg ? flash_block_value([&] { return flash_queries_end(seg, k0, kend, s); }) : s;

    flash_stage<D, FLASH_KEYS>(sm.k, k, bi, s, g, kh, k0);
    flash_stage<D, FLASH_KEYS>(sm.v, v, bi, s, g, kh, k0);

    float dk_acc[D / 8][4], dv_acc[D / 8][4];
    warp_zero<D>(dk_acc);
    warp_zero<D>(dv_acc);
    for (int64_t hi = heads_from; hi < heads_to; hi++) {
        const float *head_lse = lse + (bi * h + hi) * s, *head_dsum = dsum + (bi * h + hi) * s;
        for (int64_t t0 = k0; t0 < qend; t0 += QUERIES) {
            flash_stage<D, QUERIES>(sm.q, q, bi, s, h, hi, t0);
            flash_stage<D, QUERIES>(sm.dy, dy, bi, s, h, hi, t0);
            tp_cp_async_wait<0>();
            __syncthreads();
            if (warp_k0 < s && t0 + QUERIES - 1 >= warp_k0) { // causal: skip tiles before the warp's keys
                uint32_t a[D / 16][4];
                float sc[QUERIES / 8][4], dp[QUERIES / 8][4];
                warp_load_a<D>(a, sm.k + warp * 16 * STRIDE, STRIDE, 16);
                warp_zero<QUERIES>(sc);
                warp_mma_abt<QUERIES, D>(sc, a, sm.q, STRIDE);
                warp_zero<QUERIES>(dp);
                if (dk) {
                    warp_load_a<D>(a, sm.v + warp * 16 * STRIDE, STRIDE, 16);
                    warp_mma_abt<QUERIES, D>(dp, a, sm.dy, STRIDE);
                }
                TP_UNROLL
                for (int n = 0; n < QUERIES / 8; n++)
                    TP_UNROLL
                    for (int i = 0; i < 4; i++) {
                        const int64_t query = t0 + n * 8 + 2 * t + i % 2, key = key0 + 8 * (i / 2);
                        const bool seen = key <= query && query < s && flash_document_sees(seg, query, key, s);
                        flash_grad_pair(sc[n][i], dp[n][i], sc[n][i], dp[n][i], seen ? head_lse[query] : 0.0f,
                                        seen ? head_dsum[query] : 0.0f, seen, scale, softcap);
                    }
                uint32_t pa[QUERIES / 16][4];
                if (dv) {
                    warp_c_to_a<QUERIES>(pa, sc);
                    warp_mma_ab<QUERIES, D>(dv_acc, pa, sm.dy, STRIDE);
                }
                if (dk) {
                    warp_c_to_a<QUERIES>(pa, dp);
                    warp_mma_ab<QUERIES, D>(dk_acc, pa, sm.q, STRIDE);
                }
            }
            __syncthreads(); // every warp is done with the tile before the next one's copy overwrites it
        }
    }
    if (kSplit) {
        const int64_t first = ((bi * s + warp_k0) * h + heads_from) * D;
        const float unscaled[2] = {1.0f, 1.0f};
        if (dk)
            warp_store_c<D>(out.head_dk + first, h * D, s - warp_k0, dk_acc, unscaled);
        if (dv)
            warp_store_c<D>(out.head_dv + first, h * D, s - warp_k0, dv_acc, unscaled);
        return;
    }
    const int64_t first = ((bi * s + warp_k0) * g + kh) * D;
    const float dk_scale[2] = {scale, scale}, dv_scale[2] = {1.0f, 1.0f};
    if (dk)
        warp_store_c<D>(out.dk + first, g * D, s - warp_k0, dk_acc, dk_scale);
    if (dv)
        warp_store_c<D>(out.dv + first, g * D, s - warp_k0, dv_acc, dv_scale);
}

// dk and dv (n elements each, [b, s, g, D]) from the sums of the query
// heads of each kv head, added in head order; dk times scale.
static __global__ void flash_kv_reduce_kernel(flash_kv_out out, int64_t n, int64_t h, int64_t g, int64_t d, float scale)
{
    const int64_t group = h / g;
    TP_GRID_STRIDE(e, n)
    {
        const int64_t row = e / d, c = e % d, kh = row % g;
        const int64_t first = ((row / g) * h + kh * group) * d + c; // query head kh * group of this position
        float sk = 0.0f, sv = 0.0f;
        for (int64_t j = 0; j < group; j++) {
            if (out.dk)
                sk += out.head_dk[first + j * d];
            if (out.dv)
                sv += out.head_dv[first + j * d];
        }
        if (out.dk)
            out.dk[e] = __float2bfloat16(scale * sk);
        if (out.dv)
            out.dv[e] = __float2bfloat16(sv);
    }
}

// [b, s, h, D] queries and dy, [b, s, g, D] keys and values; lse and dsum
// each query's log-sum-exp (the forward's) and D ([b, h, s]); where dk and
// dv are split by query head, heads holds each query head's fp32 dk and dv
// (2 b s h D floats: tp_cuda_attention_grad_scratch, sched/workspace.h).
// Any of dq, dk and dv may be null.
template <int D>
static void flash_attention_grad_launch(tp_stream st, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                                        const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                        const __nv_bfloat16 *dy, const float *lse, const float *dsum, float *heads,
                                        int64_t b, int64_t s, int64_t h, int64_t g, float scale, float softcap,
                                        const int32_t *segments)
{
    const unsigned tiles = (unsigned)TP_CEIL_DIV(s, FLASH_QUERIES);
    if (dq)
        TP_LAUNCH(flash_attention_dq_kernel<D>, dim3(tiles, (unsigned)h, (unsigned)b), FLASH_WARPS * 32, 0, st, dq, q,
                  k, v, dy, lse, dsum, s, h, g, scale, softcap, segments);
    if (!dk && !dv)
        return;
    flash_kv_out out = {dk, dv, nullptr, nullptr};
    if (!tp_cuda_flash_kv_by_query_head(h, g)) {
        TP_LAUNCH((flash_attention_dkv_kernel<D, false>), dim3(tiles, (unsigned)g, (unsigned)b), FLASH_WARPS * 32, 0,
                  st, out, q, k, v, dy, lse, dsum, s, h, g, scale, softcap, segments);
        return;
    }
    TP_KCHECK((uintptr_t)heads % 16 == 0, "the per-head sums 16-byte aligned (their stores take 8 bytes)");
    out.head_dk = dk ? heads : nullptr;
    out.head_dv = dv ? heads + b * s * h * D : nullptr;
    TP_LAUNCH((flash_attention_dkv_kernel<D, true>), dim3(tiles, (unsigned)h, (unsigned)b), FLASH_WARPS * 32, 0, st,
              out, q, k, v, dy, lse, dsum, s, h, g, scale, softcap, segments);
    const int64_t n = b * s * g * D;
    TP_LAUNCH(flash_kv_reduce_kernel, tp_elementwise_blocks(n, 256), 256, 0, st, out, n, h, g, (int64_t)D, scale);
}

#endif // TPRUN_KERNELS_ATTENTION_FLASH_GRAD_CUH
