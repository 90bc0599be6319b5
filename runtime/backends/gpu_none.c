/* gpu_none.c: gpu.h for a tprun built without CUDA (TPCC_CUDA off, or no
 * nvcc when CMake ran): no GPU is ever usable, so the CPU backend is the
 * default and --backend cuda says why it cannot run. */
#include <stdio.h>
#include "runtime/backends/gpu.h"

bool tp_gpu_driver_present(void) { return false; }

int tp_gpu_count(char *why, size_t whylen)
{
    snprintf(why, whylen, "this tprun was built without CUDA (configure with nvcc installed, -DTPCC_CUDA=ON)");
    return 0;
}

int tp_gpu_init(const tp_comm *host, int device, char *err, size_t errlen)
{
    (void)host;
    (void)device;
    return tp_gpu_count(err, errlen) > 0 ? 0 : -1;
}

const tp_backend *tp_backend_cuda(tp_dtype dtype)
{
    (void)dtype;
    return NULL;
}

int tp_comm_nccl(tp_comm *c, const tp_comm *host, char *err, size_t errlen)
{
    (void)c;
    (void)host;
    return tp_gpu_count(err, errlen) > 0 ? 0 : -1;
}

int tp_gpu_bus_id(char *id, size_t idlen, char *err, size_t errlen)
{
    (void)id;
    (void)idlen;
    return tp_gpu_count(err, errlen) > 0 ? 0 : -1;
}

int tp_comm_staged(tp_comm *c, const tp_comm *host, char *err, size_t errlen)
{
    (void)c;
    (void)host;
    return tp_gpu_count(err, errlen) > 0 ? 0 : -1;
}
