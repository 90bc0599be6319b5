// attention_grad.cu: the gradients of attention (attention.cu) with
// respect to q, k and v: bf16 with head dimension 64, 96, 128 or 256 on tensor cores
// (attention_flash_grad.cuh), the rest in fp32 here.
// defines: tp_k_attention_grad
//
// With P the causal softmax of the (scaled, capped) scores S and O = P V,
// for each query t:
//   dP = dy V^T,  D_t = sum_j P_tj dP_tj = dy_t . O_t,
//   dS = P (dP - D) * (1 - (S / cap)^2 when capped),
//   dq = scale dS K,  dk = scale dS^T Q,  dv = P^T dy,
// dk and dv summed over the query heads of each kv head. One launcher for
// the three: P comes from the log-sum-exp the forward wrote, and a first
// kernel writes every query's D = dy . O (from the forward's output) to
// scratch, once for all of them. On tensor cores one key-major pass then
// computes all three (attention_flash_grad.cuh; two at d 256), rope's
// rotation of q and k and its inverse on dq and dk in it. Here, in fp32, dq walks
// the keys of each query, and one key-major kernel walks the queries of
// each key for dk and dv together (one score, one P per pair for both).
// No sum is made with atomics (their order would depend on the schedule):
// every sum runs in a fixed order, so the results, a kv head's included,
// do not depend on the schedule or on which other heads a rank holds.
#include "attention.cuh"
#include "attention_flash_grad.cuh"

// ---- CUDA kernels

// A warp per row (query t of head hi, batch bi: row (bi s + t) h + hi of
// dy and o), striding over the rows: dsum[(bi h + hi) s + t] = dy . o, in
// fp32 over the lanes' columns, then the warp's sum.
template <typename T>
__global__ void attention_dsum_kernel(float *dsum, const T *dy, const T *o, int64_t rows, int64_t s, int64_t h,
                                      int64_t d)
{
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        float dot = 0.0f;
        for (int64_t c = threadIdx.x % 32; c < d; c += 32)
            dot += tp_to_float(dy[row * d + c]) * tp_to_float(o[row * d + c]);
        dot = tp_warp_sum(dot); // the row is the warp's: its lanes reach this together
        if (threadIdx.x % 32 == 0) {
            const int64_t t = row / h % s, bi = row / h / s, hi = row % h;
            dsum[(bi * h + hi) * s + t] = dot;
        }
    }
}

// A lane's share of acc += w * row (a staged row)
__device__ __forceinline__ void grad_axpy(float *acc, float w, const float *row, int64_t d)
{
    const int lane = threadIdx.x % 32;
    TP_UNROLL
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int64_t c = lane + 32 * i;
        if (c < d)
            acc[i] += w * row[c];
    }
}

// A lane's share of out = scale * acc
template <typename T> __device__ __forceinline__ void grad_store(T *out, const float *acc, float scale, int64_t d)
{
    const int lane = threadIdx.x % 32;
    TP_UNROLL
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int64_t c = lane + 32 * i;
        if (c < d)
            out[c] = tp_from_float<T>(scale * acc[i]);
    }
}

// Block (query tile, head, batch), a warp per query t: dq_t = scale * sum
// over keys j <= t of dS_tj k_j. (At least one block per SM, as the
// forward's: else ptxas spills on sm_90.)
template <typename T>
__global__ void __launch_bounds__(ATTN_WARPS * 32, 1)
    attention_dq_kernel(T *dq, const T *q, const T *k, const T *v, const T *dy, const float *lse, const float *dsum,
                        int64_t s, int64_t h, int64_t g, int64_t d, int keys_per_tile, float scale, float softcap,
                        const int32_t *segments)
{
    TP_SHARED(float, ktile, ATTN_TILE);
    TP_SHARED(float, vtile, ATTN_TILE);
    const int64_t bi = blockIdx.z, hi = blockIdx.y, kh = hi / (h / g);
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const int64_t first = (int64_t)blockIdx.x * ATTN_WARPS, t = first + threadIdx.x / 32;
    const bool active = t < s;
    const int64_t kend = first + ATTN_WARPS < s ? first + ATTN_WARPS : s;
    const int64_t row = (bi * s + t) * h + hi, at = (bi * h + hi) * s + t;
    float qr[ATTN_PER_LANE], dyr[ATTN_PER_LANE], acc[ATTN_PER_LANE] = {};
    attn_load(qr, q + row * d, d, active);
    attn_load(dyr, dy + row * d, d, active);
    const float l = active ? lse[at] : 0.0f, dsumt = active ? dsum[at] : 0.0f;
    attn_walk(k, v, g, kh, bi, s, d, 0, kend, keys_per_tile, ktile, vtile, active, 0, t + 1,
              [&](const float *kr, const float *vr, int64_t u) {
                  if (!attn_sees(seg, t, u))
                      return;
                  const float score = attn_score(attn_dot(qr, kr, d), scale, softcap);
                  grad_axpy(acc, attn_ds(expf(score - l), score, dsumt, attn_dot(dyr, vr, d), softcap), kr, d);
              });
    if (active)
        grad_store(dq + row * d, acc, scale, d);
}

