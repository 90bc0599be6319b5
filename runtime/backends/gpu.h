/* gpu.h: what tprun knows of GPUs, without CUDA headers.
 *
 * Two implementations: the CUDA one (backend_cuda.c, comm_nccl.c and
 * comm_staged.c, built
 * when CMake finds nvcc: TPCC_CUDA, as the module tprun_cuda.so that tprun
 * reaches through gpu_dlopen.c: gpu_module.h), and gpu_none.c for builds
 * without CUDA, where no GPU is ever usable. The test-only tprun_emulated builds the
 * CUDA one against host stand-ins of the CUDA runtime, cuBLAS and NCCL
 * (tests/runtime/cuda_standin/).
 *
 * Order of use, on every rank:
 *   tp_gpu_driver_present  could a GPU be usable at all? (the default
 *                       backend is chosen by tp_gpu_count only then)
 *   tp_gpu_count        is a GPU usable? (the default backend, the error of
 *                       --backend cuda where none is)
 *   tp_gpu_init         bind the process to its device (tp_node_gpu's choice,
 *                       runtime/comm/node.h), create the compute stream and cuBLAS
 *   tp_gpu_bus_id       which device it is (ranks sharing one cannot use NCCL:
 *                       runtime/comm/gpu_share.h)
 *   tp_comm_nccl        the communicator: NCCL over the devices, with the
 *                       host communicator (MPI) for the id and host data;
 *                       or tp_comm_staged, collectives through host memory
 *                       over the host communicator, where ranks share a GPU
 *   tp_backend_cuda     the backend table for the schedule's dtype
 */
#ifndef TPRUN_GPU_H
#define TPRUN_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include "runtime/backends/backend.h"
#include "runtime/comm/comm.h"

/* Whether a GPU driver is installed, answered without loading CUDA: a
 * tprun built with CUDA loads its CUDA libraries only for --backend cuda,
 * or to choose its default backend where this says a driver is there. */
bool tp_gpu_driver_present(void);

/* The number of usable CUDA devices; 0 with the reason in why (the CUDA
 * runtime's message: no driver, no device, a build without CUDA). */
int tp_gpu_count(char *why, size_t whylen);

/* Bind this process to usable device number `device` (0 .. tp_gpu_count()
 * - 1: tp_node_gpu's choice for the rank's place on its node) and create
 * the compute stream, the cuBLAS handle and its workspace. `host` is the
 * communicator the ranks were started with (MPI or single): its rank
 * names messages. Returns 0 or -1 with a message. */
int tp_gpu_init(const tp_comm *host, int device, char *err, size_t errlen);

/* The CUDA backend storing float tensors as `dtype` (TP_F32, or TP_BF16
 * with fp32 accumulation); NULL for another dtype. After tp_gpu_init. */
const tp_backend *tp_backend_cuda(tp_dtype dtype);

/* Collectives over NCCL on the devices, ordered after the compute stream
 * with events. The ncclUniqueId is made by rank 0 and broadcast over
 * `host` (MPI); gather_bytes (host memory) and the final abort go through
 * `host`, which the new communicator takes over (its finalize finalizes
 * host). A watchdog ends every rank when a collective fails or does not
 * complete within TPRUN_NCCL_TIMEOUT seconds (default 300). Its split
 * (ncclCommSplit, with `host` split alongside) makes the groups of data
 * parallelism, each watched the same way. After tp_gpu_init. Returns 0 or
 * -1 with a message. */
int tp_comm_nccl(tp_comm *c, const tp_comm *host, char *err, size_t errlen);

/* The PCI bus id of this process's device ("0000:41:00.0"), which NCCL
 * tells devices apart by. After tp_gpu_init. Returns 0 or -1 with a
 * message. */
int tp_gpu_bus_id(char *id, size_t idlen, char *err, size_t errlen);

/* Collectives for ranks that share a GPU, which NCCL refuses: each one
 * waits for the compute stream, copies the device buffer to pinned host
 * memory, runs `host`'s collective (MPI) there and copies the result back;
 * bf16 reductions sum in float32 on the host. gather_bytes, abort and
 * split go to `host`, which the new communicator takes over (its finalize
 * finalizes host and releases the GPU). After tp_gpu_init. Returns 0 or
 * -1 with a message. */
int tp_comm_staged(tp_comm *c, const tp_comm *host, char *err, size_t errlen);

#endif /* TPRUN_GPU_H */
