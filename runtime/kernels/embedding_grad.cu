// embedding_grad.cu: the gradient of the embedding table, plain or
// vocab-parallel (masked).
// defines: tp_k_embedding_grad
//
// dw[r, :] = sum of dy[t, :] over the tokens t whose id is vocab_start + r,
// without atomics, so the sums run in token order whatever the schedule:
// the block of a token that is its id's first occurrence sums that id's
// rows; the other blocks do nothing. Finding first occurrences and
// matches scans the ids, O(tokens^2 / threads) compares: cheap beside the
// matmuls at the token counts of one rank's step.
#include "common.cuh"

// EMB_THREADS per block, EMB_COLS columns per thread (launch_limits.h): a
// block covers EMB_THREADS * EMB_COLS columns
#define EMB_WARPS (EMB_THREADS / 32)

// ---- CUDA kernels

// Block (token t, column chunk).
template <typename T>
__global__ void __launch_bounds__(EMB_THREADS)
    embedding_grad_kernel(T *dw, const int32_t *ids, const T *dy, int64_t ntok, int64_t rows, int64_t dim,
                          int64_t vocab_start, bool masked)
{
    TP_SHARED(unsigned, matches, EMB_WARPS);
    const int64_t t = blockIdx.x;
    const int32_t id = ids[t];
    const int64_t r = (int64_t)id - vocab_start;
    if (r < 0 || r >= rows) {
        assert(masked && "embedding id out of range"); // unmasked ids are checked by the executor
        return;
    }
    // an earlier token with this id sums it
    float earlier = 0.0f;
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x)
        if (ids[j] == id)
            earlier = 1.0f;
    if (tp_block_max(earlier) > 0.0f)
        return;

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t c0 = (int64_t)blockIdx.y * EMB_THREADS * EMB_COLS + threadIdx.x;
    float acc[EMB_COLS] = {};
    // chunks of EMB_THREADS tokens: each thread tests one, the warps' ballots
    // list the matches in token order, every thread adds them for its columns
    for (int64_t base = t; base < ntok; base += EMB_THREADS) {
        const int64_t j = base + threadIdx.x;
        const unsigned ballot = __ballot_sync(TP_FULL_MASK, j < ntok && ids[j] == id);
        if (lane == 0)
            matches[warp] = ballot;
        __syncthreads();
        for (int w = 0; w < EMB_WARPS; w++)
            for (unsigned bits = matches[w]; bits; bits &= bits - 1) {
                const int64_t tok = base + w * 32 + (__ffs((int)bits) - 1);
                TP_UNROLL
                for (int i = 0; i < EMB_COLS; i++) {
                    const int64_t c = c0 + (int64_t)i * EMB_THREADS;
                    if (c < dim)
                        acc[i] += tp_to_float(dy[tok * dim + c]);
                }
            }
        __syncthreads(); // the next chunk rewrites matches
    }
    TP_UNROLL
    for (int i = 0; i < EMB_COLS; i++) {
        const int64_t c = c0 + (int64_t)i * EMB_THREADS;
        if (c < dim)
            dw[r * dim + c] = tp_from_float<T>(acc[i]);
    }
}

// ---- kernel launchers

template <typename T>
static void launch_embedding_grad(tp_stream s, T *dw, const int32_t *ids, const T *dy, int64_t ntok, int64_t rows,
                                  int64_t dim, int64_t vocab_start, bool masked)
{
    // rows no token names stay zero
    TP_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)(rows * dim) * sizeof(T), (cudaStream_t)s));
    if (ntok == 0)
        return;
    const dim3 grid((unsigned)ntok, (unsigned)TP_CEIL_DIV(dim, EMB_THREADS * EMB_COLS));
    TP_LAUNCH(embedding_grad_kernel<T>, grid, EMB_THREADS, 0, s, dw, ids, dy, ntok, rows, dim, vocab_start, masked);
}

extern "C" void tp_k_embedding_grad(tp_stream s, tp_kernel_dtype t, void *dw, const int32_t *ids, const void *dy,
                                    int64_t ntok, int64_t rows, int64_t dim, int64_t vocab_start, bool masked)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(ntok >= 0 && rows >= 0 && dim >= 0 && vocab_start >= 0, "negative size");
    TP_KCHECK(ntok <= TP_CUDA_MAX_ROWS && dim <= TP_CUDA_MAX_EMBEDDING_GRAD_DIM,
              "one block per token (at most 2^31-1) and column chunk (at most 65535)");
    if (rows == 0 || dim == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_embedding_grad(s, (float *)dw, ids, (const float *)dy, ntok, rows, dim, vocab_start, masked);
    else
        launch_embedding_grad(s, (__nv_bfloat16 *)dw, ids, (const __nv_bfloat16 *)dy, ntok, rows, dim, vocab_start,
                              masked);
}
