// attention.cu: causal scaled-dot-product attention with grouped KV heads:
// bf16 with head dimension 64, 96, 128 or 256 on tensor cores (attention_flash.cuh),
// the rest (fp32, other head dimensions) a warp per query in fp32. Where
// a gradient follows (a training schedule), each query's log-sum-exp too.
// With rope, the tensor-core kernel rotates q and k as it reads them.
// defines: tp_k_attention
#include "attention.cuh"
#include "attention_flash.cuh"

// ---- CUDA kernels

// Block (query tile, head, batch), a warp per query (attn_forward_row):
// the keys are staged in tiles in shared memory as float, every warp
// scores each key of the tile against its query (a warp-sum of the lanes'
// partial dot products) and folds it into an online softmax in fp32; lse
// (or NULL) at [(batch h + head) s + query]. (At least one block per SM:
// left to itself ptxas gives the kernel 48 registers on sm_90 and spills.)
template <typename T>
__global__ void __launch_bounds__(ATTN_WARPS * 32, 1)
    attention_kernel(T *out, float *lse, const T *q, const T *k, const T *v, int64_t s, int64_t h, int64_t g,
                     int64_t d, int keys_per_tile, float scale, float softcap, const int32_t *segments)
{
    TP_SHARED(float, ktile, ATTN_TILE);
    TP_SHARED(float, vtile, ATTN_TILE);
    attn_online o;
    int64_t t;
    if (!attn_forward_row(o, q, k, v, s, h, g, d, keys_per_tile, scale, softcap, segments, ktile, vtile, &t))
        return;
    const float inv = o.denom > 0.0f ? 1.0f / o.denom : 0.0f; // 0: a query that sees no key (padding)
    const int lane = threadIdx.x % 32;
    if (lse && lane == 0) // P = exp(score - lse) = 0 for a query that sees no key
        lse[((int64_t)blockIdx.z * h + blockIdx.y) * s + t] = o.denom > 0.0f ? o.mx + logf(o.denom) : INFINITY;
    T *out_row = out + (((int64_t)blockIdx.z * s + t) * h + blockIdx.y) * d;
    TP_UNROLL
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int64_t c = lane + 32 * i;
        if (c < d)
            out_row[c] = tp_from_float<T>(o.acc[i] * inv);
    }
}

// ---- kernel launchers

template <typename T>
static void launch_attention(tp_stream st, T *out, float *lse, const T *q, const T *k, const T *v, int64_t b,
                             int64_t s, int64_t h, int64_t g, int64_t d, float scale, float softcap,
                             const int32_t *segments)
{
    const dim3 grid((unsigned)TP_CEIL_DIV(s, ATTN_WARPS), (unsigned)h, (unsigned)b);
    TP_LAUNCH(attention_kernel<T>, grid, ATTN_WARPS * 32, 0, st, out, lse, q, k, v, s, h, g, d,
              attn_rows_per_tile(d), scale, softcap, segments);
}

extern "C" void tp_k_attention(tp_stream st, tp_kernel_dtype t, void *out, float *lse, const void *q, const void *k,
                               const void *v, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, float scale,
                               float softcap, const int32_t *segments, const tp_k_rope_in *rope)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(out != q && out != k && out != v, "out must not overlap the inputs");
    TP_KCHECK((void *)lse != out && (const void *)lse != q && (const void *)lse != k && (const void *)lse != v,
              "lse must not overlap the output or the inputs");
    attn_check(b, s, h, g, d, scale, softcap);
    TP_KCHECK(!rope || (tp_cuda_rope_in_attention(t == TP_KERNEL_BF16, d, rope->rotary) &&
                        flash_attention_supports(d, q, k, v)),
              "rope inside attention: bf16 on tensor cores (16-byte aligned operands) and a rotary dimension of "
              "whole words (tp_cuda_rope_in_attention)");
    if (b == 0 || s == 0 || h == 0)
        return;
    if (t == TP_KERNEL_BF16 && flash_attention_supports(d, q, k, v)) {
        __nv_bfloat16 *o = (__nv_bfloat16 *)out;
        const __nv_bfloat16 *bq = (const __nv_bfloat16 *)q, *bk = (const __nv_bfloat16 *)k,
                            *bv = (const __nv_bfloat16 *)v;
        flash_for_head_dim<256>(d, [&](auto dim) {
            flash_attention_launch<decltype(dim)::value>(st, o, lse, bq, bk, bv, b, s, h, g, scale, softcap,
                                                         segments, rope);
        });
    } else if (t == TP_KERNEL_F32)
        launch_attention(st, (float *)out, lse, (const float *)q, (const float *)k, (const float *)v, b, s, h, g, d,
                         scale, softcap, segments);
    else
        launch_attention(st, (__nv_bfloat16 *)out, lse, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
                         (const __nv_bfloat16 *)v, b, s, h, g, d, scale, softcap, segments);
}
