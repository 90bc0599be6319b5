// attention.cu: causal scaled-dot-product attention with grouped KV heads.
// defines: tp_k_attention
#include "common.cuh"

// Queries per block: one warp each.
#define ATTN_WARPS 8
// Largest head dimension: a lane holds d / 32 elements of q and of the
// output in registers.
#define ATTN_MAX_D 256
#define ATTN_PER_LANE (ATTN_MAX_D / 32)
// Floats of one K (and one V) tile in shared memory: keys * d <= 4096, so
// the two tiles take 32 KiB, under the 48 KiB a block gets without opt-in.
#define ATTN_TILE 4096
#define ATTN_MAX_KEYS 64

// ---- CUDA kernels

// Block (query tile, head, batch). Warp w owns query t = tile * 8 + w of
// head hi, which reads kv head hi / (h / g). The block walks the keys its
// queries can see (causal: 0 .. last query) in tiles staged in shared
// memory as float; every warp scores each key of the tile against its
// query (a warp-sum of the lanes' partial dot products) and folds it into
// an online softmax in fp32: a running maximum mx, a running denominator
// and an output accumulator, both rescaled when the maximum grows. Since
// every lane holds the same score, the branch is warp-uniform, and each
// key costs one exp: exp(mx - score) when the score is the new maximum,
// exp(score - mx) otherwise.
//
// Warps whose query lies past the sequence still stage tiles and reach
// every __syncthreads; they only skip the scoring and the store.
template <typename T>
__global__ void __launch_bounds__(ATTN_WARPS * 32)
    attention_kernel(T *out, const T *q, const T *k, const T *v, int64_t s, int64_t h, int64_t g, int64_t d,
                     int keys_per_tile, float scale, float softcap)
{
    TP_SHARED(float, ktile, ATTN_TILE);
    TP_SHARED(float, vtile, ATTN_TILE);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int64_t first = (int64_t)blockIdx.x * ATTN_WARPS;
    const int64_t t = first + warp;
    const bool active = t < s;
    const int64_t kend = first + ATTN_WARPS < s ? first + ATTN_WARPS : s; // keys any query here sees

    float qr[ATTN_PER_LANE], acc[ATTN_PER_LANE];
    TP_UNROLL
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int64_t c = lane + 32 * i;
        qr[i] = active && c < d ? tp_to_float(q[((bi * s + t) * h + hi) * d + c]) : 0.0f;
        acc[i] = 0.0f;
    }
    float mx = -INFINITY, denom = 0.0f;

    for (int64_t k0 = 0; k0 < kend; k0 += keys_per_tile) {
        const int64_t nk = kend - k0 < keys_per_tile ? kend - k0 : keys_per_tile;
        for (int64_t e = threadIdx.x; e < nk * d; e += blockDim.x) {
            const int64_t j = e / d, c = e % d;
            const int64_t src = ((bi * s + k0 + j) * g + kh) * d + c;
            ktile[e] = tp_to_float(k[src]);
            vtile[e] = tp_to_float(v[src]);
        }
        __syncthreads();
        if (active) {
            const int64_t seen = t + 1 - k0 < nk ? t + 1 - k0 : nk; // causal: keys <= t
            for (int64_t j = 0; j < seen; j++) {
                const float *kr = ktile + j * d, *vr = vtile + j * d;
                float dot = 0.0f;
                TP_UNROLL
                for (int i = 0; i < ATTN_PER_LANE; i++) {
                    const int64_t c = lane + 32 * i;
                    if (c < d)
                        dot += qr[i] * kr[c];
                }
                const float raw = tp_warp_sum(dot) * scale;
                const float score = softcap > 0.0f ? softcap * tanhf(raw / softcap) : raw;
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
        }
        __syncthreads(); // the next tile overwrites ktile and vtile
    }

    if (active) {
        T *o = out + ((bi * s + t) * h + hi) * d;
        TP_UNROLL
        for (int i = 0; i < ATTN_PER_LANE; i++) {
            const int64_t c = lane + 32 * i;
            if (c < d)
                o[c] = tp_from_float<T>(acc[i] / denom);
        }
    }
}

// ---- kernel launchers

template <typename T>
static void launch_attention(tp_stream st, T *out, const T *q, const T *k, const T *v, int64_t b, int64_t s,
                             int64_t h, int64_t g, int64_t d, float scale, float softcap)
{
    const int keys = ATTN_TILE / d < ATTN_MAX_KEYS ? (int)(ATTN_TILE / d) : ATTN_MAX_KEYS;
    const dim3 grid((unsigned)TP_CEIL_DIV(s, ATTN_WARPS), (unsigned)h, (unsigned)b);
    TP_LAUNCH(attention_kernel<T>, grid, ATTN_WARPS * 32, 0, st, out, q, k, v, s, h, g, d, keys, scale, softcap);
}

extern "C" void tp_k_attention(tp_stream st, tp_kernel_dtype t, void *out, const void *q, const void *k, const void *v,
                               int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, float scale, float softcap)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(out != q && out != k && out != v, "out must not overlap the inputs");
    TP_KCHECK(g > 0 && h % g == 0 && d > 0, "query heads in whole groups per kv head");
    TP_KCHECK(d <= ATTN_MAX_D, "head dimension at most 256");
    TP_KCHECK(b >= 0 && s >= 0 && b <= 65535 && h <= 65535, "grid: batch and heads at most 65535");
    TP_KCHECK(scale > 0.0f && softcap >= 0.0f, "a positive scale, a cap of 0 (none) or more");
    if (b == 0 || s == 0 || h == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_attention(st, (float *)out, (const float *)q, (const float *)k, (const float *)v, b, s, h, g, d, scale,
                         softcap);
    else
        launch_attention(st, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
                         (const __nv_bfloat16 *)v, b, s, h, g, d, scale, softcap);
}
