// embedding.cu: token embedding lookup, plain or vocab-parallel (masked).
// defines: tp_k_embedding
#include "common.cuh"

// ---- CUDA kernels

// One block per token: out[t, :] = w[ids[t] - vocab_start, :], zeros for
// ids outside this rank's rows [vocab_start, vocab_start + rows) when
// masked (the all-reduce that follows adds the one non-zero row).
template <typename T>
__global__ void embedding_kernel(T *out, const int32_t *ids, const T *w, int64_t rows, int64_t dim,
                                 int64_t vocab_start, bool masked)
{
    const int64_t t = blockIdx.x;
    const int64_t r = (int64_t)ids[t] - vocab_start;
    T *o = out + t * dim;
    if (r < 0 || r >= rows) {
        // unmasked out-of-range ids are reported by the executor first
        assert(masked && "embedding id out of range");
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
            o[j] = tp_from_float<T>(0.0f);
        return;
    }
    const T *src = w + r * dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        o[j] = src[j];
}

// ---- kernel launchers

template <typename T>
static void launch_embedding(tp_stream s, T *out, const int32_t *ids, int64_t ntok, const T *w, int64_t rows,
                             int64_t dim, int64_t vocab_start, bool masked)
{
    const int threads = dim >= 256 ? 256 : (int)TP_CEIL_DIV(dim, 32) * 32;
    TP_LAUNCH(embedding_kernel<T>, (unsigned)ntok, threads, 0, s, out, ids, w, rows, dim, vocab_start, masked);
}

extern "C" void tp_k_embedding(tp_stream s, tp_kernel_dtype t, void *out, const int32_t *ids, int64_t ntok,
                               const void *w, int64_t rows, int64_t dim, int64_t vocab_start, bool masked)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(ntok >= 0 && rows >= 0 && dim >= 0 && vocab_start >= 0, "negative size");
    TP_KCHECK(ntok <= TP_CUDA_MAX_ROWS, "one block per token: at most 2^31-1 tokens");
    if (ntok == 0 || dim == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_embedding(s, (float *)out, ids, ntok, (const float *)w, rows, dim, vocab_start, masked);
    else
        launch_embedding(s, (__nv_bfloat16 *)out, ids, ntok, (const __nv_bfloat16 *)w, rows, dim, vocab_start,
                         masked);
}
