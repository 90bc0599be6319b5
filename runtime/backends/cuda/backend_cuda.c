/* backend_cuda.c: the CUDA backend — the kernels of runtime/kernels/ and
 * cuBLAS, on one compute stream of one device per process.
 *
 * The table is backend_cpu's: the executor cannot tell them apart. Memory
 * (the arena, the weight region, the staging buffers) is device memory.
 * Kernels and GEMMs are queued on the compute stream and never waited for,
 * except by to_device / to_host (host data crosses there) and synchronize;
 * the NCCL communicator (comm_nccl.c) orders its stream after this one with
 * events. Storage is the schedule's dtype: fp32, or bf16 with fp32
 * accumulation (the kernels accumulate in fp32; cuBLAS computes
 * CUBLAS_COMPUTE_32F). The executor converts host data to and from bf16, so
 * to_device/to_host move bytes.
 *
 * Every CUDA and cuBLAS call is checked (backend_cuda.h); a failure names
 * the rank, the schedule op running, the call, and where it is, then ends
 * the job. Kernel faults are asynchronous and surface at the next checked
 * call that waits; TPRUN_CUDA_SYNC=1 synchronises after every backend call
 * so a fault is reported with the op that caused it. */
#include "runtime/backends/cuda/backend_cuda.h"
#include "runtime/kernels/launch_limits.h"
#include "sched/workspace.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tp_gpu tp_gpu_ctx = {.op_index = -1};
static tp_gpu *const gpu = &tp_gpu_ctx;     /* the context, in this file */

/* ------------------------------------------------------------------------ */
/* reporting                                                                 */
/* ------------------------------------------------------------------------ */

const char *tp_gpu_rank_prefix(void) { return gpu->prefix; }

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* " in op 12 (matmul in 'model.layers.0.mlp.up_proj', plan entry ...)",
 * the executor's way of naming an op, or "" outside the forward pass */
static void describe_op(char *buf, size_t len)
{
    if (gpu->op_index < 0 || !gpu->op_kind) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, len, " in op %d (%s in '%s'%s%s)", gpu->op_index, gpu->op_kind,
             gpu->op_module && gpu->op_module[0] ? gpu->op_module : "(root)", gpu->op_entry ? ", plan entry " : "",
             gpu->op_entry ? gpu->op_entry : "");
}

/* "<lib> error[ in op ...]: <call> failed: <message> [file:line function]" */
static void format_check(char *buf, size_t len, bool with_op, const char *lib, const char *expr, const char *func,
                         const char *file, int line, const char *msg)
{
    char op[600] = "";
    if (with_op)
        describe_op(op, sizeof op);
    snprintf(buf, len, "%s error%s: %s failed: %s [%s:%d %s]", lib, op, expr, msg, basename_of(file), line, func);
}

/* Returned errors: the caller (tprun, the executor) adds the rank and op. */
int tp_gpu_format(char *err, size_t errlen, const char *lib, const char *expr, const char *func, const char *file,
                  int line, const char *msg)
{
    format_check(err, errlen, false, lib, expr, func, file, line, msg);
    return -1;
}

_Noreturn void tp_gpu_fatal(const char *lib, const char *expr, const char *func, const char *file, int line,
                            const char *msg)
{
    char text[1500];
    format_check(text, sizeof text, true, lib, expr, func, file, line, msg);
    fprintf(stderr, "tprun: %s%s\n", tp_gpu_rank_prefix(), text);
    if (!strcmp(lib, "CUDA") && !gpu->sync_each)
        fprintf(stderr, "tprun: %skernel errors surface at the next call that waits; rerun with TPRUN_CUDA_SYNC=1 "
                        "to check after every op\n", tp_gpu_rank_prefix());
    fflush(NULL);
    if (gpu->on_fatal) {
        void (*hook)(void *) = gpu->on_fatal;
        gpu->on_fatal = NULL;     /* a failure inside the hook must not recurse */
        hook(gpu->on_fatal_ctx);
    }
    abort();
}

/* After every backend call: nothing, or with TPRUN_CUDA_SYNC=1 wait and
 * check, so an asynchronous kernel fault is blamed on the right op. */
static void done(void)
{
    if (gpu->sync_each)
        TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream));
}

/* ------------------------------------------------------------------------ */
/* devices                                                                   */
/* ------------------------------------------------------------------------ */

/* The usable devices' indices into list (up to max), how many there are,
 * and otherwise why none. A failed query is an answer here, not an error:
 * the CUDA runtime's message says why (insufficient driver: no libcuda.so;
 * no device). The kernels are built for sm_80 and sm_90 (plus sm_90 PTX for
 * newer GPUs): older devices are not counted. */
