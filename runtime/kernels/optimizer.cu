// optimizer.cu: AdamW's update, on weights in the storage type or on fp32
// master weights of bf16 ones, and the sum of squares of the
// gradient-norm clipping.
//
// The mixed-precision step and the sum of squares take many parts (every
// weight of a rank) in one pass, as torch's fused multi-tensor AdamW does:
// a launch per TP_K_ADAMW_PARTS weights instead of one per weight, and one
// wait of the host for the whole norm instead of one per weight. The
// parts travel in the kernel's parameters (launchers do not allocate),
// each cut into chunks of OPT_CHUNK elements, a block a chunk. Both are
// memory-bound (the step reads 5 and writes 4 values an element), so a
// thread moves 8 elements at a time in 16-byte loads and stores
// (pack.cuh) where a part's buffers are aligned, as the weight region's
// 8-element alignment makes them.
// defines: tp_k_adamw, tp_k_adamw_master_parts, tp_k_sum_squares, tp_k_accumulate_grad
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

template <typename T> __global__ void adamw_kernel(T *w, const T *g, T *m, T *v, int64_t n, adamw_consts k)
{
    TP_GRID_STRIDE(i, n)
    {
        float mi = tp_to_float(m[i]), vi = tp_to_float(v[i]);
        const float wn = adamw_update(tp_to_float(w[i]), tp_to_float(g[i]), mi, vi, k);
        m[i] = tp_from_float<T>(mi);
        v[i] = tp_from_float<T>(vi);
        w[i] = tp_from_float<T>(wn);
    }
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

// The parts of one launch: part p owns the blocks [first_chunk[p],
// first_chunk[p + 1]); vec[p]: its five buffers are 16-byte aligned.
struct adamw_batch {
    int nparts;
    int first_chunk[TP_K_ADAMW_PARTS + 1];
    tp_adamw_part part[TP_K_ADAMW_PARTS];
    float decay[TP_K_ADAMW_PARTS];      // 1 - lr wd, or 1 for a part without weight decay
    bool vec[TP_K_ADAMW_PARTS];
};

// The part whose chunks hold block `block`: a scan of at most a batch.
__device__ __forceinline__ int part_of_block(const int *first_chunk, int nparts, int block)
{
    int p = 0;
    while (p + 1 < nparts && block >= first_chunk[p + 1])
        p++;
    return p;
}

// Mixed precision: the step on the fp32 master from g (storage type, read
// as fp32 and scaled by grad_scale, clipping's factor, so the gradient is
// not rounded to T once more), m and v fp32; w, what the kernels compute
// with, becomes the master rounded to T (to nearest even). A block takes
// one chunk of one part.
template <typename T>
__global__ void __launch_bounds__(OPT_THREADS) adamw_master_kernel(adamw_batch b, float grad_scale, adamw_consts k)
{
    const int p = part_of_block(b.first_chunk, b.nparts, (int)blockIdx.x);
    const tp_adamw_part q = b.part[p];
    float *master = q.master, *m = q.m, *v = q.v;
    T *w = (T *)q.w;
    const T *g = (const T *)q.g;
    k.decay = b.decay[p];
    const int64_t start = (int64_t)(blockIdx.x - b.first_chunk[p]) * OPT_CHUNK;
    const int64_t end = start + OPT_CHUNK < q.n ? start + OPT_CHUNK : q.n;
    for (int64_t i0 = start + (int64_t)threadIdx.x * OPT_PER_THREAD; i0 < end;
         i0 += (int64_t)blockDim.x * OPT_PER_THREAD) {
        if (b.vec[p] && i0 + OPT_PER_THREAD <= end) {
            float mw[OPT_PER_THREAD], gi[OPT_PER_THREAD], mi[OPT_PER_THREAD], vi[OPT_PER_THREAD];
            load8(mw, master + i0);
            load8(gi, g + i0);
            load8(mi, m + i0);
            load8(vi, v + i0);
            TP_UNROLL
            for (int e = 0; e < OPT_PER_THREAD; e++)
                mw[e] = adamw_update(mw[e], gi[e] * grad_scale, mi[e], vi[e], k);
            store8(master + i0, mw);
            store8(m + i0, mi);
            store8(v + i0, vi);
            store8(w + i0, mw);
            continue;
        }
        for (int64_t i = i0; i < i0 + OPT_PER_THREAD && i < end; i++) {
            const float wn = adamw_update(master[i], tp_to_float(g[i]) * grad_scale, m[i], v[i], k);
            master[i] = wn;
            w[i] = tp_from_float<T>(wn);
        }
    }
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

// The runs of one launch of the sum of squares, chunked as adamw_batch's
// parts.
struct sumsq_batch {
    int nruns, chunks;
    int first_chunk[SUMSQ_RUNS + 1];
    tp_run run[SUMSQ_RUNS];
    bool vec[SUMSQ_RUNS];
};

// Block i: the sum of x^2 over chunks i, i + gridDim.x, ... of the runs,
// in double, left in sumsq_partial[i].
template <typename T> __global__ void __launch_bounds__(OPT_THREADS) sum_squares_kernel(sumsq_batch b)
{
    double acc = 0.0;
    for (int c = (int)blockIdx.x; c < b.chunks; c += (int)gridDim.x) {
        const int r = part_of_block(b.first_chunk, b.nruns, c);
        const T *x = (const T *)b.run[r].x;
        const int64_t start = (int64_t)(c - b.first_chunk[r]) * OPT_CHUNK;
        const int64_t end = start + OPT_CHUNK < b.run[r].n ? start + OPT_CHUNK : b.run[r].n;
        for (int64_t i0 = start + (int64_t)threadIdx.x * OPT_PER_THREAD; i0 < end;
             i0 += (int64_t)blockDim.x * OPT_PER_THREAD) {
            if (b.vec[r] && i0 + OPT_PER_THREAD <= end) {
                float xi[OPT_PER_THREAD];
                load8(xi, x + i0);
                TP_UNROLL
                for (int e = 0; e < OPT_PER_THREAD; e++)
                    acc += (double)xi[e] * xi[e];
                continue;
            }
            for (int64_t i = i0; i < i0 + OPT_PER_THREAD && i < end; i++) {
                const double xi = tp_to_float(x[i]);
                acc += xi * xi;
            }
        }
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

template <typename T> static void launch_adamw(tp_stream s, T *w, const T *g, T *m, T *v, int64_t n, adamw_consts k)
{
    TP_LAUNCH(adamw_kernel<T>, tp_elementwise_blocks(n, OPT_THREADS), OPT_THREADS, 0, s, w, g, m, v, n, k);
}

// The launchers' preconditions and the step's constants, in double as
// torch computes them in Python floats; false when there is nothing to
// update.
static bool adamw_prepare(tp_kernel_dtype t, int64_t n, double lr, double beta1, double beta2, double eps,
                          double weight_decay, int64_t step, adamw_consts *k)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n >= 0 && step >= 1, "a step from 1 on");
    *k = {(float)(1.0 - lr * weight_decay),
          (float)(1.0 - beta1),
          (float)beta2,
          (float)(1.0 - beta2),
          (float)(lr / (1.0 - pow(beta1, (double)step))),
          (float)sqrt(1.0 - pow(beta2, (double)step)),
          (float)eps};
    return n > 0;
}

extern "C" void tp_k_adamw(tp_stream s, tp_kernel_dtype t, void *w, const void *g, void *m, void *v, int64_t n,
                           double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step)
{
    adamw_consts k;
    if (!adamw_prepare(t, n, lr, beta1, beta2, eps, weight_decay, step, &k))
        return;
    if (t == TP_KERNEL_F32)
        launch_adamw(s, (float *)w, (const float *)g, (float *)m, (float *)v, n, k);
    else
        launch_adamw(s, (__nv_bfloat16 *)w, (const __nv_bfloat16 *)g, (__nv_bfloat16 *)m, (__nv_bfloat16 *)v, n, k);
}

// Chunks of n elements.
static int64_t chunks_of(int64_t n) { return TP_CEIL_DIV(n, (int64_t)OPT_CHUNK); }

extern "C" void tp_k_adamw_master_parts(tp_stream s, tp_kernel_dtype t, const tp_adamw_part *parts, int nparts,
                                        float grad_scale, double lr, double beta1, double beta2, double eps,
                                        double weight_decay, int64_t step)
{
    adamw_consts k;
    TP_KCHECK(nparts >= 0, "a count of parts");
    adamw_prepare(t, 0, lr, beta1, beta2, eps, weight_decay, step, &k);
    adamw_batch b;
    b.nparts = 0;
    b.first_chunk[0] = 0;
    for (int i = 0; i < nparts; i++) {
        const tp_adamw_part &q = parts[i];
        TP_KCHECK(q.n >= 0, "negative size");
        TP_KCHECK(chunks_of(q.n) <= INT_MAX - b.first_chunk[b.nparts], "a part of fewer than 2^44 elements");
        if (q.n > 0) {
            b.part[b.nparts] = q;
            b.decay[b.nparts] = q.decay ? k.decay : 1.0f;
            b.vec[b.nparts] = tp_aligned16(q.master) && tp_aligned16(q.w) && tp_aligned16(q.g) &&
                              tp_aligned16(q.m) && tp_aligned16(q.v);
            b.first_chunk[b.nparts + 1] = b.first_chunk[b.nparts] + (int)chunks_of(q.n);
            b.nparts++;
        }
        // a full batch, or the last part: launch what is gathered
        if (b.nparts > 0 && (b.nparts == TP_K_ADAMW_PARTS || i == nparts - 1)) {
            const unsigned blocks = (unsigned)b.first_chunk[b.nparts];
            if (t == TP_KERNEL_F32)
                TP_LAUNCH(adamw_master_kernel<float>, blocks, OPT_THREADS, 0, s, b, grad_scale, k);
            else
                TP_LAUNCH(adamw_master_kernel<__nv_bfloat16>, blocks, OPT_THREADS, 0, s, b, grad_scale, k);
            b.nparts = 0;
        }
    }
}

extern "C" void tp_k_sum_squares(tp_stream s, tp_kernel_dtype t, double *out, const tp_run *runs, int nruns)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(nruns >= 0, "a count of runs");
    sumsq_batch b;
    b.nruns = 0;
    b.first_chunk[0] = 0;
    bool launched = false;
    for (int i = 0; i < nruns; i++) {
        TP_KCHECK(runs[i].n >= 0, "negative size");
        TP_KCHECK(chunks_of(runs[i].n) <= INT_MAX - b.first_chunk[b.nruns], "a run of fewer than 2^44 elements");
        if (runs[i].n > 0) {
            b.run[b.nruns] = runs[i];
            b.vec[b.nruns] = tp_aligned16(runs[i].x);
            b.first_chunk[b.nruns + 1] = b.first_chunk[b.nruns] + (int)chunks_of(runs[i].n);
            b.nruns++;
        }
        if (b.nruns > 0 && (b.nruns == SUMSQ_RUNS || i == nruns - 1)) {
            b.chunks = b.first_chunk[b.nruns];
            const int blocks = b.chunks < SUMSQ_BLOCKS ? b.chunks : SUMSQ_BLOCKS;
            if (t == TP_KERNEL_F32)
                TP_LAUNCH(sum_squares_kernel<float>, blocks, OPT_THREADS, 0, s, b);
            else
                TP_LAUNCH(sum_squares_kernel<__nv_bfloat16>, blocks, OPT_THREADS, 0, s, b);
            TP_LAUNCH(sum_squares_total_kernel, 1, SUMSQ_BLOCKS, 0, s, out, blocks, launched);
            launched = true;
            b.nruns = 0;
        }
    }
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
