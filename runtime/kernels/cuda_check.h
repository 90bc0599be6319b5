/* cuda_check.h: TP_CUDA_CHECK, the one check of a CUDA runtime call, for
 * every file that makes such calls: the backend (backends/cuda/backend_cuda.c),
 * the NCCL communicator (backends/cuda/comm_nccl.c) and the kernels' launchers
 * (TP_LAUNCH of kernels/launch.h, and of its host emulation in the tests).
 * The includer includes the CUDA runtime's declarations (cudaError_t,
 * cudaGetErrorString) first: CUDA's own, or a test stand-in's.
 *
 * TP_GPU_CHECK_GEN makes every check, here and in backend_cuda.h (cuBLAS,
 * NCCL, and the variants that return the error instead): it evaluates the
 * call once, compares it with the library's success value and hands the
 * call's text, the function, file and line, and the library's message to
 * a reporter. TP_CUDA_CHECK's reporter is tp_gpu_fatal: a failed call
 * cannot be returned through the backend's table (its functions return
 * void), so tp_gpu_fatal prints "tprun: rank R: CUDA error in op N (kind
 * in 'module', plan entry E): <call> failed: <message> [file:line
 * function]" to stderr, ends the other ranks (comm_nccl's hook) and
 * aborts. backend_cuda.c defines it; a test binary without the backend
 * defines its own. */
#ifndef TPRUN_KERNELS_CUDA_CHECK_H
#define TPRUN_KERNELS_CUDA_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

void tp_gpu_fatal(const char *lib, const char *expr, const char *func, const char *file, int line, const char *msg)
    __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

#define TP_GPU_CHECK_GEN(expr, type, success, strfn, lib, report)                                   \
    do {                                                                                            \
        type tp_e_ = (expr);                                                                        \
        if (tp_e_ != (success))                                                                     \
            report(lib, #expr, __func__, __FILE__, __LINE__, strfn(tp_e_));                         \
    } while (0)

#define TP_CUDA_CHECK(expr) TP_GPU_CHECK_GEN(expr, cudaError_t, cudaSuccess, cudaGetErrorString, "CUDA", tp_gpu_fatal)

#endif /* TPRUN_KERNELS_CUDA_CHECK_H */