static int usable_devices(int *list, int max, char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "%s", cudaGetErrorString(e));
        (void)cudaGetLastError();      /* not sticky; leave no trace */
        return 0;
    }
    if (n == 0)
        snprintf(why, whylen, "the CUDA runtime reports no device");
    int usable = 0;
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        if (p.major < 8) {
            snprintf(why, whylen, "device %d (%s) is sm_%d%d; tprun's kernels need sm_80 or newer", d, p.name, p.major,
                     p.minor);
            continue;
        }
        if (usable < max)
            list[usable] = d;
        usable++;
    }
    return usable;
}

/* Linked in directly (tprun_emulated), the CUDA runtime it links answers
 * for itself in tp_gpu_count. */
bool tp_gpu_driver_present(void) { return true; }

int tp_gpu_count(char *why, size_t whylen) { return usable_devices(NULL, 0, why, whylen); }

int tp_gpu_init(const tp_comm *host, int device, char *err, size_t errlen)
{
    gpu->rank = host->rank;
    gpu->world = host->world;
    if (gpu->world > 1)     /* once: the watchdog thread reads it too */
        snprintf(gpu->prefix, sizeof gpu->prefix, "rank %d: ", gpu->rank);
    gpu->op_index = -1;
    char why[400];
    int devices[64];
    int n = usable_devices(devices, 64, why, sizeof why);
    if (n > 64)
        n = 64;
    if (n <= 0) {
        snprintf(err, errlen, "no CUDA device: %s (driver not found / no GPU)", why);
        return -1;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "no usable CUDA device %d on %s: it shows %d", device, host->node.host, n);
        return -1;
    }
    gpu->device = devices[device];
    const char *sync = getenv("TPRUN_CUDA_SYNC");
    gpu->sync_each = sync && *sync && strcmp(sync, "0");
    TP_CUDA_TRY(cudaSetDevice(gpu->device));
    TP_CUDA_TRY(cudaStreamCreateWithFlags(&gpu->stream, cudaStreamNonBlocking));
    TP_CUBLAS_TRY(cublasCreate(&gpu->blas));
    TP_CUBLAS_TRY(cublasSetStream(gpu->blas, gpu->stream));
    /* fp32 GEMMs stay fp32 (no TF32): the CPU twin is matched to 1e-4 */
    TP_CUBLAS_TRY(cublasSetMathMode(gpu->blas, CUBLAS_DEFAULT_MATH));
    gpu->blas_workspace_bytes = (size_t)TP_CUDA_BLAS_WORKSPACE_BYTES;
    TP_CUDA_TRY(cudaMalloc(&gpu->blas_workspace, gpu->blas_workspace_bytes));
    TP_CUBLAS_TRY(cublasSetWorkspace(gpu->blas, gpu->blas_workspace, gpu->blas_workspace_bytes));
    gpu->ready = true;
    return 0;
}

int tp_gpu_bus_id(char *id, size_t idlen, char *err, size_t errlen)
{
    TP_CUDA_TRY(cudaDeviceGetPCIBusId(id, (int)idlen, gpu->device));
    return 0;
}

void tp_gpu_shutdown(void)
{
    if (!gpu->ready)
        return;
    gpu->ready = false;
    gpu->op_index = -1;
    TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream));
    TP_CUBLAS_CHECK(cublasDestroy(gpu->blas));
    TP_CUDA_CHECK(cudaFree(gpu->blas_workspace));
    if (gpu->scratch)
        TP_CUDA_CHECK(cudaFree(gpu->scratch));
    gpu->scratch = NULL;
    gpu->scratch_bytes = 0;
    TP_CUDA_CHECK(cudaStreamDestroy(gpu->stream));
}

/* ------------------------------------------------------------------------ */
/* memory                                                                    */
/* ------------------------------------------------------------------------ */

static size_t elem_size(void) { return tp_dtype_size(gpu->dtype); }

/* Zeroed, as the table promises (cudaMalloc's memory is not). An
 * out-of-memory failure is the table's NULL: the executor reports it with
 * the sizes it asked for. */
static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    if (!bytes)
        bytes = 1;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    TP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, gpu->stream));
    return p;
}

static void cuda_release(void *p)
{
    if (p)
        TP_CUDA_CHECK(cudaFree(p));
}

