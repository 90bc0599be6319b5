// reshard.cu: chunk copies for R -> S and for collectives along inner dims,
// and position ids (by document with segments).
// defines: tp_k_slice, tp_k_narrow, tp_k_narrow_grad, tp_k_split_blocks, tp_k_join_blocks, tp_k_positions
#include "common.cuh"

#define RESHARD_THREADS 256

// ---- CUDA kernels

// A tensor split into `parts` chunks along dim is outer x shape[dim] x
// inner; chunk p holds, in each of the outer slabs, one contiguous run of
// run = (shape[dim] / parts) * inner elements starting at p * run. Laid
// out "as blocks", chunk p comes whole at p * (outer * run). Element e of
// the block layout (from element `first` of a slab on) is element
//   (e / run % outer) * shape[dim] * inner + first + e / (outer * run) * run + e % run
// of the tensor; gather copies tensor -> blocks (slice, narrow, split),
// scatter blocks -> tensor (join). A narrow is one block of
// run = length * inner from first = start * inner.
template <typename T>
__global__ void chunk_copy_kernel(T *dst, const T *src, int64_t n, int64_t outer, int64_t run, int64_t slab,
                                  int64_t first, bool gather)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t rem = e % (outer * run);
        const int64_t idx = rem / run * slab + first + e / (outer * run) * run + rem % run;
        if (gather)
            dst[e] = src[idx];
        else
            dst[idx] = src[e];
    }
}

// narrow's gradient: out (outer x len x inner) is dy (outer x length x
// inner) at [start, start + length) of the middle dimension, zeros around
template <typename T>
__global__ void narrow_grad_kernel(T *out, const T *dy, int64_t n, int64_t len, int64_t inner, int64_t start,
                                   int64_t length)
{
    TP_GRID_STRIDE(e, n)
    {
        const int64_t p = e / inner % len - start;
        out[e] = p >= 0 && p < length ? dy[(e / (inner * len) * length + p) * inner + e % inner]
                                      : tp_from_float<T>(0.0f);
    }
}

__global__ void positions_kernel(int32_t *out, int64_t n, int64_t s, int64_t pos_offset)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = (int32_t)(pos_offset + i % s);
}

// Positions by document: a thread per row walks it once, each document's
// first position restarting at pos_offset (done once a step, before the
// layers: a row's walk is cheap next to them).
__global__ void document_positions_kernel(int32_t *out, const int32_t *seg, int64_t b, int64_t s, int64_t pos_offset)
{
    for (int64_t bi = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; bi < b; bi += (int64_t)gridDim.x * blockDim.x)
        for (int64_t j = 0, first = 0; j < s; j++) {
            if (j > 0 && seg[bi * s + j] != seg[bi * s + j - 1])
                first = j;
            out[bi * s + j] = (int32_t)(pos_offset + j - first);
        }
}

// ---- kernel launchers

struct chunking {
    int64_t outer, run, slab, total;
};

// Checks the split (as the CPU backend asserts) and measures it.
static chunking measure(const int64_t *shape, int rank, int *dim, int parts)
{
    if (*dim < 0) // Shard(-1) style dims count from the end
        *dim += rank;
    TP_KCHECK(*dim >= 0 && *dim < rank && parts > 0, "a dimension of the tensor and at least one part");
    TP_KCHECK(shape[*dim] % parts == 0, "the compiler only emits even splits");
    chunking c = {1, 1, 1, 1};
    int64_t inner = 1;
    for (int i = 0; i < *dim; i++)
        c.outer *= shape[i];
    for (int i = *dim + 1; i < rank; i++)
        inner *= shape[i];
    c.run = shape[*dim] / parts * inner;
    c.slab = shape[*dim] * inner;
    c.total = c.outer * c.slab;
    return c;
}

template <typename T>
static void launch_chunk_copy(tp_stream s, T *dst, const T *src, int64_t n, const chunking &c, int64_t first,
                              bool gather)
{
    TP_LAUNCH(chunk_copy_kernel<T>, tp_elementwise_blocks(n, RESHARD_THREADS), RESHARD_THREADS, 0, s, dst, src, n,
              c.outer, c.run, c.slab, first, gather);
}

