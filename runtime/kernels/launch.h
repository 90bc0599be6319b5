/* launch.h: what a kernel source includes instead of writing CUDA syntax
 * directly where the host emulation needs a hook.
 *
 *   TP_LAUNCH(kernel, grid, block, shmem_bytes, stream, args...)
 *       launch and check (cudaGetLastError) — the one way kernels start, so
 *       launchers compile unchanged under emulation
 *   TP_SHARED(type, name, count)      a block's static shared array
 *   TP_DYNAMIC_SHARED(type, name)     the launch's dynamic shared memory
 *   TP_CUDA_CHECK(expr)               any CUDA runtime call, checked
 *                                     (cuda_check.h, shared with the backend)
 *   cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
 *       the runtime's own, before launching with more than 48 KiB of dynamic
 *       shared memory (at most 166912, sm_80's); the emulation holds launches to it
 *
 * With nvcc (__CUDACC__) these are plain CUDA; under TP_CUDA_EMULATION
 * (tests only) they come from tests/runtime/cuda_emu/cuda_emu.h, which runs each
 * block's threads on the host, in a randomised order between barriers,
 * with poisoned shared and fresh memory. */
#ifndef TPRUN_KERNELS_LAUNCH_H
#define TPRUN_KERNELS_LAUNCH_H

#if defined(TP_CUDA_EMULATION)
#include "cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include "cuda_check.h"

#define TP_LAUNCH(kernel, grid, block, shmem, stream, ...)                                               \
    do {                                                                                                 \
        kernel<<<(grid), (block), (shmem), (cudaStream_t)(stream)>>>(__VA_ARGS__);                       \
        TP_CUDA_CHECK(cudaGetLastError());                                                               \
    } while (0)

#define TP_SHARED(type, name, count) __shared__ type name[count]
#define TP_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

#endif /* TPRUN_KERNELS_LAUNCH_H */