/* The loader's staging buffer: pinned, so copies from it run at the bus's
 * rate without the driver's own bounce buffer. NULL when the driver
 * cannot pin that much (the loader reports it). */
static void *cuda_alloc_staging(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_release_staging(void *p)
{
    if (p)
        TP_CUDA_CHECK(cudaFreeHost(p));
}

/* Host data crosses here, from and into pageable memory the caller owns:
 * copy on the compute stream (after everything queued before) and wait, so
 * the caller may reuse its buffer — and, for to_host, so the results of the
 * forward pass, collectives included, are there. */
static void cuda_to_device(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, gpu->stream));
    TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream));
}

static void cuda_to_host(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gpu->stream));
    TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream));
}

/* Within device memory: queued, not waited for. The executor's copies
 * never overlap (the memory plan keeps an op's output off its inputs). */
static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src)
        return;
    TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, gpu->stream));
    done();
}

static void cuda_synchronize(void) { TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream)); }

static void cuda_begin_op(int index, const char *kind, const char *module, const char *entry)
{
    gpu->op_index = index;
    gpu->op_kind = kind;
    gpu->op_module = module;
    gpu->op_entry = entry;
}

/* ------------------------------------------------------------------------ */
/* linear algebra: cuBLAS                                                    */
/* ------------------------------------------------------------------------ */

/* One column-major GEMM C[M, N] = op(A)[M, K] . op(B)[K, N] with leading
 * dimensions lda, ldb, ldc. fp32: cublasSgemm in fp32 (CUBLAS_DEFAULT_MATH,
 * no TF32). bf16: bf16 operands and output, fp32 accumulation
 * (CUBLAS_COMPUTE_32F). K = 0 is an empty sum: C is zeroed. */
