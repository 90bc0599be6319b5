// cross_entropy.cu: the causal-LM loss, whole or in the vocab-parallel
// pieces the executor composes with all-reduces.
// defines: tp_k_cross_entropy, tp_k_ce_max, tp_k_ce_sumexp, tp_k_ce_target, tp_k_ce_loss
//
// Which label a row has (shifted or not) and what the mean divides by:
// tp_ce_rule in runtime/backends/backend.h, cross_entropy.cuh. Columns
// at or beyond `vocab` are padding and take no part in the softmax. Losses
// are float32 whatever the storage type of the logits.
#include "cross_entropy.cuh"

// Blocks of the whole-vocabulary loss; each leaves a partial sum and count
// in the arrays below, which a second one-block kernel adds up in a fixed
// order, so the loss is deterministic. The arrays are static device memory
// (launchers do not allocate): two tp_k_cross_entropy calls must not run
// concurrently on one device, which holds with one compute stream.
#define CE_BLOCKS 1024
#define CE_REDUCE_THREADS 1024

// ---- CUDA kernels

static __device__ float ce_partial_loss[CE_BLOCKS];
static __device__ float ce_partial_count[CE_BLOCKS];

// Block i takes rows i, i + gridDim.x, ...: -log softmax(row)[label] =
// log sum exp(l - max) + max - l[label], summed in row order.
template <typename T>
__global__ void cross_entropy_rows_kernel(const T *logits, const int32_t *labels, int64_t rows, int64_t s, int64_t v,
                                          int64_t vocab, int shift)
{
    float total = 0.0f, count = 0.0f;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int32_t label = row_label(labels, r, s, shift);
        if (label == CE_IGNORE)
            continue;
        assert(label >= 0 && label < vocab && "label outside the vocabulary");
        const T *row = logits + r * v;
        const float mx = row_max(row, vocab);
        const float sum = row_sumexp(row, vocab, mx);
        total += logf(sum) + mx - tp_to_float(row[label]);
        count += 1.0f;
    }
    if (threadIdx.x == 0) {
        ce_partial_loss[blockIdx.x] = total;
        ce_partial_count[blockIdx.x] = count;
    }
}

// One block: the mean over the partials of the first nparts blocks. With
// no valid row it is 0/0 = NaN, as in torch.
__global__ void cross_entropy_mean_kernel(float *loss, int nparts, float divisor)
{
    float total = 0.0f, count = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        total += ce_partial_loss[i];
        count += ce_partial_count[i];
    }
    total = tp_block_sum(total);
    count = tp_block_sum(count);
    if (threadIdx.x == 0)
        *loss = total / ce_denominator(divisor, count);
}

// One block per row: the max over the local real columns; -inf (the
// identity of MAX) when every local column is padding.
template <typename T> __global__ void ce_max_kernel(float *out, const T *logits, int64_t v, int64_t nreal)
{
    const float mx = row_max(logits + (int64_t)blockIdx.x * v, nreal);
    if (threadIdx.x == 0)
        out[blockIdx.x] = mx;
}

// One block per row: sum of exp(l - max) over the local real columns, max
// being the global (all-reduced) row max.
template <typename T>
__global__ void ce_sumexp_kernel(float *out, const T *logits, const float *max, int64_t v, int64_t nreal)
{
    const float sum = row_sumexp(logits + (int64_t)blockIdx.x * v, nreal, max[blockIdx.x]);
    if (threadIdx.x == 0)
        out[blockIdx.x] = sum;
}

// out[r] = logits[r, label - vocab_start] when that column is local, else 0
template <typename T>
__global__ void ce_target_kernel(float *out, const T *logits, const int32_t *labels, int64_t rows, int64_t s, int64_t v,
                                 int64_t vocab_start, int shift)
{
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const int64_t col = (int64_t)row_label(labels, r, s, shift) - vocab_start;
        out[r] = col >= 0 && col < v ? tp_to_float(logits[r * v + col]) : 0.0f;
    }
}

// One block: mean over the valid rows of log(sumexp) + max - target.
__global__ void ce_loss_kernel(float *loss, const float *sumexp, const float *max, const float *target,
                               const int32_t *labels, int64_t rows, int64_t s, int shift, float divisor)
{
    float total = 0.0f, count = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        if (row_label(labels, r, s, shift) == CE_IGNORE)
            continue;
        total += logf(sumexp[r]) + max[r] - target[r];
        count += 1.0f;
    }
    total = tp_block_sum(total);
    count = tp_block_sum(count);
    if (threadIdx.x == 0)
        *loss = total / ce_denominator(divisor, count);
}

// ---- kernel launchers

template <typename T>
static void launch_cross_entropy(tp_stream st, float *loss, const T *logits, const int32_t *labels, int64_t rows,
                                 int64_t s, int64_t v, int64_t vocab, int shift, float divisor)
{
    const int blocks = rows < CE_BLOCKS ? (int)rows : CE_BLOCKS;
    TP_LAUNCH(cross_entropy_rows_kernel<T>, blocks, tp_rows_threads(vocab), 0, st, logits, labels, rows, s, v, vocab,
              shift);
    TP_LAUNCH(cross_entropy_mean_kernel, 1, CE_REDUCE_THREADS, 0, st, loss, blocks, divisor);
}

