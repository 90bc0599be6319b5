// rope.cu: rotary position embedding, Hugging Face Llama convention.
// defines: tp_k_rope
#include "common.cuh"

// The frequencies, passed by value as a kernel parameter: 2 KiB of the
// 4 KiB a launch may carry (ROPE_MAX_PAIRS, launch_limits.h), so no device
// buffer has to be kept for them.
struct rope_freqs {
    double inv_freq[ROPE_MAX_PAIRS];
    double scale;               // cos and sin are multiplied by it (yarn's attention_factor)
};

// ---- CUDA kernels

// One block per token of x[b, s, h, d]; thread i owns the pair
// (i, i + r/2) of every head, r = rotary (rotate_half: cos/sin =
// cat(freqs, freqs)):
//   out[i]       = x[i] cos(p f_i) - x[i + r/2] sin(p f_i)
//   out[i + r/2] = x[i + r/2] cos(p f_i) + x[i] sin(p f_i)
// and dims [r, d) of every head pass through (partial rotary).
// with p = pos[token] where positions are given (by document), else
// pos_offset + (token's index in the sequence), f_i =
// inv_freq[i] (theta and the scaling, sched/rope.h), cos and sin times
// f.scale. The angle and its sin/cos are double, as on the CPU: in
// float, p f_i at p ~ 8k is off by ~5e-4 rad. One sin/cos per (position,
// frequency) serves all heads. Each pair is read before it is written by
// the same thread, so out may equal x.
template <typename T>
__global__ void rope_kernel(T *out, const T *x, int64_t s, int64_t h, int64_t d, int64_t rotary, int64_t pos_offset,
                            const int32_t *positions, rope_freqs f)
{
    const int64_t tok = blockIdx.x;
    const double pos = (double)(positions ? positions[tok] : pos_offset + tok % s);
    const int64_t half = rotary / 2;
    if (out != x)
        for (int64_t e = threadIdx.x; e < h * (d - rotary); e += blockDim.x) {
            const int64_t at = (tok * h + e / (d - rotary)) * d + rotary + e % (d - rotary);
            out[at] = x[at];
        }
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        // sincospi(ang / pi): its argument reduction is exact and needs no
        // local memory, where sin/cos carry a slow path for huge angles
        const double turns = pos * f.inv_freq[i] / 3.141592653589793;
        double sd, cd;
        sincospi(turns, &sd, &cd);
        const float c = (float)(cd * f.scale), sn = (float)(sd * f.scale);
        for (int64_t hi = 0; hi < h; hi++) {
            const T *xr = x + (tok * h + hi) * d;
            T *o = out + (tok * h + hi) * d;
            const float x1 = tp_to_float(xr[i]), x2 = tp_to_float(xr[i + half]);
            o[i] = tp_from_float<T>(x1 * c - x2 * sn);
            o[i + half] = tp_from_float<T>(x2 * c + x1 * sn);
        }
    }
}

// ---- kernel launchers

template <typename T>
static void launch_rope(tp_stream st, T *out, const T *x, int64_t b, int64_t s, int64_t h, int64_t d, int64_t rotary,
                        int64_t pos_offset, const int32_t *pos, const rope_freqs &f)
{
    const int64_t half = rotary / 2;
    const int threads = half >= 128 ? 128 : (int)TP_CEIL_DIV(half, 32) * 32;
    TP_LAUNCH(rope_kernel<T>, (unsigned)(b * s), threads, 0, st, out, x, s, h, d, rotary, pos_offset, pos, f);
}

extern "C" void tp_k_rope(tp_stream st, tp_kernel_dtype t, void *out, const void *x, int64_t b, int64_t s, int64_t h,
                          int64_t d, int64_t rotary, int64_t pos_offset, const double *inv_freq, double scale,
                          const int32_t *pos)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(rotary % 2 == 0 && rotary <= TP_CUDA_MAX_ROTARY_DIM && rotary <= d,
              "an even rotary dimension of at most 2 * 256, within the head");
    TP_KCHECK(b >= 0 && s >= 0 && h >= 0 && d >= 0 && pos_offset >= 0, "negative size");
    TP_KCHECK(b * s <= TP_CUDA_MAX_ROWS, "one block per token: at most 2^31-1 tokens");
    if (b * s == 0 || h == 0 || rotary == 0)
        return;
    rope_freqs f = {};
    f.scale = scale;
    for (int64_t i = 0; i < rotary / 2; i++)
        f.inv_freq[i] = inv_freq[i];
    if (t == TP_KERNEL_F32)
        launch_rope(st, (float *)out, (const float *)x, b, s, h, d, rotary, pos_offset, pos, f);
    else
        launch_rope(st, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, b, s, h, d, rotary, pos_offset, pos, f);
}