// Which of dk and dv the key-major kernel computes, with the storage type:
// a compile-time choice, so a kernel holds only the accumulators (and dv's
// alone no dP terms) it needs.
template <typename T, bool DK, bool DV> struct kv_grad {
    typedef T type;
    static constexpr bool dk = DK, dv = DV;
};

// Block (key tile, kv head, batch), a warp per key j: over the query heads
// hi of the kv head and the queries t >= j,
//   dv_j = sum P_tj dy_t,   dk_j = scale * sum dS_tj q_t,
// both from the same score and P of each (query, key) pair.
// (at least one block per SM: left to itself ptxas caps the kernel at 64
// registers and spills)
template <typename G>
__global__ void __launch_bounds__(ATTN_WARPS * 32, 1)
    attention_dkv_kernel(typename G::type *dk, typename G::type *dv, const typename G::type *q,
                         const typename G::type *k, const typename G::type *v, const typename G::type *dy,
                         const float *lse, const float *dsum, int64_t s, int64_t h, int64_t g, int64_t d,
                         int rows_per_tile, float scale, float softcap, const int32_t *segments)
{
    TP_SHARED(float, qtile, ATTN_TILE);
    TP_SHARED(float, dytile, ATTN_TILE);
    const int64_t bi = blockIdx.z, kh = blockIdx.y, group = h / g;
    const int32_t *seg = segments ? segments + bi * s : nullptr;
    const int64_t first = (int64_t)blockIdx.x * ATTN_WARPS, j = first + threadIdx.x / 32;
    const bool active = j < s;
    const int64_t row = (bi * s + j) * g + kh;
    float kr[ATTN_PER_LANE], vr[ATTN_PER_LANE], dk_acc[ATTN_PER_LANE] = {}, dv_acc[ATTN_PER_LANE] = {};
    attn_load(kr, k + row * d, d, active);
    attn_load(vr, v + row * d, d, active && G::dk);
    for (int64_t hi = kh * group; hi < (kh + 1) * group; hi++) {
        const float *hl = lse + (bi * h + hi) * s, *hd = dsum + (bi * h + hi) * s;
        attn_walk(q, dy, h, hi, bi, s, d, first, s, rows_per_tile, qtile, dytile, active, j, s,
                  [&](const float *qt, const float *dyt, int64_t t) {
                      if (!attn_sees(seg, t, j))
                          return;
                      const float score = attn_score(attn_dot(kr, qt, d), scale, softcap);
                      const float p = expf(score - hl[t]);
                      if (G::dv)
                          grad_axpy(dv_acc, p, dyt, d);
                      if (G::dk)
                          grad_axpy(dk_acc, attn_ds(p, score, hd[t], attn_dot(vr, dyt, d), softcap), qt, d);
                  });
    }
    if (active && G::dk)
        grad_store(dk + row * d, dk_acc, scale, d);
    if (active && G::dv)
        grad_store(dv + row * d, dv_acc, 1.0f, d);
}

// ---- kernel launchers

template <typename T>
static void launch_attention_grad(tp_stream st, T *dq, T *dk, T *dv, const T *q, const T *k, const T *v, const T *dy,
                                  const float *lse, const float *dsum, int64_t b, int64_t s, int64_t h, int64_t g,
                                  int64_t d, float scale, float softcap, const int32_t *segments)
{
    const int per_tile = attn_rows_per_tile(d);
    const dim3 queries((unsigned)TP_CEIL_DIV(s, ATTN_WARPS), (unsigned)h, (unsigned)b);
    if (dq)
        TP_LAUNCH(attention_dq_kernel<T>, queries, ATTN_WARPS * 32, 0, st, dq, q, k, v, dy, lse, dsum, s, h, g, d,
                  per_tile, scale, softcap, segments);
    typedef kv_grad<T, true, true> dk_dv;     // (a macro argument holds no comma)
    typedef kv_grad<T, true, false> dk_only;
    typedef kv_grad<T, false, true> dv_only;
    const dim3 keys((unsigned)TP_CEIL_DIV(s, ATTN_WARPS), (unsigned)g, (unsigned)b);
    if (dk && dv)
        TP_LAUNCH(attention_dkv_kernel<dk_dv>, keys, ATTN_WARPS * 32, 0, st, dk, dv, q, k, v, dy, lse,
                  dsum, s, h, g, d, per_tile, scale, softcap, segments);
    else if (dk)
        TP_LAUNCH(attention_dkv_kernel<dk_only>, keys, ATTN_WARPS * 32, 0, st, dk, dv, q, k, v, dy,
                  lse, dsum, s, h, g, d, per_tile, scale, softcap, segments);
    else if (dv)
        TP_LAUNCH(attention_dkv_kernel<dv_only>, keys, ATTN_WARPS * 32, 0, st, dk, dv, q, k, v, dy,
                  lse, dsum, s, h, g, d, per_tile, scale, softcap, segments);
}

