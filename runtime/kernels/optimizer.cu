// optimizer.cu: AdamW's update, on fp32 weights in place or on fp32
// master weights of bf16 ones, and the sum of squares of the
// gradient-norm clipping.
//
// The step and the sum of squares take many parts (every weight of a
// rank) in one pass, as torch's fused multi-tensor AdamW does: a launch
// per TP_K_ADAMW_PARTS weights instead of one per weight, and one
// wait of the host for the whole norm instead of one per weight. The
// parts travel in the kernel's parameters (launchers do not allocate),
// each cut into chunks of OPT_CHUNK elements, a block a chunk. Both are
// memory-bound (the step reads 5 values an element and writes 4 with a
// master, 4 and 3 on fp32 weights in place), so a thread moves 8
// elements at a time in 16-byte loads and stores (pack.cuh) where a
// part's buffers are aligned, as the weight region's 8-element alignment
// makes them.
// defines: tp_k_adamw_parts, tp_k_sum_squares, tp_k_accumulate_grad
#include "common.cuh"
#include "pack.cuh"

#include <limits.h>

#define OPT_THREADS 256
// Elements of a part a block takes: 4 passes of its 256 threads, 8
// elements each (a multiple of 8, so every chunk starts aligned).
#define OPT_CHUNK 8192
#define OPT_PER_THREAD 8
// Blocks of the sum of squares; each leaves a partial in the array below,
// which a second one-block kernel adds up in a fixed order, so the sum is
// deterministic. Static device memory (launchers do not allocate): two
// calls must not run concurrently on one device, which holds with one
// compute stream.
#define SUMSQ_BLOCKS 1024
#define SUMSQ_RUNS 64

// AdamW's per-step constants, worked out on the host in double as
// torch.optim.AdamW does in Python floats.
struct adamw_consts {
    float decay;      // 1 - lr * weight_decay
    float beta1_w;    // 1 - beta1: the weight of m's lerp toward g
    float beta2;
    float beta2_w;    // 1 - beta2, from the double: 1 - (float)0.999 is off by 1e-5
    float step_size;  // lr / (1 - beta1^step)
    float bc2_sqrt;   // sqrt(1 - beta2^step)
    float eps;
};

// ---- CUDA kernels

static __device__ double sumsq_partial[SUMSQ_BLOCKS];

// torch.optim.AdamW's single-tensor step on one element, in its order:
// w *= 1 - lr wd; m = m.lerp(g, 1 - beta1); v = beta2 v + (1 - beta2) g^2;
// w -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). torch's lerp is one
// fused multiply-add from the nearer end: fma(wt, g - m, m) for a weight
// below 0.5, else fma(wt - 1, g - m, g) (the CPU backend's too). Returns
// the new w; m and v are updated in place.
__device__ __forceinline__ float adamw_update(float w, float g, float &m, float &v, const adamw_consts &k)
{
    const float wi = w * k.decay;
    m = k.beta1_w < 0.5f ? fmaf(k.beta1_w, g - m, m) : fmaf(k.beta1_w - 1.0f, g - m, g);
    v = k.beta2 * v + k.beta2_w * g * g;
    return wi - k.step_size * m / (sqrtf(v) / k.bc2_sqrt + k.eps);
}

// 8 consecutive elements as floats, from 16-byte aligned storage: one
// 16-byte load of bf16, two of fp32.
template <typename T> __device__ __forceinline__ void load8(float *out, const T *p)
{
    constexpr int P = tp_pack16<T>::n;
    TP_UNROLL
    for (int h = 0; h < OPT_PER_THREAD; h += P) {
        const tp_pack16<T> v = tp_load16(p + h);
        TP_UNROLL
        for (int e = 0; e < P; e++)
            out[h + e] = tp_to_float(v.v[e]);
    }
}