static void blas_gemm(cublasOperation_t op_a, cublasOperation_t op_b, int64_t M, int64_t N, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    TP_GPU_ASSERT(M >= 0 && N >= 0 && K >= 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX);
    TP_GPU_ASSERT(lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX);
    if (M == 0 || N == 0)
        return;
    if (K == 0) {
        TP_CUDA_CHECK(cudaMemsetAsync(C, 0, (size_t)(M * N) * elem_size(), gpu->stream));
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    if (gpu->dtype == TP_BF16)
        TP_CUBLAS_CHECK(cublasGemmEx(gpu->blas, op_a, op_b, (int)M, (int)N, (int)K, &one, A, CUDA_R_16BF, (int)lda, B,
                                     CUDA_R_16BF, (int)ldb, &zero, C, CUDA_R_16BF, (int)ldc, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
    else
        TP_CUBLAS_CHECK(cublasSgemm(gpu->blas, op_a, op_b, (int)M, (int)N, (int)K, &one, A, (int)lda, B, (int)ldb,
                                    &zero, C, (int)ldc));
    done();
}

/* cuBLAS is column-major: a row-major [r, c] matrix is a column-major
 * [c, r] one, so each row-major product is computed transposed.
 *
 * nn.Linear, out[m, n] = x[m, k] . w[n, k]^T: out^T[n, m] = w . x^T with w
 * read transposed: gemm(OP_T, OP_N, n, m, k, w (ld k), x (ld k), out (ld n)). */
static void cuda_matmul(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k)
{
    blas_gemm(CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, w, k, x, k, out, n);
}

/* transformers' Conv1D stores w [k, n], a column-major [n, k]: read as it is,
 *   gemm(OP_N, OP_N, n, m, k, w (ld n), x (ld k), out (ld n)). */
static void cuda_conv1d(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k)
{
    blas_gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, w, n, x, k, out, n);
}

/* A weight's gradient, out[n, k] = a[m, n]^T . b[m, k]: out^T[k, n] =
 * b^T . a, where b is a column-major [k, m] (ld k) and a a column-major
 * [n, m] (ld n) read transposed:
 *   gemm(OP_N, OP_T, k, n, m, b (ld k), a (ld n), out (ld k)). */
static void cuda_matmul_tn(float *out, const float *a, const float *b, int64_t m, int64_t n, int64_t k)
{
    blas_gemm(CUBLAS_OP_N, CUBLAS_OP_T, k, n, m, b, k, a, n, out, k);
}

/* ------------------------------------------------------------------------ */
/* kernels: one launcher each, runtime/kernels/<family>.cu                  */
/* ------------------------------------------------------------------------ */

/* the compute stream, as the launchers take it */
static tp_stream compute_stream(void) { return (tp_stream)gpu->stream; }

static void cuda_embedding(float *out, const int32_t *ids, int64_t ntok, const float *w, int64_t rows, int64_t dim,
                           int64_t vocab_start, bool masked)
{
    tp_k_embedding(compute_stream(), gpu->kdt, out, ids, ntok, w, rows, dim, vocab_start, masked);
    done();
}

static void cuda_bias_add(float *out, const float *x, const float *b, int64_t m, int64_t n, float scale)
{
    tp_k_bias_add(compute_stream(), gpu->kdt, out, x, b, m, n, scale);
    done();
}

static void cuda_rmsnorm(float *out, const float *x, const float *w, int64_t m, int64_t n, float eps, bool unit_offset)
{
    tp_k_rmsnorm(compute_stream(), gpu->kdt, out, x, w, m, n, eps, unit_offset);
    done();
}

static void cuda_add_rmsnorm(float *s, float *out, const float *a, const float *b, const float *w, int64_t m, int64_t n,
                             float eps, bool unit_offset)
{
    tp_k_add_rmsnorm(compute_stream(), gpu->kdt, s, out, a, b, w, m, n, eps, unit_offset);
    done();
}

static void cuda_layernorm(float *out, const float *x, const float *w, const float *b, int64_t m, int64_t n, float eps)
{
    tp_k_layernorm(compute_stream(), gpu->kdt, out, x, w, b, m, n, eps);
    done();
}

static void cuda_rope(float *out, const float *x, int64_t b, int64_t s, int64_t h, int64_t d, int64_t rotary,
                      int64_t pos_offset, const double *inv_freq, double scale, const int32_t *pos)
{
    tp_k_rope(compute_stream(), gpu->kdt, out, x, b, s, h, d, rotary, pos_offset, inv_freq, scale, pos);
    done();
}

/* tp_k_unary's and tp_k_unary_grad's op numbers (kernels.h) */
static int kernel_unary(tp_unary op)
{
    int kop = op == TP_UNARY_SILU ? 0 : op == TP_UNARY_GELU_TANH ? 1 : op == TP_UNARY_RELU ? 2
            : op == TP_UNARY_GELU_ERF ? 3 : -1;
    TP_GPU_ASSERT(kop >= 0);
    return kop;
}

static void cuda_unary(tp_unary op, float *out, const float *x, int64_t n)
{
    tp_k_unary(compute_stream(), gpu->kdt, kernel_unary(op), out, x, n);
    done();
}

static void cuda_bias_unary(tp_unary op, float *h, float *out, const float *x, const float *b, int64_t m, int64_t n,
                            float scale)
{
    tp_k_bias_unary(compute_stream(), gpu->kdt, kernel_unary(op), h, out, x, b, m, n, scale);
    done();
}

static void cuda_binary(tp_binary op, float *out, const float *a, int64_t n, const float *b, int64_t nb)
{
    int kop = op == TP_BINARY_ADD ? 0 : op == TP_BINARY_MUL ? 1 : -1;   /* kernels.h */
    TP_GPU_ASSERT(kop >= 0);
    tp_k_binary(compute_stream(), gpu->kdt, kop, out, a, n, b, nb);
    done();
}

static void cuda_silu_mul(float *out, const float *a, const float *b, int64_t n)
{
    tp_k_silu_mul(compute_stream(), gpu->kdt, out, a, b, n);
    done();
}

static void cuda_scale(float *out, const float *x, int64_t n, float s)
{
    tp_k_scale(compute_stream(), gpu->kdt, out, x, n, s);
    done();
}

static void cuda_softcap(float *out, const float *x, int64_t n, float cap)
{
    tp_k_softcap(compute_stream(), gpu->kdt, out, x, n, cap);
    done();
}

static void cuda_slice(float *out, const float *x, const int64_t *shape, int rank, int dim, int index, int parts)
{
    tp_k_slice(compute_stream(), gpu->kdt, out, x, shape, rank, dim, index, parts);
    done();
}

static void cuda_narrow(float *out, const float *x, const int64_t *shape, int rank, int dim, int64_t start,
                        int64_t length)
{
    tp_k_narrow(compute_stream(), gpu->kdt, out, x, shape, rank, dim, start, length);
    done();
}

static void cuda_split_blocks(float *out, const float *x, const int64_t *shape, int rank, int dim, int parts)
{
    tp_k_split_blocks(compute_stream(), gpu->kdt, out, x, shape, rank, dim, parts);
    done();
}

static void cuda_join_blocks(float *out, const float *blocks, const int64_t *shape, int rank, int dim, int parts)
{
    tp_k_join_blocks(compute_stream(), gpu->kdt, out, blocks, shape, rank, dim, parts);
    done();
}

static void cuda_positions(int32_t *out, int64_t b, int64_t s, int64_t pos_offset, const int32_t *segments)
{
    tp_k_positions(compute_stream(), out, b, s, pos_offset, segments);
    done();
}

/* The loss and its pieces are float32 whatever the dtype (backend.h);
 * only the logits are in the storage dtype. */
static void cuda_cross_entropy(float *loss, const float *logits, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                               int64_t vocab, tp_ce_rule rule)
{
    tp_k_cross_entropy(compute_stream(), gpu->kdt, loss, logits, labels, b, s, v, vocab, rule.shift,
                       (float)rule.divisor);
    done();
}

static void cuda_ce_max(float *out, const float *logits, int64_t rows, int64_t v, int64_t vocab_start, int64_t vocab)
{
    tp_k_ce_max(compute_stream(), gpu->kdt, out, logits, rows, v, vocab_start, vocab);
    done();
}

static void cuda_ce_sumexp(float *out, const float *logits, const float *max, int64_t rows, int64_t v,
                           int64_t vocab_start, int64_t vocab)
{
    tp_k_ce_sumexp(compute_stream(), gpu->kdt, out, logits, max, rows, v, vocab_start, vocab);
    done();
}

static void cuda_ce_target(float *out, const float *logits, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                           int64_t vocab_start, tp_ce_rule rule)
{
    tp_k_ce_target(compute_stream(), gpu->kdt, out, logits, labels, b, s, v, vocab_start, rule.shift);
    done();
}

static void cuda_ce_loss(float *loss, const float *sumexp, const float *max, const float *target, const int32_t *labels,
                         int64_t b, int64_t s, tp_ce_rule rule)
{
    tp_k_ce_loss(compute_stream(), loss, sumexp, max, target, labels, b, s, rule.shift, (float)rule.divisor);
    done();
}

/* ------------------------------------------------------------------------ */
/* training: the backward kernels and the optimizer                          */
/* ------------------------------------------------------------------------ */

/* The scratch a launcher asks for (sizes: sched/workspace.h, which tpcc
 * --report counts), grown to the largest request and kept: a training
 * schedule's first step sizes it, a forward schedule never allocates it.
 * The old buffer is freed only once the work queued before, which may
 * read it, is done. */
static void *scratch(size_t bytes)
{
    if (bytes > gpu->scratch_bytes) {
        if (gpu->scratch) {
            TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream));
            TP_CUDA_CHECK(cudaFree(gpu->scratch));
        }
        gpu->scratch = NULL;
        gpu->scratch_bytes = 0;
        TP_CUDA_CHECK(cudaMalloc(&gpu->scratch, bytes));
        gpu->scratch_bytes = bytes;
    }
    return gpu->scratch;
}

