// attention_flash_grad.cuh: the gradients of the tensor-core attention
// (attention_flash.cuh) on tensor cores, bf16 with head dimension 64, 96,
// 128 or 256 (attention_grad.cu picks it; other shapes and fp32 keep its
// fp32 kernels).
//
// FlashAttention-2's backward in one pass, with dq summed in a fixed order
// as FlashAttention-3's deterministic mode does, so a step's gradients are
// the same bits on every run:
//   1. the forward kernel wrote each query's log-sum-exp L beside its
//      output O, and a first kernel (attention_grad.cu) writes each
//      query's D = dy . O from the stored O;
//   2. a block takes 64 keys of one query head (16 a warp) and walks the
//      tiles of queries that see them, the last tile first: S^T = K Q^T
//      and dP^T = V dy^T, then P = exp(S - L) and dS = P (dP - D), and
//      dv += P^T dy, dk += dS^T Q in registers. The block's dS goes to
//      shared memory, and its part of the tile's dq, dS K over its 64
//      keys, is added into an fp32 sum of dq in global memory when its
//      turn comes: the key blocks that see a tile of queries add into it
//      one after another, the first first (block_turns.cuh: a count per
//      tile), so the sum's order never depends on the schedule. Walking
//      the tiles last first keeps the blocks in step: block j reaches a
//      tile after block j - 1 has, as both start at the last one, so a
//      turn is rarely waited for.
//   3. dq = scale * the sum, rounded to bf16, in a last elementwise pass.
// S, dP, dv, dk and dq: five products a pair of (query, key), where the
// forward takes two (six at d 256, whose dv takes a launch of its own:
// flash_grad_part). With one query head per kv head the block writes dk
// and dv. With several (GQA, and every tensor-parallel rank of a model
// whose kv heads are fewer than its ranks holds one kv head for several
// query heads), each block writes fp32 sums of its own query head, which
// flash_kv_reduce_kernel adds in head order: the kv heads alone would
// leave most of a GPU idle (one kv head, 2048 positions: 32 blocks).
// Every product is an m16n8k16 bf16 product accumulated in fp32
// (warp_tiles.cuh); the warp's keys stay A fragments, the scores C
// fragments, and P and dS become the next product's A fragments rounded
// to bf16 (2^-9 relative a term). With P from a log-sum-exp that the
// forward computed with rounded weights, and D from the output rounded to
// bf16 as it was stored, each gradient is within 2^-7 of the size of its
// terms (dS's counted before its cancellation: P (|dP| + sum_j P_j
// sum_e |dy_e v_je|), D's over keys and columns, as O's rounding errs by
// sum_e |dy_e O_e|), then the store's rounding. Soft-capping multiplies dS by
// 1 - (S / cap)^2, as attn_ds does.
//
// With rope (rope_attention), q and k are rotated as they land in shared
// memory, the block's keys once and each tile of queries, between two
// barriers (flash_rope_tile), and dq and dk rotated back by rope's inverse
// as they are stored (flash_rope_back): each first rounded to bf16 as the
// rotated one's gradient, then rotated and rounded again, the bits of
// rope, then attention's gradient, then rope's inverse.
//
// With documents (segments), a pair a query does not see by them is
// hidden as a causally hidden one is, and a block walks only the tiles
// whose queries' documents reach its keys: those whose first seen key
// (flash_first_key, a table flash_first_block_kernel writes) is in its
// block or before, so the blocks adding into a tile are consecutive and
// each knows its turn.
//
// Tiles come into shared memory by cp.async, rows padded as the forward's:
// the block's 64 keys and values once (keys alone for dv at d 256), then a
// tile of queries and output
// gradients at a time, the next one loading while the block multiplies dS
// K and waits for its turn (two tiles would pass the 48 KiB a block gets
// without opt-in at d 96 and 128).
// defines: flash_attention_grad_supports, flash_rope_back, flash_attention_grad_launch
#ifndef TPRUN_KERNELS_ATTENTION_FLASH_GRAD_CUH
#define TPRUN_KERNELS_ATTENTION_FLASH_GRAD_CUH

#include "attention_flash.cuh"
#include "block_turns.cuh"

// Queries a tile of the walk holds: fewer past d 64, for the registers (two
// accumulators of D columns a warp) and the shared memory (45 KiB at d 64,
// 43.5 at d 96 and 44.75 at d 128). At least 16 (the bound
// tp_cuda_attention_grad_scratch counts turns by) and a divisor of
// FLASH_KEYS, so a tile lies in one key block.
template <int D> __host__ __device__ constexpr int flash_grad_queries() { return D <= 64 ? 64 : D <= 96 ? 32 : 16; }

