// norms_grad.cu: the gradients of RMSNorm and LayerNorm, and column sums
// (a bias's gradient).
// defines: tp_k_rmsnorm_dx, tp_k_rmsnorm_dw, tp_k_layernorm_dx, tp_k_layernorm_dw, tp_k_sum_rows
#include "norms.cuh"

// Column sums: a block takes COL_WIDTH (32, launch_limits.h) columns, its
// threads COL_LANES rows each (rows lane, lane + COL_LANES, ...), and adds
// the lanes' partials in lane order: a fixed tree, so the sums do not
// depend on the schedule.
#define COL_LANES 16

// ---- CUDA kernels

// One block per row. With w' = w (or 1 + w with unit_offset), y = x r w',
// r = 1 / sqrt(mean(x^2) + eps):
//   dx = r w' dy - x r^3 / n * sum(dy w' x)
// With add, dx = add + that dx rounded to T: what the add op after an
// unfused rmsnorm_dx computes, so -O0 and -O1 agree bit for bit.
template <typename T>
__global__ void rmsnorm_dx_kernel(T *dx, const T *x, const T *dy, const T *w, int64_t n, float eps, bool unit_offset,
                                  const T *add)
{
    const float offset = unit_offset ? 1.0f : 0.0f;
    const int64_t row = (int64_t)blockIdx.x * n;
    const float r = tp_row_rms_inv(x + row, n, eps);
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        dot += tp_to_float(dy[row + j]) * (offset + tp_to_float(w[j])) * tp_to_float(x[row + j]);
    const float c = tp_block_sum(dot) * r * r * r / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float g = tp_to_float(dy[row + j]) * (offset + tp_to_float(w[j]));
        const T d = tp_from_float<T>(r * g - c * tp_to_float(x[row + j]));
        dx[row + j] = add ? tp_from_float<T>(tp_to_float(add[row + j]) + tp_to_float(d)) : d;
    }
}

// One block per row. With x^ = (x - mean) r and g = dy w:
//   dx = r (g - mean(g) - x^ mean(g x^))
template <typename T>
__global__ void layernorm_dx_kernel(T *dx, const T *x, const T *dy, const T *w, int64_t n, float eps)
{
    const int64_t row = (int64_t)blockIdx.x * n;
    float mean;
    const float r = tp_row_mean_inv(x + row, n, eps, &mean);
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float g = tp_to_float(dy[row + j]) * tp_to_float(w[j]);
        sg += g;
        sgx += g * (tp_to_float(x[row + j]) - mean) * r;
    }
    const float mg = tp_block_sum(sg) / (float)n, mgx = tp_block_sum(sgx) / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float g = tp_to_float(dy[row + j]) * tp_to_float(w[j]);
        const float xh = (tp_to_float(x[row + j]) - mean) * r;
        dx[row + j] = tp_from_float<T>(r * (g - mg - xh * mgx));
    }
}

// One block per row: the row's statistics for the weight gradients, the
// same bits the forward computed: r at stats[i] (RMSNorm), and the mean
// at stats[m + i] (LayerNorm).
template <typename T> __global__ void norm_stats_kernel(float *stats, const T *x, int64_t m, int64_t n, float eps,
                                                        bool layernorm)
{
    const int64_t i = blockIdx.x;
    float mean = 0.0f;
    const float r = layernorm ? tp_row_mean_inv(x + i * n, n, eps, &mean) : tp_row_rms_inv(x + i * n, n, eps);
    if (threadIdx.x == 0) {
        stats[i] = r;
        if (layernorm)
            stats[m + i] = mean;
    }
}

// What a column sum adds at (i, j): x itself (sum_rows), or dy times the
// normalised x (the weights' gradients, from the row statistics above).
template <typename T> struct plain_term {
    typedef T type; // of the column sums
    const T *x;
    __device__ float operator()(int64_t i, int64_t j, int64_t n) const { return tp_to_float(x[i * n + j]); }
};
template <typename T> struct normed_term {
    typedef T type;
    const T *x, *dy;
    const float *stats; // r[m], then the means (LayerNorm)
    int64_t m;
    bool stats_has_mean;
    __device__ float operator()(int64_t i, int64_t j, int64_t n) const
    {
        const float mean = stats_has_mean ? stats[m + i] : 0.0f;
        return tp_to_float(dy[i * n + j]) * (tp_to_float(x[i * n + j]) - mean) * stats[i];
    }
};

// out[j] = scale * sum over i < m of term(i, j)
template <typename Term>
__global__ void __launch_bounds__(COL_WIDTH * COL_LANES)
    column_sum_kernel(typename Term::type *out, Term term, int64_t m, int64_t n, float scale)
{
    TP_SHARED(float, partial, COL_WIDTH * COL_LANES);
    const int col = threadIdx.x % COL_WIDTH, lane = threadIdx.x / COL_WIDTH;
    const int64_t j = (int64_t)blockIdx.x * COL_WIDTH + col;
    float acc = 0.0f;
    if (j < n)
        for (int64_t i = lane; i < m; i += COL_LANES)
            acc += term(i, j, n);
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (lane == 0 && j < n) {
        float total = 0.0f;
        for (int l = 0; l < COL_LANES; l++)
            total += partial[l * COL_WIDTH + col];
        out[j] = tp_from_float<typename Term::type>(scale * total);
    }
}