static float *scratch_floats(int64_t n)
{
    TP_GPU_ASSERT(n >= 0);
    return scratch((size_t)(n > 0 ? n : 1) * sizeof(float));
}

static void cuda_ones(float *out, int64_t n)
{
    tp_k_ones(compute_stream(), gpu->kdt, out, n);
    done();
}

static void cuda_sum_rows(float *out, const float *x, int64_t m, int64_t n, float scale)
{
    tp_k_sum_rows(compute_stream(), gpu->kdt, out, x, m, n, scale);
    done();
}

static void cuda_rmsnorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps,
                            bool unit_offset, const float *add)
{
    tp_k_rmsnorm_dx(compute_stream(), gpu->kdt, dx, x, dy, w, m, n, eps, unit_offset, add);
    done();
}

static void cuda_rmsnorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    float *stats = scratch_floats(tp_cuda_norm_grad_scratch(false, m));
    tp_k_rmsnorm_dw(compute_stream(), gpu->kdt, dw, x, dy, stats, m, n, eps);
    done();
}

static void cuda_layernorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n,
                              float eps)
{
    tp_k_layernorm_dx(compute_stream(), gpu->kdt, dx, x, dy, w, m, n, eps);
    done();
}

static void cuda_layernorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps)
{
    float *stats = scratch_floats(tp_cuda_norm_grad_scratch(true, m));
    tp_k_layernorm_dw(compute_stream(), gpu->kdt, dw, x, dy, stats, m, n, eps);
    done();
}

/* rope_attention's rotation on this backend where it cannot run inside
 * attention (tp_cuda_rope_in_attention): q and k rotated by the rope
 * kernel into scratch (at `at`, tp_cuda_rotated_copies_floats' first
 * half), which attention then reads: the very computation of the three
 * ops, so -O1's fusion changes no bit. *q and *k are pointed at them. */