// dS of a tile, queries by keys (dq's A operand), rows padded by 16 bytes.
#define FLASH_DS_STRIDE (FLASH_KEYS + 8)

// What a launch computes: dq, dk and dv together up to d 128; at d 256,
// where two accumulators of 256 columns would not fit a thread's 255
// registers, dv in one launch and dk with dq in another (six products a
// pair instead of five: S twice).
enum flash_grad_part { FLASH_GRAD_ALL, FLASH_GRAD_DV, FLASH_GRAD_DK_DQ };

// A block's shared memory (dynamic), in bf16 elements from its start: the
// 64 keys and values, a tile of queries and of output gradients, and dS.
// dv alone needs neither the values nor dS. 45 KiB at d 64, 43.5 at d 96,
// 44.75 at d 128, under the 48 KiB a block gets without opt-in; at d 256
// 84.75 KiB for dk and dq and 49.5 for dv, opted into
// (flash_allow_shared): sm_80 gives a block up to 163 KiB.
template <int D, int kPart> struct flash_grad_smem {
    static constexpr int64_t QUERIES = flash_grad_queries<D>(), STRIDE = flash_stride<D>();
    static constexpr int64_t k = 0, v = FLASH_KEYS * STRIDE;
    static constexpr int64_t q = v + (kPart == FLASH_GRAD_DV ? 0 : FLASH_KEYS * STRIDE);
    static constexpr int64_t dy = q + QUERIES * STRIDE, ds = dy + QUERIES * STRIDE;
    static constexpr int64_t end = ds + (kPart == FLASH_GRAD_DV ? 0 : QUERIES * FLASH_DS_STRIDE);
    static constexpr size_t bytes = (size_t)end * sizeof(__nv_bfloat16);
    static_assert((v | q | dy | ds) * sizeof(__nv_bfloat16) % 16 == 0, "every part 16-byte aligned");
};