template <typename T> __device__ __forceinline__ void store8(T *p, const float *in)
{
    constexpr int P = tp_pack16<T>::n;
    TP_UNROLL
    for (int h = 0; h < OPT_PER_THREAD; h += P) {
        tp_pack16<T> v;
        TP_UNROLL
        for (int e = 0; e < P; e++)
            v.v[e] = tp_from_float<T>(in[h + e]);
        tp_store16(p + h, v);
    }
}

// Up to N parts of one launch (tp_adamw_part or tp_run: item[p].n
// elements), cut into chunks of OPT_CHUNK elements: part p owns chunks
// [first_chunk[p], first_chunk[p + 1]); vec[p]: its buffers are 16-byte
// aligned. The launchers gather them (for_batches); the kernels walk a
// chunk (walk_chunk).
template <typename Item, int N> struct chunk_batch {
    int count;
    int first_chunk[N + 1];
    Item item[N];
    bool vec[N];

    // The part of chunk c (a scan of at most N), and the chunk's elements
    // [*start, *end) of it.
    __device__ __forceinline__ int part(int c, int64_t *start, int64_t *end) const
    {
        int p = 0;
        while (p + 1 < count && c >= first_chunk[p + 1])
            p++;
        *start = (int64_t)(c - first_chunk[p]) * OPT_CHUNK;
        *end = *start + OPT_CHUNK < item[p].n ? *start + OPT_CHUNK : item[p].n;
        return p;
    }
};

// This thread's elements of [start, end): whole groups of 8 by
// group(i0) where vec (16-byte loads and stores), the rest one by one
// by one(i), in the same order within a thread either way.
template <typename G, typename O>
__device__ __forceinline__ void walk_chunk(int64_t start, int64_t end, bool vec, G group, O one)
{
    for (int64_t i0 = start + (int64_t)threadIdx.x * OPT_PER_THREAD; i0 < end;
         i0 += (int64_t)blockDim.x * OPT_PER_THREAD) {
        if (vec && i0 + OPT_PER_THREAD <= end)
            group(i0);
        else
            for (int64_t i = i0; i < i0 + OPT_PER_THREAD && i < end; i++)
                one(i);
    }
}

// The step on a part's fp32 weights from g (storage type, read as fp32
// and scaled by grad_scale, clipping's factor, so that in mixed precision
// the gradient is not rounded to T once more), m and v fp32. The product
// is rounded on its own (__fmul_rn, which nvcc never fuses into the
// lerp's g - m), as the CPU backend's is: the gradient clip_grad_norm_
// scales in place. The fp32 weights are the part's master, and w, what the kernels
// compute with, becomes the master rounded to T (to nearest even); or,
// without a master (T float: the launcher checks), w itself. A block
// takes one chunk of one part, so all its threads take the same branches.
template <typename T>
__global__ void __launch_bounds__(OPT_THREADS)
    adamw_parts_kernel(chunk_batch<tp_adamw_part, TP_K_ADAMW_PARTS> b, float grad_scale, adamw_consts k)
{
    int64_t start, end;
    const int p = b.part((int)blockIdx.x, &start, &end);
    const tp_adamw_part q = b.item[p];
    const bool copy = q.master != nullptr;   // else w is the master: no second store
    float *master = copy ? q.master : q.w, *m = q.m, *v = q.v;
    T *w = (T *)q.w;
    const T *g = (const T *)q.g;
    if (!q.decay)
        k.decay = 1.0f;     // w * 1: torch's parameter group without weight decay
    walk_chunk(
        start, end, b.vec[p],
        [&](int64_t i0) {
            float mw[OPT_PER_THREAD], gi[OPT_PER_THREAD], mi[OPT_PER_THREAD], vi[OPT_PER_THREAD];
            load8(mw, master + i0);
            load8(gi, g + i0);
            load8(mi, m + i0);
            load8(vi, v + i0);
            TP_UNROLL
            for (int e = 0; e < OPT_PER_THREAD; e++)
                mw[e] = adamw_update(mw[e], __fmul_rn(gi[e], grad_scale), mi[e], vi[e], k);
            store8(master + i0, mw);
            store8(m + i0, mi);
            store8(v + i0, vi);
            if (copy)
                store8(w + i0, mw);
        },
        [&](int64_t i) {
            const float wn = adamw_update(master[i], __fmul_rn(tp_to_float(g[i]), grad_scale), m[i], v[i], k);
            master[i] = wn;
            if (copy)
                w[i] = tp_from_float<T>(wn);
        });
}