extern "C" void tp_k_cross_entropy(tp_stream st, tp_kernel_dtype t, float *loss, const void *logits,
                                   const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab, int shift,
                                   float divisor)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(vocab > 0 && vocab <= v, "the real vocabulary fits the logits' columns");
    TP_KCHECK(b > 0 && s > 0, "a batch of at least one token"); // an empty mean still launches: loss = NaN
    TP_KCHECK(shift == 0 || shift == 1, "labels shifted by one position or none");
    if (t == TP_KERNEL_F32)
        launch_cross_entropy(st, loss, (const float *)logits, labels, b * s, s, v, vocab, shift, divisor);
    else
        launch_cross_entropy(st, loss, (const __nv_bfloat16 *)logits, labels, b * s, s, v, vocab, shift, divisor);
}

template <typename T>
static void launch_ce_max(tp_stream st, float *out, const T *logits, int64_t rows, int64_t v, int64_t nreal)
{
    TP_LAUNCH(ce_max_kernel<T>, (unsigned)rows, tp_rows_threads(nreal), 0, st, out, logits, v, nreal);
}

extern "C" void tp_k_ce_max(tp_stream st, tp_kernel_dtype t, float *out, const void *logits, int64_t rows, int64_t v,
                            int64_t vocab_start, int64_t vocab)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(rows >= 0 && v >= 0 && vocab_start >= 0, "negative size");
    TP_KCHECK(rows <= TP_CUDA_MAX_ROWS, "one block per row: at most 2^31-1 rows");
    if (rows == 0)
        return;
    const int64_t nreal = real_columns(v, vocab_start, vocab);
    if (t == TP_KERNEL_F32)
        launch_ce_max(st, out, (const float *)logits, rows, v, nreal);
    else
        launch_ce_max(st, out, (const __nv_bfloat16 *)logits, rows, v, nreal);
}

template <typename T>
static void launch_ce_sumexp(tp_stream st, float *out, const T *logits, const float *max, int64_t rows, int64_t v,
                             int64_t nreal)
{
    TP_LAUNCH(ce_sumexp_kernel<T>, (unsigned)rows, tp_rows_threads(nreal), 0, st, out, logits, max, v, nreal);
}

extern "C" void tp_k_ce_sumexp(tp_stream st, tp_kernel_dtype t, float *out, const void *logits, const float *max,
                               int64_t rows, int64_t v, int64_t vocab_start, int64_t vocab)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(rows >= 0 && v >= 0 && vocab_start >= 0, "negative size");
    TP_KCHECK(rows <= TP_CUDA_MAX_ROWS, "one block per row: at most 2^31-1 rows");
    if (rows == 0)
        return;
    const int64_t nreal = real_columns(v, vocab_start, vocab);
    if (t == TP_KERNEL_F32)
        launch_ce_sumexp(st, out, (const float *)logits, max, rows, v, nreal);
    else
        launch_ce_sumexp(st, out, (const __nv_bfloat16 *)logits, max, rows, v, nreal);
}

template <typename T>
static void launch_ce_target(tp_stream st, float *out, const T *logits, const int32_t *labels, int64_t rows, int64_t s,
                             int64_t v, int64_t vocab_start, int shift)
{
    TP_LAUNCH(ce_target_kernel<T>, tp_elementwise_blocks(rows, 256), 256, 0, st, out, logits, labels, rows, s, v,
              vocab_start, shift);
}

extern "C" void tp_k_ce_target(tp_stream st, tp_kernel_dtype t, float *out, const void *logits, const int32_t *labels,
                               int64_t b, int64_t s, int64_t v, int64_t vocab_start, int shift)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(b >= 0 && s >= 0 && v >= 0 && vocab_start >= 0, "negative size");
    TP_KCHECK(shift == 0 || shift == 1, "labels shifted by one position or none");
    if (b * s == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_ce_target(st, out, (const float *)logits, labels, b * s, s, v, vocab_start, shift);
    else
        launch_ce_target(st, out, (const __nv_bfloat16 *)logits, labels, b * s, s, v, vocab_start, shift);
}

extern "C" void tp_k_ce_loss(tp_stream st, float *loss, const float *sumexp, const float *max, const float *target,
                             const int32_t *labels, int64_t b, int64_t s, int shift, float divisor)
{
    TP_KCHECK(b > 0 && s > 0, "a batch of at least one token"); // an empty mean still launches: loss = NaN
    TP_KCHECK(shift == 0 || shift == 1, "labels shifted by one position or none");
    TP_LAUNCH(ce_loss_kernel, 1, CE_REDUCE_THREADS, 0, st, loss, sumexp, max, target, labels, b * s, s, shift, divisor);
}