static void rotate_q_k(float *at, const float **q, const float **k, int64_t b, int64_t s, int64_t h, int64_t g,
                       int64_t d, const tp_rope_args *rope)
{
    float *qr = at, *kr = at + tp_cuda_scratch_part(gpu->kdt == TP_KERNEL_BF16, b * s * h * d);
    tp_k_rope(compute_stream(), gpu->kdt, qr, *q, b, s, h, d, rope->rotary, rope->pos_offset, rope->inv_freq,
              rope->scale, rope->pos);
    tp_k_rope(compute_stream(), gpu->kdt, kr, *k, b, s, g, d, rope->rotary, rope->pos_offset, rope->inv_freq,
              rope->scale, rope->pos);
    *q = qr;
    *k = kr;
}

/* Where the rotation runs inside attention: its cos and sin into scratch
 * (at `at`), for the kernels to read; the same bits as rotate_q_k's. */
static tp_k_rope_in rope_table(float *at, int64_t b, int64_t s, const tp_rope_args *rope)
{
    tp_k_rope_table(compute_stream(), at, b, s, rope->rotary, rope->pos_offset, rope->inv_freq, rope->scale,
                    rope->pos);
    return (tp_k_rope_in){.table = at, .rotary = rope->rotary, .by_batch = rope->pos != NULL};
}

/* Whether the attention kernels rotate (tp_cuda_rope_in_attention) the
 * n operands `p`, which their tensor-core loads read 16 bytes at a time:
 * arena buffers always are; anything else takes the composition. */
static bool rope_in_attention(int64_t d, const tp_rope_args *rope, const void *const *p, int n)
{
    uintptr_t bits = 0;
    for (int i = 0; i < n; i++)
        bits |= (uintptr_t)p[i];
    return rope && tp_cuda_rope_in_attention(gpu->kdt == TP_KERNEL_BF16, d, rope->rotary) && bits % 16 == 0;
}

static void cuda_attention(float *out, float *lse, const float *q, const float *k, const float *v, int64_t b,
                           int64_t s, int64_t h, int64_t gk, int64_t d, double scale, double softcap,
                           const int32_t *segments, const tp_rope_args *rope)
{
    const void *operands[] = {out, q, k, v};
    const bool inside = rope_in_attention(d, rope, operands, 4);
    tp_k_rope_in in;
    if (inside)
        in = rope_table(scratch_floats(tp_cuda_rope_table_floats(b, s, rope->rotary)), b, s, rope);
    else if (rope)
        rotate_q_k(scratch_floats(tp_cuda_rotated_copies_floats(gpu->kdt == TP_KERNEL_BF16, b, s, h, gk, d, false)),
                   &q, &k, b, s, h, gk, d, rope);
    tp_k_attention(compute_stream(), gpu->kdt, out, lse, q, k, v, b, s, h, gk, d, (float)scale, (float)softcap,
                   segments, inside ? &in : NULL);
    done();
}

/* With rope, the scratch holds attention's gradient's, then the rope
 * table where the rotation runs inside attention; else q and k rotated
 * (rotate_q_k), then the gradients of the rotated ones, which rope's
 * inverse (inv_freq_back) turns into dq and dk. */