// Gradient accumulation over micro-batches, in fp32: phase 0 copies g
// into acc, 1 adds it, 2 writes acc + g back into g, rounded once to T.
template <typename T> __global__ void accumulate_grad_kernel(float *acc, T *g, int64_t n, int phase)
{
    TP_GRID_STRIDE(i, n)
    {
        const float gi = tp_to_float(g[i]);
        if (phase == 0)
            acc[i] = gi;
        else if (phase == 1)
            acc[i] += gi;
        else
            g[i] = tp_from_float<T>(acc[i] + gi);
    }
}

// Block i: the sum of x^2 over chunks i, i + gridDim.x, ... of the runs,
// in double, left in sumsq_partial[i].
template <typename T> __global__ void __launch_bounds__(OPT_THREADS) sum_squares_kernel(chunk_batch<tp_run, SUMSQ_RUNS> b)
{
    double acc = 0.0;
    for (int c = (int)blockIdx.x; c < b.first_chunk[b.count]; c += (int)gridDim.x) {
        int64_t start, end;
        const int r = b.part(c, &start, &end);
        const T *x = (const T *)b.item[r].x;
        walk_chunk(
            start, end, b.vec[r],
            [&](int64_t i0) {
                float xi[OPT_PER_THREAD];
                load8(xi, x + i0);
                TP_UNROLL
                for (int e = 0; e < OPT_PER_THREAD; e++)
                    acc += (double)xi[e] * xi[e];
            },
            [&](int64_t i) {
                const double xi = tp_to_float(x[i]);
                acc += xi * xi;
            });
    }
    acc = tp_block_sum(acc);
    if (threadIdx.x == 0)
        sumsq_partial[blockIdx.x] = acc;
}

// *out = the partials' sum (first launch of a call), or *out + it.
__global__ void sum_squares_total_kernel(double *out, int nparts, bool add)
{
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x)
        acc += sumsq_partial[i];
    acc = tp_block_sum(acc);
    if (threadIdx.x == 0)
        *out = add ? *out + acc : acc;
}

// ---- kernel launchers

// The step's constants, in double as torch computes them in Python
// floats.
static adamw_consts adamw_prepare(double lr, double beta1, double beta2, double eps, double weight_decay,
                                  int64_t step)
{
    TP_KCHECK(step >= 1, "a step from 1 on");
    return {(float)(1.0 - lr * weight_decay),
            (float)(1.0 - beta1),
            (float)beta2,
            (float)(1.0 - beta2),
            (float)(lr / (1.0 - pow(beta1, (double)step))),
            (float)sqrt(1.0 - pow(beta2, (double)step)),
            (float)eps};
}

// Gathers items[0 .. count) in batches of N, each with its chunks, and
// calls launch(batch) for each batch; empty parts are left out, and no
// batch is launched when every part is empty. aligned(item): whether its
// buffers are 16-byte aligned.
template <int N, typename Item, typename A, typename L>
static void for_batches(const Item *items, int count, A aligned, L launch)
{
    TP_KCHECK(count >= 0, "a count of parts");
    chunk_batch<Item, N> b;
    b.count = 0;
    b.first_chunk[0] = 0;
    for (int i = 0; i < count; i++) {
        const int64_t n = items[i].n;
        TP_KCHECK(n >= 0, "negative size");
        const int64_t chunks = TP_CEIL_DIV(n, (int64_t)OPT_CHUNK);
        TP_KCHECK(chunks <= INT_MAX - b.first_chunk[b.count], "a part of fewer than 2^44 elements");
        if (n > 0) {
            b.item[b.count] = items[i];
            b.vec[b.count] = aligned(items[i]);
            b.first_chunk[b.count + 1] = b.first_chunk[b.count] + (int)chunks;
            b.count++;
        }
        // a full batch, or the last part: launch what is gathered
        if (b.count > 0 && (b.count == N || i == count - 1)) {
            launch(b);
            b.count = 0;
        }
    }
}

