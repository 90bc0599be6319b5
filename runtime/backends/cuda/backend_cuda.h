/* backend_cuda.h: what backend_cuda.c and comm_nccl.c share: the process's
 * GPU context and the checks of every CUDA, cuBLAS and NCCL call. Includes
 * the CUDA headers, so nothing outside these two files includes it (the
 * executor and tprun see gpu.h only).
 *
 * In tprun_emulated the same headers come from tests/runtime/cuda_standin/, host
 * stand-ins with the real declarations. */
#ifndef TPRUN_BACKEND_CUDA_H
#define TPRUN_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include "runtime/backends/gpu.h"
#include "runtime/kernels/cuda_check.h"
#include "runtime/kernels/kernels.h"

/* One device per process: the backend's state. */
typedef struct tp_gpu {
    bool ready;                    /* tp_gpu_init done */
    int rank, world;               /* for messages */
    char prefix[32];               /* "rank 1: " in a job of several ranks, else "" */
    int device;
    cudaStream_t stream;           /* the compute stream: every kernel and GEMM */
    cublasHandle_t blas;
    void *blas_workspace;          /* given to cuBLAS once: no allocation while running */
    size_t blas_workspace_bytes;
    /* device memory the backward kernels pass row and query statistics
     * through (kernels.h's scratch arguments); grown to the largest request */
    void *scratch;
    size_t scratch_bytes;
    tp_dtype dtype;                /* the storage of float tensors */
    tp_kernel_dtype kdt;           /* the same, for the kernels */
    bool sync_each;                /* TPRUN_CUDA_SYNC=1: check after every backend call */
    /* the op running (tp_backend.begin_op), for messages; index -1: none */
    int op_index;
    const char *op_kind, *op_module, *op_entry;
    /* called by a fatal error before the process ends: comm_nccl aborts
     * the communicator and the job, so no other rank is left waiting */
    void (*on_fatal)(void *ctx);
    void *on_fatal_ctx;
} tp_gpu;

extern tp_gpu tp_gpu_ctx;

/* "rank 1: " in a job of several ranks, "" otherwise */
const char *tp_gpu_rank_prefix(void);

/* Release the backend's stream, cuBLAS handle and workspace (comm_nccl's
 * finalize, after the communicator). */
void tp_gpu_shutdown(void);

/* ---- checks ----------------------------------------------------------------
 *
 * One generator, TP_GPU_CHECK_GEN (kernels/cuda_check.h, with TP_CUDA_CHECK),
 * makes every check: it evaluates the call once, compares it with the
 * library's success value and hands the call's text, the function, file
 * and line, and the library's message to a reporter. Two reporters:
 *   tp_gpu_fatal    prints "tprun: rank R: <lib> error in op N (kind in
 *                   'module', plan entry E): <call> failed: <message>
 *                   [file:line function]" to stderr, runs on_fatal and
 *                   aborts: the backend's table returns void, so a failure
 *                   inside a kernel launch or a GEMM cannot be returned;
 *   tp_gpu_format   writes the same message into the caller's err/errlen
 *                   and the check returns -1: for tp_gpu_init and the
 *                   communicator, whose failures tprun and the executor
 *                   report (naming the op) before ending every rank. */

/* fatal (TP_CUDA_CHECK: kernels/cuda_check.h) */
#define TP_CUBLAS_CHECK(expr)                                                                       \
    TP_GPU_CHECK_GEN(expr, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, "cuBLAS", tp_gpu_fatal)
#define TP_NCCL_CHECK(expr) TP_GPU_CHECK_GEN(expr, ncclResult_t, ncclSuccess, ncclGetErrorString, "NCCL", tp_gpu_fatal)

/* returning -1 with the message in `err` (char *) and `errlen` (size_t),
 * which must be in scope */
#define TP_GPU_RETURN_ERROR(...) return tp_gpu_format(err, errlen, __VA_ARGS__)
#define TP_CUDA_TRY(expr)                                                                           \
    TP_GPU_CHECK_GEN(expr, cudaError_t, cudaSuccess, cudaGetErrorString, "CUDA", TP_GPU_RETURN_ERROR)
#define TP_CUBLAS_TRY(expr)                                                                         \
    TP_GPU_CHECK_GEN(expr, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, "cuBLAS", TP_GPU_RETURN_ERROR)
#define TP_NCCL_TRY(expr)                                                                           \
    TP_GPU_CHECK_GEN(expr, ncclResult_t, ncclSuccess, ncclGetErrorString, "NCCL", TP_GPU_RETURN_ERROR)

/* A precondition the executor or the compiler guarantees, reported like a
 * failed call. On in release builds too: the table's functions return
 * void, so a violation cannot be returned, and going on would compute with
 * wrong sizes or read and write out of bounds. */
#define TP_GPU_ASSERT(cond)                                                                         \
    do {                                                                                            \
        if (!(cond))                                                                                \
            tp_gpu_fatal("tprun", #cond, __func__, __FILE__, __LINE__, "precondition violated");    \
    } while (0)

int tp_gpu_format(char *err, size_t errlen, const char *lib, const char *expr, const char *func, const char *file,
                  int line, const char *msg);

#endif /* TPRUN_BACKEND_CUDA_H */
