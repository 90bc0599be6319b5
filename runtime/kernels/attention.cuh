// attention.cuh: what the attention (attention.cu) and its gradients
// (attention_grad.cu) share: the tiling, the walk over staged rows, the
// scores and the online softmax.
// defines: ATTN_* sizes, attn_rows_per_tile, attn_check, attn_walk, attn_load, attn_dot, attn_score,
// attn_ds, attn_sees, attn_online, attn_forward_row
#ifndef TPRUN_KERNELS_ATTENTION_CUH
#define TPRUN_KERNELS_ATTENTION_CUH

#include "common.cuh"

// ATTN_WARPS, rows (queries, or keys) per block, one warp each, and
// ATTN_MAX_D, the largest head dimension: launch_limits.h.
#define ATTN_PER_LANE (ATTN_MAX_D / 32)
// Floats of one staged tile in shared memory: rows * d <= 4096, so two
// tiles take 32 KiB, under the 48 KiB a block gets without opt-in.
#define ATTN_TILE 4096
#define ATTN_MAX_ROWS 64

static inline int attn_rows_per_tile(int64_t d)
{
    return ATTN_TILE / d < ATTN_MAX_ROWS ? (int)(ATTN_TILE / d) : ATTN_MAX_ROWS;
}

// The launchers' preconditions, forward and backward.
static inline void attn_check(int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, float scale, float softcap)
{
    TP_KCHECK(g > 0 && h % g == 0 && d > 0, "query heads in whole groups per kv head");
    TP_KCHECK(d <= TP_CUDA_MAX_HEAD_DIM, "head dimension at most 256");
    TP_KCHECK(b >= 0 && s >= 0 && b <= TP_CUDA_MAX_ATTN_BATCH && h <= TP_CUDA_MAX_ATTN_HEADS &&
                  s <= TP_CUDA_MAX_ATTN_SEQ,
              "grid: batch and heads at most 65535, query tiles at most 2^31-1");
    TP_KCHECK(scale > 0.0f && softcap >= 0.0f, "a positive scale, a cap of 0 (none) or more");
}

// Stages rows [lo, hi) of head `head` of a and b ([batch, s, heads, d],
// batch bi) in tiles of `per_tile` rows, as float, in atile and btile, and
// calls visit(a_row, b_row, row) for each staged row in [vlo, vhi) — the
// rows this warp's own row sees — when `active`. Block-level: every thread
// calls it, whatever its warp's row (it has barriers); active and the
// visible range are the same for all lanes of a warp, so visit may use
// warp collectives.
template <typename T, typename Visit>
__device__ __forceinline__ void attn_walk(const T *a, const T *b, int64_t heads, int64_t head, int64_t bi, int64_t s,
                                          int64_t d, int64_t lo, int64_t hi, int per_tile, float *atile, float *btile,
                                          bool active, int64_t vlo, int64_t vhi, Visit visit)
{
    for (int64_t r0 = lo; r0 < hi; r0 += per_tile) {
        const int64_t nr = hi - r0 < per_tile ? hi - r0 : per_tile;
        for (int64_t e = threadIdx.x; e < nr * d; e += blockDim.x) {
            const int64_t src = ((bi * s + r0 + e / d) * heads + head) * d + e % d;
            atile[e] = tp_to_float(a[src]);
            btile[e] = tp_to_float(b[src]);
        }
        __syncthreads();
        if (active) {
            const int64_t from = vlo > r0 ? vlo : r0, to = vhi < r0 + nr ? vhi : r0 + nr;
            for (int64_t r = from; r < to; r++)
                visit(atile + (r - r0) * d, btile + (r - r0) * d, r);
        }
        __syncthreads(); // the next tile overwrites atile and btile
    }
}

// A lane's share of a row of d: elements lane + 32 i, zeros past d.
template <typename T> __device__ __forceinline__ void attn_load(float *r, const T *row, int64_t d, bool active)
{
    const int lane = threadIdx.x % 32;
    TP_UNROLL
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int64_t c = lane + 32 * i;
        r[i] = active && c < d ? tp_to_float(row[c]) : 0.0f;
    }
}