// A launch of kernel taking `bytes` of dynamic shared memory: past 48 KiB
// the kernel must opt in first.
template <typename K> static void flash_allow_shared(K kernel, size_t bytes)
{
    if (bytes > 48 * 1024)
        TP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// A head dimension with a tensor-core kernel (tp_cuda_flash_head_dim), and
// every operand given 16-byte aligned.
static inline bool flash_attention_grad_supports(int64_t d, const void *dq, const void *dk, const void *dv,
                                                 const void *q, const void *k, const void *v, const void *dy)
{
    return flash_attention_supports(d, q, k, v) &&
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

// Column col of a gradient's row (token t of batch row bi) as rope's
// inverse computes it from value(c), the row's gradient of the rotated
// input, rounded to bf16 as the rotated gradient was stored (no rope: that
// value).
template <typename F>
__device__ __forceinline__ float flash_rope_back(const flash_rope &rope, int64_t bi, int64_t t, int64_t col, F value)
{
    const float own = value(col);
    if (!rope.table || col >= 2 * rope.half)
        return own;
    const bool second = col >= rope.half;
    const int64_t j = second ? col - rope.half : col;
    return rope_back(own, value(second ? j : col + rope.half), rope.table[(bi * rope.batch_rows + t) * rope.half + j],
                     second);
}

// x rounded to bf16, as a float.
__device__ __forceinline__ float flash_bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// A warp's rows of dk (keys from k0 of batch row bi) with rope: acc times
// scale rounded to bf16 into `rows` (the warp's 16 staged keys, which no
// warp reads any more), then each element rotated back from its row there
// (flash_rope_back) into grad.
template <int D>
__device__ __forceinline__ void flash_store_dk_rope(__nv_bfloat16 *grad, int64_t stride, int64_t valid,
                                                    const float (&acc)[D / 8][4], float scale, __nv_bfloat16 *rows,
                                                    const flash_rope &rope, int64_t bi, int64_t k0)
{
    const float scaled[2] = {scale, scale};
    warp_store_c<D>(rows, flash_stride<D>(), 16, acc, scaled);
    __syncwarp(); // a lane reads its partners' columns
    for (int e = threadIdx.x % 32; e < 16 * D; e += 32) {
        const int row = e / D, col = e % D;
        if (row >= valid)
            break;
        const __nv_bfloat16 *r = rows + row * flash_stride<D>();
        grad[row * stride + col] = __float2bfloat16(
            flash_rope_back(rope, bi, k0 + row, col, [&](int64_t c) { return __bfloat162float(r[c]); }));
    }
}

// Where the gradients go: dk and dv ([b, s, g, D], bf16, either null when
// not computed), and for a launch split by query head the fp32 sums of
// each ([b, s, h, D], unscaled; non-null where dk or dv is); dq's fp32 sum
// ([b, s, h, D], zeroed, unscaled; null when dq is not computed), with a
// count per tile of queries ([b, h, tiles], zeroed: the key blocks that
// have added into it), and with documents the first key block each tile
// sees ([b, tiles]; null without).
struct flash_grad_out {
    __nv_bfloat16 *dk, *dv;
    float *head_dk, *head_dv;
    float *dq_sum;
    int *turns;
    const int *first_block;
};

// first_block[bi tiles + i]: the key block of the first key any query of
// tile i sees (flash_first_key), or for a tile of padding the block after
// its own, so that no block walks it.
static __global__ void flash_first_block_kernel(int *first_block, const int32_t *segments, int64_t b, int64_t s,
                                                int queries)
{
    const int64_t tiles = TP_CEIL_DIV(s, queries);
    TP_GRID_STRIDE(e, b * tiles)
    {
        const int64_t t0 = e % tiles * queries, end = t0 + queries < s ? t0 + queries : s;
        const int64_t first = flash_first_key(segments + e / tiles * s, t0, end);
        first_block[e] = (int)((first < end ? first : t0 + FLASH_KEYS) / FLASH_KEYS);
    }
}

// Block (key block, query head, batch): dk and dv of 64 keys over that
// query head (kSplit: into its sums; else a kv head has this one query
// head), and their part of dq; at d 256 those kPart says; of rope(q) and
// rope(k) with rope. kTakeTurns is false only in the emulated tests, which
// show that adding out of turn is caught.
template <int D, bool kSplit, int kPart, bool kTakeTurns = true>
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_grad_kernel(flash_grad_out out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                const __nv_bfloat16 *v, const __nv_bfloat16 *dy, const float *lse, const float *dsum,
                                int64_t s, int64_t h, int64_t g, float scale, float softcap,
                                const int32_t *segments, flash_rope rope)
{
    typedef flash_grad_smem<D, kPart> layout;
    constexpr int QUERIES = flash_grad_queries<D>(), STRIDE = flash_stride<D>();
    // dq's tile, QUERIES x D, among the warps: 16 rows and DQ_COLS columns each
    constexpr int ROW_BLOCKS = QUERIES / 16, DQ_COLS = D * ROW_BLOCKS / FLASH_WARPS;
    static_assert(FLASH_KEYS % QUERIES == 0 && DQ_COLS % 16 == 0, "a tile in one key block, whole B fragments");
    // the accumulators' columns: one fragment for one the launch does not compute
    constexpr bool kDk = kPart != FLASH_GRAD_DV, kDv = kPart != FLASH_GRAD_DK_DQ;
    constexpr int DK_COLS = kDk ? D : 8, DV_COLS = kDv ? D : 8;
    TP_DYNAMIC_SHARED(uint4, flash_grad_raw);
    __nv_bfloat16 *const base = reinterpret_cast<__nv_bfloat16 *>(flash_grad_raw);
    __nv_bfloat16 *const sk = base + layout::k, *const sv = base + layout::v, *const sq = base + layout::q,
                         *const sdy = base + layout::dy, *const sds = base + layout::ds;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kd = lane / 4, t = lane % 4;
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g), kb = blockIdx.x;
    const int64_t k0 = kb * FLASH_KEYS, warp_k0 = k0 + warp * 16, key0 = warp_k0 + kd;
    const int64_t tiles = TP_CEIL_DIV(s, QUERIES), first_tile = k0 / QUERIES;
    const bool dk = kDk && out.dk, dv = kDv && out.dv, dq = kDk && out.dq_sum;
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const float *head_lse = lse + (bi * h + hi) * s, *head_dsum = dsum + (bi * h + hi) * s;
    const int dq_row = warp % ROW_BLOCKS * 16, dq_col = warp / ROW_BLOCKS * DQ_COLS;
    // the key block that adds into tile i first: its turn is kb minus that
    auto first_adder = [&](int64_t i) { return out.first_block ? (int64_t)out.first_block[bi * tiles + i] : 0; };
    // the next tile the block walks, from i down: its keys are seen there
    auto walked_from = [&](int64_t i) {
        while (i >= first_tile && first_adder(i) > kb)
            i--;
        return i;
    };

    flash_stage<D, FLASH_KEYS>(sk, k, bi, s, g, kh, k0);
    if (kDk)
        flash_stage<D, FLASH_KEYS>(sv, v, bi, s, g, kh, k0);
    const int64_t walk_start = walked_from(tiles - 1);
    int64_t tile = walk_start;
    if (tile >= first_tile) {
        flash_stage<D, QUERIES>(sq, q, bi, s, h, hi, tile * QUERIES);
        flash_stage<D, QUERIES>(sdy, dy, bi, s, h, hi, tile * QUERIES);
    }

    float dk_acc[DK_COLS / 8][4], dv_acc[DV_COLS / 8][4];
    warp_zero<DK_COLS>(dk_acc);
    warp_zero<DV_COLS>(dv_acc);
    while (tile >= first_tile) {
        const int64_t t0 = tile * QUERIES;
        tp_cp_async_wait<0>(); // this tile's queries and output gradients (the first time, the keys and values too)
        __syncthreads();
        if (rope.table) { // rotated in place: the keys the first time, every tile of queries
            if (tile == walk_start)
                flash_rope_tile<D, FLASH_KEYS>(sk, rope, bi, k0, s);
            flash_rope_tile<D, QUERIES>(sq, rope, bi, t0, s);
            __syncthreads();
        }
        float sc[QUERIES / 8][4], dp[QUERIES / 8][4];
        warp_zero<QUERIES>(sc);
        warp_zero<QUERIES>(dp);
        if (warp_k0 < s && t0 + QUERIES - 1 >= warp_k0) { // causal: skip tiles before the warp's keys
            uint32_t a[D / 16][4];
            warp_load_a<D>(a, sk + warp * 16 * STRIDE, STRIDE, 16);
            warp_mma_abt<QUERIES, D>(sc, a, sq, STRIDE);
            if (dk || dq) {
                warp_load_a<D>(a, sv + warp * 16 * STRIDE, STRIDE, 16);
                warp_mma_abt<QUERIES, D>(dp, a, sdy, STRIDE);
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
            if constexpr (kDv)
                if (dv) {
                    warp_c_to_a<QUERIES>(pa, sc);
                    warp_mma_ab<QUERIES, D>(dv_acc, pa, sdy, STRIDE);
                }
            if constexpr (kDk)
                if (dk) {
                    warp_c_to_a<QUERIES>(pa, dp);
                    warp_mma_ab<QUERIES, D>(dk_acc, pa, sq, STRIDE);
                }
        }
        if (dq) // dS^T of the warp's keys (zeros for a warp that skipped the tile), transposed
            TP_UNROLL
            for (int n = 0; n < QUERIES / 8; n++)
                TP_UNROLL
                for (int i = 0; i < 4; i++)
                    sds[(n * 8 + 2 * t + i % 2) * FLASH_DS_STRIDE + warp * 16 + kd + 8 * (i / 2)] =
                        __float2bfloat16(dp[n][i]);
        __syncthreads(); // dS is whole, and the queries and output gradients are read
        const int64_t next = walked_from(tile - 1);
        if (next >= first_tile) {
            flash_stage<D, QUERIES>(sq, q, bi, s, h, hi, next * QUERIES);
            flash_stage<D, QUERIES>(sdy, dy, bi, s, h, hi, next * QUERIES);
        }
        if (dq) {
            uint32_t a[FLASH_KEYS / 16][4];
            float part[DQ_COLS / 8][4];
            warp_load_a<FLASH_KEYS>(a, sds + dq_row * FLASH_DS_STRIDE, FLASH_DS_STRIDE, 16);
            warp_zero<DQ_COLS>(part);
            warp_mma_ab<FLASH_KEYS, DQ_COLS>(part, a, sk + dq_col, STRIDE);
            int *turn = out.turns + (bi * h + hi) * tiles + tile;
            if (kTakeTurns)
                tp_block_wait_turn(turn, (int)(kb - first_adder(tile)));
            warp_add_c<DQ_COLS>(out.dq_sum + ((bi * s + t0 + dq_row) * h + hi) * D + dq_col, h * D,
                                s - t0 - dq_row, part);
            tp_block_pass_turn(turn);
        }
        tile = next;
    }
    tp_cp_async_wait<0>(); // the keys and values of a block that walked no tile
    const int64_t first = kSplit ? ((bi * s + warp_k0) * h + hi) * D : ((bi * s + warp_k0) * g + kh) * D;
    const int64_t stride = (kSplit ? h : g) * D;
    // a gradient's rows: into its query head's sum (kSplit, unscaled), or times grad_scale into it
    auto store = [&](const auto &acc, float *sum, __nv_bfloat16 *grad, float grad_scale) {
        const float unscaled[2] = {1.0f, 1.0f}, scaled[2] = {grad_scale, grad_scale};
        if (kSplit)
            warp_store_c<D>(sum + first, stride, s - warp_k0, acc, unscaled);
        else
            warp_store_c<D>(grad + first, stride, s - warp_k0, acc, scaled);
    };
    if constexpr (kDk) {
        if (dk && rope.table && !kSplit) {
            __syncthreads(); // every warp is done with the keys, whose rows hold dk on its way
            flash_store_dk_rope<D>(out.dk + first, stride, s - warp_k0, dk_acc, scale, sk + warp * 16 * STRIDE, rope,
                                   bi, warp_k0);
        } else if (dk)
            store(dk_acc, out.head_dk, out.dk, scale);
    }
    if constexpr (kDv)
        if (dv)
            store(dv_acc, out.head_dv, out.dv, 1.0f);
}

// dk and dv (n elements each, [b, s, g, D]) from the sums of the query
// heads of each kv head, added in head order; dk times scale, and with
// rope rotated back (flash_rope_back).
static __global__ void flash_kv_reduce_kernel(flash_grad_out out, int64_t n, int64_t s, int64_t h, int64_t g,
                                              int64_t d, float scale, flash_rope rope)
{
    const int64_t group = h / g;
    TP_GRID_STRIDE(e, n)
    {
        const int64_t row = e / d, c = e % d, kh = row % g, tok = row / g;
        const int64_t first = (tok * h + kh * group) * d; // query head kh * group of this position
        auto sum = [&](const float *heads, int64_t col) {
            float acc = 0.0f;
            for (int64_t j = 0; j < group; j++)
                acc += heads[first + j * d + col];
            return acc;
        };
        auto dk_rotated = [&](int64_t col) { return flash_bf16_round(scale * sum(out.head_dk, col)); };
        if (out.dk)
            out.dk[e] = __float2bfloat16(flash_rope_back(rope, tok / s, tok % s, c, dk_rotated));
        if (out.dv)
            out.dv[e] = __float2bfloat16(sum(out.head_dv, c));
    }
}

// dq (n elements, [b, s, h, d]) = scale * its fp32 sum, rounded to bf16,
// and with rope rotated back (flash_rope_back).
static __global__ void flash_dq_store_kernel(__nv_bfloat16 *dq, const float *dq_sum, int64_t n, int64_t s, int64_t h,
                                             int64_t d, float scale, flash_rope rope)
{
    TP_GRID_STRIDE(e, n)
    {
        const int64_t col = e % d, tok = e / (h * d);
        const float *row = dq_sum + (e - col);
        dq[e] = __float2bfloat16(flash_rope_back(rope, tok / s, tok % s, col,
                                                 [&](int64_t c) { return flash_bf16_round(scale * row[c]); }));
    }
}

// One launch of the gradient's kernel computing part kPart (its shared
// memory opted into where it passes 48 KiB).
template <int D, int kPart, bool kTakeTurns>
static void flash_grad_part_launch(tp_stream st, bool split, const flash_grad_out &out, const __nv_bfloat16 *q,
                                   const __nv_bfloat16 *k, const __nv_bfloat16 *v, const __nv_bfloat16 *dy,
                                   const float *lse, const float *dsum, int64_t b, int64_t s, int64_t h, int64_t g,
                                   float scale, float softcap, const int32_t *segments, const flash_rope &rope)
{
    const size_t bytes = flash_grad_smem<D, kPart>::bytes;
    const dim3 grid((unsigned)TP_CEIL_DIV(s, FLASH_KEYS), (unsigned)h, (unsigned)b);
    if (split) {
        flash_allow_shared(flash_attention_grad_kernel<D, true, kPart, kTakeTurns>, bytes);
        TP_LAUNCH((flash_attention_grad_kernel<D, true, kPart, kTakeTurns>), grid, FLASH_WARPS * 32, bytes, st, out,
                  q, k, v, dy, lse, dsum, s, h, g, scale, softcap, segments, rope);
    } else {
        flash_allow_shared(flash_attention_grad_kernel<D, false, kPart, kTakeTurns>, bytes);
        TP_LAUNCH((flash_attention_grad_kernel<D, false, kPart, kTakeTurns>), grid, FLASH_WARPS * 32, bytes, st, out,
                  q, k, v, dy, lse, dsum, s, h, g, scale, softcap, segments, rope);
    }
}

// [b, s, h, D] queries and dy, [b, s, g, D] keys and values; lse and dsum
// each query's log-sum-exp (the forward's) and D ([b, h, s]); work is the
// rest of the scratch (sched/workspace.h, tp_cuda_attention_grad_scratch):
// where dk and dv are split by query head, each query head's fp32 dk and
// dv (2 b s h D floats), then dq's fp32 sum (b s h D), the turns and the
// first key blocks (tp_cuda_flash_grad_turns ints each). Any of dq, dk and
// dv may be null; rope or NULL. kTakeTurns as the kernel's.
template <int D, bool kTakeTurns = true>
static void flash_attention_grad_launch(tp_stream st, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                                        const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                        const __nv_bfloat16 *dy, const float *lse, const float *dsum, float *work,
                                        int64_t b, int64_t s, int64_t h, int64_t g, float scale, float softcap,
                                        const int32_t *segments, const tp_k_rope_in *rope)
{
    constexpr int QUERIES = flash_grad_queries<D>();
    const flash_rope rot = flash_rope_of(rope, s);
    const bool split = tp_cuda_flash_kv_by_query_head(h, g);
    const int64_t n = b * s * h * D, tiles = TP_CEIL_DIV(s, QUERIES);
    TP_KCHECK((uintptr_t)work % 16 == 0, "the fp32 sums 16-byte aligned (their stores take 8 bytes)");
    flash_grad_out out = {dk, dv, nullptr, nullptr, nullptr, nullptr, nullptr};
    float *dq_sum = work + (split ? 2 * n : 0);
    int *turns = (int *)(dq_sum + n), *first_block = turns + tp_cuda_flash_grad_turns(b, h, s);
    if (split) {
        out.head_dk = dk ? work : nullptr;
        out.head_dv = dv ? work + n : nullptr;
    }
    if (dq) {
        out.dq_sum = dq_sum;
        out.turns = turns;
        TP_CUDA_CHECK(cudaMemsetAsync(dq_sum, 0, (size_t)n * sizeof *dq_sum, (cudaStream_t)st));
        TP_CUDA_CHECK(cudaMemsetAsync(turns, 0, (size_t)(b * h * tiles) * sizeof *turns, (cudaStream_t)st));
    }
    if (segments) {
        TP_LAUNCH(flash_first_block_kernel, tp_elementwise_blocks(b * tiles, 128), 128, 0, st, first_block, segments,
                  b, s, QUERIES);
        out.first_block = first_block;
    }
    if constexpr (D <= 128)
        flash_grad_part_launch<D, FLASH_GRAD_ALL, kTakeTurns>(st, split, out, q, k, v, dy, lse, dsum, b, s, h, g,
                                                              scale, softcap, segments, rot);
    else {
        if (dv)
            flash_grad_part_launch<D, FLASH_GRAD_DV, kTakeTurns>(st, split, out, q, k, v, dy, lse, dsum, b, s, h, g,
                                                                 scale, softcap, segments, rot);
        if (dk || dq)
            flash_grad_part_launch<D, FLASH_GRAD_DK_DQ, kTakeTurns>(st, split, out, q, k, v, dy, lse, dsum, b, s, h,
                                                                    g, scale, softcap, segments, rot);
    }
    if (dq)
        TP_LAUNCH(flash_dq_store_kernel, tp_elementwise_blocks(n, 256), 256, 0, st, dq, dq_sum, n, s, h, (int64_t)D,
                  scale, rot);
    if (split && (dk || dv)) {
        const int64_t kv = b * s * g * D;
        TP_LAUNCH(flash_kv_reduce_kernel, tp_elementwise_blocks(kv, 256), 256, 0, st, out, kv, s, h, g, (int64_t)D,
                  scale, rot);
    }
}

#endif // TPRUN_KERNELS_ATTENTION_FLASH_GRAD_CUH