// D = dy . O of every query into dsum ([b, h, s]).
template <typename T>
static void launch_attention_dsum(tp_stream st, float *dsum, const T *dy, const T *o, int64_t b, int64_t s, int64_t h,
                                  int64_t d)
{
    const int64_t rows = b * s * h;
    TP_LAUNCH(attention_dsum_kernel<T>, tp_elementwise_blocks(rows * 32, ATTN_WARPS * 32), ATTN_WARPS * 32, 0, st,
              dsum, dy, o, rows, s, h, d);
}

// Whether out, when computed, overlaps none of the inputs.
static bool apart(const void *out, const void *q, const void *k, const void *v, const void *dy, const void *o,
                  const float *lse)
{
    return !out || (out != q && out != k && out != v && out != dy && out != o && out != (const void *)lse);
}

extern "C" void tp_k_attention_grad(tp_stream st, tp_kernel_dtype t, void *dq, void *dk, void *dv, const void *q,
                                    const void *k, const void *v, const void *dy, const void *o, const float *lse,
                                    float *scratch, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d,
                                    float scale, float softcap, const int32_t *segments, const tp_k_rope_in *rope)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(dq || dk || dv, "at least one gradient to compute");
    TP_KCHECK(apart(dq, q, k, v, dy, o, lse) && apart(dk, q, k, v, dy, o, lse) && apart(dv, q, k, v, dy, o, lse) &&
                  (!dk || dk != dv),
              "the gradients must not overlap the inputs or each other");
    attn_check(b, s, h, g, d, scale, softcap);
    TP_KCHECK(!rope || (tp_cuda_rope_in_attention(t == TP_KERNEL_BF16, d, rope->rotary) &&
                        flash_attention_grad_supports(d, dq, dk, dv, q, k, v, dy)),
              "rope inside attention's gradient: bf16 on tensor cores (16-byte aligned operands) and a rotary "
              "dimension of whole words (tp_cuda_rope_in_attention)");
    if (b == 0 || s == 0 || h == 0)
        return;
    float *dsum = scratch;
    if (t == TP_KERNEL_F32)
        launch_attention_dsum(st, dsum, (const float *)dy, (const float *)o, b, s, h, d);
    else
        launch_attention_dsum(st, dsum, (const __nv_bfloat16 *)dy, (const __nv_bfloat16 *)o, b, s, h, d);
    if (t == TP_KERNEL_BF16 && flash_attention_grad_supports(d, dq, dk, dv, q, k, v, dy)) {
        __nv_bfloat16 *gq = (__nv_bfloat16 *)dq, *gk = (__nv_bfloat16 *)dk, *gv = (__nv_bfloat16 *)dv;
        const __nv_bfloat16 *bq = (const __nv_bfloat16 *)q, *bk = (const __nv_bfloat16 *)k,
                            *bv = (const __nv_bfloat16 *)v, *bdy = (const __nv_bfloat16 *)dy;
        flash_for_head_dim<256>(d, [&](auto dim) {
            flash_attention_grad_launch<decltype(dim)::value>(st, gq, gk, gv, bq, bk, bv, bdy, lse, dsum,
                                                              scratch + tp_cuda_attention_dsum_floats(b, h, s), b, s,
                                                              h, g, scale, softcap, segments, rope);
        });
    } else if (t == TP_KERNEL_F32)
        launch_attention_grad(st, (float *)dq, (float *)dk, (float *)dv, (const float *)q, (const float *)k,
                              (const float *)v, (const float *)dy, lse, dsum, b, s, h, g, d, scale, softcap,
                              segments);
    else
        launch_attention_grad(st, (__nv_bfloat16 *)dq, (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv,
                              (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v,
                              (const __nv_bfloat16 *)dy, lse, dsum, b, s, h, g, d, scale, softcap, segments);
}