// ---- kernel launchers

template <typename Term>
static void launch_column_sum(tp_stream s, typename Term::type *out, const Term &term, int64_t m, int64_t n,
                              float scale)
{
    TP_LAUNCH(column_sum_kernel<Term>, (unsigned)TP_CEIL_DIV(n, COL_WIDTH), COL_WIDTH * COL_LANES, 0, s, out,
              term, m, n, scale);
}

static void check_rows(tp_kernel_dtype t, int64_t m, int64_t n)
{
    TP_KCHECK(tp_dtype_ok(t), "unknown dtype");
    TP_KCHECK(n > 0 && m >= 0, "rows of at least one element");
    TP_KCHECK(m <= TP_CUDA_MAX_ROWS && n <= TP_CUDA_MAX_NORM_COLS,
              "one block per row and per COL_WIDTH columns: at most 2^31-1 of each");
}

template <typename T>
static void launch_norm_dw(tp_stream s, T *dw, const T *x, const T *dy, float *stats, int64_t m, int64_t n, float eps,
                           bool layernorm)
{
    if (m > 0)
        TP_LAUNCH(norm_stats_kernel<T>, (unsigned)m, tp_rows_threads(n), 0, s, stats, x, m, n, eps, layernorm);
    launch_column_sum(s, dw, normed_term<T>{x, dy, stats, m, layernorm}, m, n, 1.0f);
}

static void norm_dw(tp_stream s, tp_kernel_dtype t, void *dw, const void *x, const void *dy, float *stats, int64_t m,
                    int64_t n, float eps, bool layernorm)
{
    check_rows(t, m, n);
    if (t == TP_KERNEL_F32)
        launch_norm_dw(s, (float *)dw, (const float *)x, (const float *)dy, stats, m, n, eps, layernorm);
    else
        launch_norm_dw(s, (__nv_bfloat16 *)dw, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)dy, stats, m, n,
                       eps, layernorm);
}

extern "C" void tp_k_rmsnorm_dw(tp_stream s, tp_kernel_dtype t, void *dw, const void *x, const void *dy, float *scratch,
                                int64_t m, int64_t n, float eps)
{
    norm_dw(s, t, dw, x, dy, scratch, m, n, eps, false);
}

extern "C" void tp_k_layernorm_dw(tp_stream s, tp_kernel_dtype t, void *dw, const void *x, const void *dy,
                                  float *scratch, int64_t m, int64_t n, float eps)
{
    norm_dw(s, t, dw, x, dy, scratch, m, n, eps, true);
}

extern "C" void tp_k_sum_rows(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t m, int64_t n,
                              float scale)
{
    check_rows(t, m, n);
    if (t == TP_KERNEL_F32)
        launch_column_sum(s, (float *)out, plain_term<float>{(const float *)x}, m, n, scale);
    else
        launch_column_sum(s, (__nv_bfloat16 *)out, plain_term<__nv_bfloat16>{(const __nv_bfloat16 *)x}, m, n, scale);
}

template <typename T>
static void launch_rmsnorm_dx(tp_stream s, T *dx, const T *x, const T *dy, const T *w, int64_t m, int64_t n, float eps,
                              bool unit_offset, const T *add)
{
    TP_LAUNCH(rmsnorm_dx_kernel<T>, (unsigned)m, tp_rows_threads(n), 0, s, dx, x, dy, w, n, eps, unit_offset, add);
}

extern "C" void tp_k_rmsnorm_dx(tp_stream s, tp_kernel_dtype t, void *dx, const void *x, const void *dy, const void *w,
                                int64_t m, int64_t n, float eps, bool unit_offset, const void *add)
{
    check_rows(t, m, n);
    if (m == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_rmsnorm_dx(s, (float *)dx, (const float *)x, (const float *)dy, (const float *)w, m, n, eps,
                          unit_offset, (const float *)add);
    else
        launch_rmsnorm_dx(s, (__nv_bfloat16 *)dx, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)dy,
                          (const __nv_bfloat16 *)w, m, n, eps, unit_offset, (const __nv_bfloat16 *)add);
}

template <typename T>
static void launch_layernorm_dx(tp_stream s, T *dx, const T *x, const T *dy, const T *w, int64_t m, int64_t n,
                                float eps)
{
    TP_LAUNCH(layernorm_dx_kernel<T>, (unsigned)m, tp_rows_threads(n), 0, s, dx, x, dy, w, n, eps);
}

extern "C" void tp_k_layernorm_dx(tp_stream s, tp_kernel_dtype t, void *dx, const void *x, const void *dy,
                                  const void *w, int64_t m, int64_t n, float eps)
{
    check_rows(t, m, n);
    if (m == 0)
        return;
    if (t == TP_KERNEL_F32)
        launch_layernorm_dx(s, (float *)dx, (const float *)x, (const float *)dy, (const float *)w, m, n, eps);
    else
        launch_layernorm_dx(s, (__nv_bfloat16 *)dx, (const __nv_bfloat16 *)x, (const __nv_bfloat16 *)dy,
                            (const __nv_bfloat16 *)w, m, n, eps);
}