extern "C" void tp_k_adamw_parts(tp_stream s, tp_kernel_dtype t, const tp_adamw_part *parts, int nparts,
                                 float grad_scale, double lr, double beta1, double beta2, double eps,
                                 double weight_decay, int64_t step)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    for (int i = 0; i < nparts; i++)     // without a master the kernel reads and writes w as fp32
        TP_KCHECK(t == TP_KERNEL_F32 || parts[i].master || parts[i].n == 0, "bf16 weights step through a master");
    const adamw_consts k = adamw_prepare(lr, beta1, beta2, eps, weight_decay, step);
    for_batches<TP_K_ADAMW_PARTS>(
        parts, nparts,
        [](const tp_adamw_part &q) {
            return tp_aligned16(q.master) && tp_aligned16(q.w) && tp_aligned16(q.g) && tp_aligned16(q.m) &&
                   tp_aligned16(q.v);
        },
        [&](const chunk_batch<tp_adamw_part, TP_K_ADAMW_PARTS> &b) {
            const unsigned blocks = (unsigned)b.first_chunk[b.count];
            if (t == TP_KERNEL_F32)
                TP_LAUNCH(adamw_parts_kernel<float>, blocks, OPT_THREADS, 0, s, b, grad_scale, k);
            else
                TP_LAUNCH(adamw_parts_kernel<__nv_bfloat16>, blocks, OPT_THREADS, 0, s, b, grad_scale, k);
        });
}

extern "C" void tp_k_sum_squares(tp_stream s, tp_kernel_dtype t, double *out, const tp_run *runs, int nruns)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    bool launched = false;
    for_batches<SUMSQ_RUNS>(
        runs, nruns, [](const tp_run &r) { return tp_aligned16(r.x); },
        [&](const chunk_batch<tp_run, SUMSQ_RUNS> &b) {
            const int chunks = b.first_chunk[b.count], blocks = chunks < SUMSQ_BLOCKS ? chunks : SUMSQ_BLOCKS;
            if (t == TP_KERNEL_F32)
                TP_LAUNCH(sum_squares_kernel<float>, blocks, OPT_THREADS, 0, s, b);
            else
                TP_LAUNCH(sum_squares_kernel<__nv_bfloat16>, blocks, OPT_THREADS, 0, s, b);
            TP_LAUNCH(sum_squares_total_kernel, 1, SUMSQ_BLOCKS, 0, s, out, blocks, launched);
            launched = true;
        });
    if (!launched)
        TP_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, (cudaStream_t)s));
}

extern "C" void tp_k_accumulate_grad(tp_stream s, tp_kernel_dtype t, float *acc, void *g, int64_t n, int phase)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0, "negative size");
    TP_KCHECK(phase >= 0 && phase <= 2, "first, add or last");
    if (n == 0)
        return;
    const unsigned blocks = tp_elementwise_blocks(n, OPT_THREADS);
    if (t == TP_KERNEL_F32)
        TP_LAUNCH(accumulate_grad_kernel<float>, blocks, OPT_THREADS, 0, s, acc, (float *)g, n, phase);
    else
        TP_LAUNCH(accumulate_grad_kernel<__nv_bfloat16>, blocks, OPT_THREADS, 0, s, acc, (__nv_bfloat16 *)g, n, phase);
}