// `first`: the element of each slab the first block starts at
static void chunk_copy(tp_stream s, tp_kernel_dtype t, void *dst, const void *src, int64_t n, const chunking &c,
                       int64_t first, bool gather)
{
    if (n == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_chunk_copy(s, (float *)dst, (const float *)src, n, c, first, gather);
    else
        launch_chunk_copy(s, (__nv_bfloat16 *)dst, (const __nv_bfloat16 *)src, n, c, first, gather);
}

// torch.chunk(x, parts, dim)[index] for an even split
extern "C" void tp_k_slice(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const int64_t *shape, int rank,
                           int dim, int index, int parts)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    const chunking c = measure(shape, rank, &dim, parts);
    TP_KCHECK(index >= 0 && index < parts, "chunk index within parts");
    chunk_copy(s, t, out, x, c.outer * c.run, c, index * c.run, true);
}

// x.narrow(dim, start, length)
extern "C" void tp_k_narrow(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const int64_t *shape, int rank,
                            int dim, int64_t start, int64_t length)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    chunking c = measure(shape, rank, &dim, 1);
    TP_KCHECK(start >= 0 && length >= 0 && start + length <= shape[dim], "the range inside the dimension");
    const int64_t inner = shape[dim] ? c.slab / shape[dim] : 0;
    c.run = length * inner;
    chunk_copy(s, t, out, x, c.outer * c.run, c, start * inner, true);
}

template <typename T>
static void launch_narrow_grad(tp_stream s, T *out, const T *dy, int64_t n, int64_t len, int64_t inner, int64_t start,
                               int64_t length)
{
    TP_LAUNCH(narrow_grad_kernel<T>, tp_elementwise_blocks(n, RESHARD_THREADS), RESHARD_THREADS, 0, s, out, dy, n, len,
              inner, start, length);
}

// out (shape) = zeros with dy at [start, start + length) along dim
extern "C" void tp_k_narrow_grad(tp_stream s, tp_kernel_dtype t, void *out, const void *dy, const int64_t *shape,
                                 int rank, int dim, int64_t start, int64_t length)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    const chunking c = measure(shape, rank, &dim, 1);
    TP_KCHECK(start >= 0 && length >= 0 && start + length <= shape[dim], "the range inside the dimension");
    if (c.total == 0)
        return;
    const int64_t inner = c.slab / shape[dim];
    if (t == TP_KERNEL_F32)
        launch_narrow_grad(s, (float *)out, (const float *)dy, c.total, shape[dim], inner, start, length);
    else
        launch_narrow_grad(s, (__nv_bfloat16 *)out, (const __nv_bfloat16 *)dy, c.total, shape[dim], inner, start,
                           length);
}

// the parts chunks of x one after another
extern "C" void tp_k_split_blocks(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const int64_t *shape,
                                  int rank, int dim, int parts)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    const chunking c = measure(shape, rank, &dim, parts);
    chunk_copy(s, t, out, x, c.total, c, 0, true);
}

// the inverse: `shape` is the joined tensor's; block p becomes its chunk p
extern "C" void tp_k_join_blocks(tp_stream s, tp_kernel_dtype t, void *out, const void *blocks, const int64_t *shape,
                                 int rank, int dim, int parts)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    const chunking c = measure(shape, rank, &dim, parts);
    chunk_copy(s, t, out, blocks, c.total, c, 0, false);
}

// out[i, j] = pos_offset + j for a [b, s] tensor; a sequence shard passes
// pos_offset = rank * s
extern "C" void tp_k_positions(tp_stream st, int32_t *out, int64_t b, int64_t s, int64_t pos_offset,
                               const int32_t *segments)
{
    TP_KCHECK(b >= 0 && s >= 0 && pos_offset >= 0 && pos_offset + s <= INT32_MAX, "positions fit in int32");
    if (b * s == 0)
        return;
    if (segments)
        TP_LAUNCH(document_positions_kernel, tp_elementwise_blocks(b, RESHARD_THREADS), RESHARD_THREADS, 0, st, out,
                  segments, b, s, pos_offset);
    else
        TP_LAUNCH(positions_kernel, tp_elementwise_blocks(b * s, RESHARD_THREADS), RESHARD_THREADS, 0, st, out, b * s, s,
              pos_offset);
}