static void cuda_attention_grad(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                                const float *dy, const float *o, const float *lse, int64_t b, int64_t s, int64_t h,
                                int64_t g, int64_t d, double scale, double softcap, const int32_t *segments,
                                const tp_rope_args *rope)
{
    TP_GPU_ASSERT(b >= 0 && s >= 0 && h >= 0);
    if (!dq && !dk && !dv)
        return;
    const bool bf16 = gpu->kdt == TP_KERNEL_BF16;
    const void *operands[] = {dq, dk, dv, q, k, v, dy, o};
    const bool inside = rope_in_attention(d, rope, operands, 8);
    const int64_t own = tp_cuda_attention_grad_scratch(bf16, b, s, h, g, d);
    const int64_t grad_floats = rope ? tp_cuda_scratch_part(false, own) : own;
    const int64_t rope_floats = !rope ? 0
                                : inside ? tp_cuda_rope_table_floats(b, s, rope->rotary)
                                         : tp_cuda_rotated_copies_floats(bf16, b, s, h, g, d, true);
    float *scratch = scratch_floats(grad_floats + rope_floats);
    if (inside) {
        const tp_k_rope_in in = rope_table(scratch + grad_floats, b, s, rope);
        tp_k_attention_grad(compute_stream(), gpu->kdt, dq, dk, dv, q, k, v, dy, o, lse, scratch, b, s, h, g, d,
                            (float)scale, (float)softcap, segments, &in);
        done();
        return;
    }
    float *dq_out = dq, *dk_out = dk;
    if (rope) {
        rotate_q_k(scratch + grad_floats, &q, &k, b, s, h, g, d, rope);
        float *rotated_grads = scratch + grad_floats + tp_cuda_rotated_copies_floats(bf16, b, s, h, g, d, false);
        dq = dq ? rotated_grads : NULL;
        dk = dk ? rotated_grads + tp_cuda_scratch_part(bf16, b * s * h * d) : NULL;
    }
    tp_k_attention_grad(compute_stream(), gpu->kdt, dq, dk, dv, q, k, v, dy, o, lse, scratch, b, s, h, g, d,
                        (float)scale, (float)softcap, segments, NULL);
    if (rope && dq)
        tp_k_rope(compute_stream(), gpu->kdt, dq_out, dq, b, s, h, d, rope->rotary, rope->pos_offset,
                  rope->inv_freq_back, rope->scale, rope->pos);
    if (rope && dk)
        tp_k_rope(compute_stream(), gpu->kdt, dk_out, dk, b, s, g, d, rope->rotary, rope->pos_offset,
                  rope->inv_freq_back, rope->scale, rope->pos);
    done();
}

static void cuda_unary_grad(tp_unary op, float *dx, const float *x, const float *dy, int64_t n)
{
    tp_k_unary_grad(compute_stream(), gpu->kdt, kernel_unary(op), dx, x, dy, n);
    done();
}

static void cuda_silu_mul_grad(float *da, float *db, const float *a, const float *b, const float *dy, int64_t n)
{
    tp_k_silu_mul_grad(compute_stream(), gpu->kdt, da, db, a, b, dy, n);
    done();
}

static void cuda_softcap_grad(float *dx, const float *x, const float *dy, int64_t n, float cap)
{
    tp_k_softcap_grad(compute_stream(), gpu->kdt, dx, x, dy, n, cap);
    done();
}

static void cuda_embedding_grad(float *dw, const int32_t *ids, const float *dy, int64_t ntok, int64_t rows,
                                int64_t dim, int64_t vocab_start, bool masked)
{
    tp_k_embedding_grad(compute_stream(), gpu->kdt, dw, ids, dy, ntok, rows, dim, vocab_start, masked);
    done();
}

static void cuda_narrow_grad(float *out, const float *dy, const int64_t *shape, int rank, int dim, int64_t start,
                             int64_t length)
{
    tp_k_narrow_grad(compute_stream(), gpu->kdt, out, dy, shape, rank, dim, start, length);
    done();
}

static void cuda_cross_entropy_grad(float *dlogits, const float *logits, const int32_t *labels, int64_t b, int64_t s,
                                    int64_t v, int64_t vocab, tp_ce_rule rule)
{
    tp_k_cross_entropy_grad(compute_stream(), gpu->kdt, dlogits, logits, labels, b, s, v, vocab, rule.shift,
                            (float)rule.divisor);
    done();
}

/* max and sumexp are float32 (backend.h); the logits and their gradient
 * are in the storage dtype */
static void cuda_ce_grad(float *dlogits, const float *logits, const float *max, const float *sumexp,
                         const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab,
                         tp_ce_rule rule)
{
    tp_k_ce_grad(compute_stream(), gpu->kdt, dlogits, logits, max, sumexp, labels, b, s, v, vocab_start, vocab,
                 rule.shift, (float)rule.divisor);
    done();
}

static void cuda_adamw(const tp_adamw_part *parts, int nparts, float grad_scale, const tp_adamw_step *step)
{
    tp_k_adamw_parts(compute_stream(), gpu->kdt, parts, nparts, grad_scale, step->lr, step->beta1, step->beta2,
                     step->eps, step->weight_decay, step->step);
    done();
}

static void cuda_accumulate_grad(float *acc, float *g, int64_t n, tp_grad_accum phase)
{
    tp_k_accumulate_grad(compute_stream(), gpu->kdt, acc, g, n, (int)phase);
    done();
}

