// rope.cu: rotary position embedding, Hugging Face Llama convention.
// defines: tp_k_rope, tp_k_rope_table
#include "rope.cuh"

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
// f.scale (rope_cos_sin, rope_rotate: rope.cuh). One sin/cos per
// (position, frequency) serves all heads. Each pair is read before it is
// written by the same thread, so out may equal x.
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
        float c, sn;
        rope_cos_sin(pos, f.inv_freq[i], f.scale, c, sn);
        for (int64_t hi = 0; hi < h; hi++) {
            const T *xr = x + (tok * h + hi) * d;
            T *o = out + (tok * h + hi) * d;
            float o1, o2;
            rope_rotate(tp_to_float(xr[i]), tp_to_float(xr[i + half]), c, sn, o1, o2);
            o[i] = tp_from_float<T>(o1);
            o[i + half] = tp_from_float<T>(o2);
        }
    }
}

// One block per token (of the b s given positions, or of the s from
// pos_offset): its (cos, sin) of each frequency, as rope_kernel computes
// them, into table[token][i].
__global__ void rope_table_kernel(float2 *table, int64_t half, int64_t pos_offset, const int32_t *positions,
                                  rope_freqs f)
{
    const int64_t tok = blockIdx.x;
    const double pos = (double)(positions ? positions[tok] : pos_offset + tok);
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        float c, sn;
        rope_cos_sin(pos, f.inv_freq[i], f.scale, c, sn);
        table[tok * half + i] = make_float2(c, sn);
    }
}

// ---- kernel launchers

// A thread per frequency, up to 128.
static int rope_threads(int64_t half) { return half >= 128 ? 128 : (int)TP_CEIL_DIV(half, 32) * 32; }

// The launch parameter of rotary / 2 frequencies.
static rope_freqs rope_freqs_of(int64_t rotary, const double *inv_freq, double scale)
{
    rope_freqs f = {};
    f.scale = scale;
    for (int64_t i = 0; i < rotary / 2; i++)
        f.inv_freq[i] = inv_freq[i];
    return f;
}

template <typename T>
static void launch_rope(tp_stream st, T *out, const T *x, int64_t b, int64_t s, int64_t h, int64_t d, int64_t rotary,
                        int64_t pos_offset, const int32_t *pos, const rope_freqs &f)
{
    const int threads = rope_threads(rotary / 2);
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
    const rope_freqs f = rope_freqs_of(rotary, inv_freq, scale);
    if (t == TP_KERNEL_F32)
        launch_rope(st, (float *)out, (const float *)x, b, s, h, d, rotary, pos_offset, pos, f);
    else
        launch_rope(st, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)x, b, s, h, d, rotary, pos_offset, pos, f);
}

extern "C" void tp_k_rope_table(tp_stream st, float *table, int64_t b, int64_t s, int64_t rotary, int64_t pos_offset,
                                const double *inv_freq, double scale, const int32_t *pos)
{
    TP_KCHECK(rotary > 0 && rotary % 2 == 0 && rotary <= TP_CUDA_MAX_ROTARY_DIM,
              "an even rotary dimension of at most 2 * 256");
    TP_KCHECK(b >= 0 && s >= 0 && pos_offset >= 0, "negative size");
    const int64_t tokens = pos ? b * s : s;
    TP_KCHECK(tokens <= TP_CUDA_MAX_ROWS, "one block per token: at most 2^31-1 tokens");
    if (tokens == 0)
        return;
    TP_LAUNCH(rope_table_kernel, (unsigned)tokens, rope_threads(rotary / 2), 0, st, (float2 *)table, rotary / 2,
              pos_offset, pos, rope_freqs_of(rotary, inv_freq, scale));
}