// The dot product of a lane-held row and a staged row, to every lane.
__device__ __forceinline__ float attn_dot(const float *r, const float *staged, int64_t d)
{
    const int lane = threadIdx.x % 32;
    float dot = 0.0f;
    TP_UNROLL
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int64_t c = lane + 32 * i;
        if (c < d)
            dot += r[i] * staged[c];
    }
    return tp_warp_sum(dot);
}

// A score from q . k: times scale, then capped as softcap * tanh(x / softcap)
// when softcap > 0.
__device__ __forceinline__ float attn_score(float dot, float scale, float softcap)
{
    const float raw = dot * scale;
    return softcap > 0.0f ? softcap * tanhf(raw / softcap) : raw;
}

// dS of one (query, key) pair from its probability p, the capped score,
// the query's D and dP = dy_t . v_j
__device__ __forceinline__ float attn_ds(float p, float score, float dsum, float dp, float softcap)
{
    const float capped = softcap > 0.0f ? 1.0f - (score / softcap) * (score / softcap) : 1.0f;
    return p * (dp - dsum) * capped;
}

// Whether query t sees key u <= t of a row whose documents are seg (NULL:
// every key): only a key of its own document, and a padding query (-1)
// none, so its row is 0.
__device__ __forceinline__ bool attn_sees(const int32_t *seg, int64_t t, int64_t u)
{
    return !seg || (seg[t] >= 0 && seg[u] == seg[t]);
}

// The online softmax of one query (a warp): a running maximum mx, a running
// denominator and an output accumulator, both rescaled when the maximum
// grows. Every lane holds the same score, so the branch is warp-uniform,
// and each key costs one exp: exp(mx - score) when the score is the new
// maximum, exp(score - mx) otherwise.
struct attn_online {
    float mx, denom, acc[ATTN_PER_LANE];

    __device__ __forceinline__ void start()
    {
        mx = -INFINITY;
        denom = 0.0f;
        TP_UNROLL
        for (int i = 0; i < ATTN_PER_LANE; i++)
            acc[i] = 0.0f;
    }

    __device__ __forceinline__ void add(float score, const float *vr, int64_t d)
    {
        const int lane = threadIdx.x % 32;
        if (score > mx) {
            const float rescale = expf(mx - score); // 0 for the first key
            denom = denom * rescale + 1.0f;
            TP_UNROLL
            for (int i = 0; i < ATTN_PER_LANE; i++) {
                const int64_t c = lane + 32 * i;
                if (c < d)
                    acc[i] = acc[i] * rescale + vr[c];
            }
            mx = score;
        } else {
            const float p = expf(score - mx);
            denom += p;
            TP_UNROLL
            for (int i = 0; i < ATTN_PER_LANE; i++) {
                const int64_t c = lane + 32 * i;
                if (c < d)
                    acc[i] += p * vr[c];
            }
        }
    }
};

// Block (query tile, head, batch) of the forward (and of its log-sum-exp,
// for the gradient): warp w owns query t = tile * 8 + w of head hi, which reads kv
// head hi / (h / g), and folds the keys it sees (causal: 0 .. t, of its
// document with segments) into `o`; a query that sees none keeps denom 0.
// Warps whose query lies past the sequence still stage tiles and reach
// every barrier.
template <typename T>
__device__ __forceinline__ bool attn_forward_row(attn_online &o, const T *q, const T *k, const T *v, int64_t s,
                                                 int64_t h, int64_t g, int64_t d, int keys_per_tile, float scale,
                                                 float softcap, const int32_t *segments, float *ktile, float *vtile,
                                                 int64_t *query)
{
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const int64_t first = (int64_t)blockIdx.x * ATTN_WARPS;
    const int64_t t = first + threadIdx.x / 32;
    const bool active = t < s;
    const int64_t kend = first + ATTN_WARPS < s ? first + ATTN_WARPS : s; // keys any query here sees
    float qr[ATTN_PER_LANE];
    attn_load(qr, q + ((bi * s + t) * h + hi) * d, d, active);
    o.start();
    attn_walk(k, v, g, kh, bi, s, d, 0, kend, keys_per_tile, ktile, vtile, active, 0, t + 1,
              [&](const float *kr, const float *vr, int64_t u) {
                  if (attn_sees(seg, t, u))
                      o.add(attn_score(attn_dot(qr, kr, d), scale, softcap), vr, d);
              });
    *query = t;
    return active;
}

#endif // TPRUN_KERNELS_ATTENTION_CUH
