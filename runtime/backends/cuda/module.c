/* module.c: the one symbol tprun_cuda.so exports (gpu_module.h); everything
 * else in the module is hidden, so its gpu.h functions never bind to
 * tprun's forwarding ones of the same names. */
#include "runtime/backends/gpu.h"
#include "runtime/backends/gpu_module.h"

__attribute__((visibility("default"))) const tp_gpu_module tp_gpu_module_table = {
    .version = TPCC_VERSION,
    .backend_size = sizeof(tp_backend),
    .comm_size = sizeof(tp_comm),
    .count = tp_gpu_count,
    .init = tp_gpu_init,
    .backend = tp_backend_cuda,
    .comm_nccl = tp_comm_nccl,
    .bus_id = tp_gpu_bus_id,
    .comm_staged = tp_comm_staged,
};