/* The host waits for the sum: clipping needs the norm before the update. */
static double cuda_sum_squares(const tp_run *runs, int nruns)
{
    double *sum = scratch((size_t)TP_CUDA_SUM_SQUARES_SCRATCH_BYTES), host = 0.0;
    tp_k_sum_squares(compute_stream(), gpu->kdt, sum, runs, nruns);
    TP_CUDA_CHECK(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, gpu->stream));
    TP_CUDA_CHECK(cudaStreamSynchronize(gpu->stream));
    return host;
}

/* ------------------------------------------------------------------------ */
/* the tables                                                                */
/* ------------------------------------------------------------------------ */

/* The kernels' limits (kernels/launch_limits.h), which tprun checks a schedule
 * against before it allocates anything. */
static const tp_backend_limits cuda_limits = {
    .rows = TP_CUDA_MAX_ROWS,
    .attn_seq = TP_CUDA_MAX_ATTN_SEQ,
    .attn_heads = TP_CUDA_MAX_ATTN_HEADS,
    .attn_batch = TP_CUDA_MAX_ATTN_BATCH,
    .head_dim = TP_CUDA_MAX_HEAD_DIM,
    .rotary_dim = TP_CUDA_MAX_ROTARY_DIM,
    .norm_cols = TP_CUDA_MAX_NORM_COLS,
    .embedding_grad_dim = TP_CUDA_MAX_EMBEDDING_GRAD_DIM,
};

/* One per storage dtype; the functions read the dtype from the context,
 * which tp_backend_cuda sets (one schedule per process). */
#define CUDA_TABLE(dt)                                                                                  \
    {                                                                                                   \
        .name = "cuda", .dtype = dt, .alloc = cuda_alloc, .release = cuda_release,                      \
        .to_device = cuda_to_device, .to_host = cuda_to_host, .copy = cuda_copy, .set_threads = NULL,   \
        .alloc_staging = cuda_alloc_staging, .release_staging = cuda_release_staging,                   \
        .synchronize = cuda_synchronize, .begin_op = cuda_begin_op, .limits = &cuda_limits,             \
        .embedding = cuda_embedding,                                                                    \
        .matmul = cuda_matmul, .conv1d = cuda_conv1d, .bias_add = cuda_bias_add, .rmsnorm = cuda_rmsnorm, \
        .bias_unary = cuda_bias_unary,                                                                  \
        .layernorm = cuda_layernorm, .rope = cuda_rope, .attention = cuda_attention, .unary = cuda_unary, \
        .binary = cuda_binary, .scale = cuda_scale, .softcap = cuda_softcap, .slice = cuda_slice,       \
        .narrow = cuda_narrow, .silu_mul = cuda_silu_mul, .add_rmsnorm = cuda_add_rmsnorm,              \
        .split_blocks = cuda_split_blocks, .join_blocks = cuda_join_blocks, .positions = cuda_positions, \
        .cross_entropy = cuda_cross_entropy, .ce_max = cuda_ce_max, .ce_sumexp = cuda_ce_sumexp,        \
        .ce_target = cuda_ce_target, .ce_loss = cuda_ce_loss,                                           \
        .matmul_tn = cuda_matmul_tn, .sum_rows = cuda_sum_rows, .rmsnorm_dx = cuda_rmsnorm_dx,          \
        .rmsnorm_dw = cuda_rmsnorm_dw, .layernorm_dx = cuda_layernorm_dx,                               \
        .layernorm_dw = cuda_layernorm_dw, .attention_grad = cuda_attention_grad,                       \
        .unary_grad = cuda_unary_grad, .softcap_grad = cuda_softcap_grad,                               \
        .silu_mul_grad = cuda_silu_mul_grad,                                                            \
        .embedding_grad = cuda_embedding_grad, .narrow_grad = cuda_narrow_grad,                         \
        .cross_entropy_grad = cuda_cross_entropy_grad, .ce_grad = cuda_ce_grad, .adamw = cuda_adamw,    \
        .sum_squares = cuda_sum_squares,                                                                \
        .accumulate_grad = cuda_accumulate_grad, .ones = cuda_ones,                                     \
    }

static const tp_backend cuda_f32 = CUDA_TABLE(TP_F32);
static const tp_backend cuda_bf16 = CUDA_TABLE(TP_BF16);

const tp_backend *tp_backend_cuda(tp_dtype dtype)
{
    if (!gpu->ready || (dtype != TP_F32 && dtype != TP_BF16))
        return NULL;
    gpu->dtype = dtype;
    gpu->kdt = dtype == TP_BF16 ? TP_KERNEL_BF16 : TP_KERNEL_F32;
    return dtype == TP_BF16 ? &cuda_bf16 : &cuda_f32;
}
