/* gpu_module.h: the CUDA backend as a module that tprun loads only when
 * --backend cuda is asked for (or a GPU would be the default), so a CPU run
 * and `tprun --version` never map the CUDA runtime, cuBLAS or NCCL.
 *
 * The module (tprun_cuda.so: backend_cuda.c, comm_nccl.c, comm_staged.c,
 * the kernels and module.c) exports one table, TP_GPU_MODULE_SYMBOL, of gpu.h's functions;
 * gpu_dlopen.c is gpu.h in tprun, forwarding to that table. tprun looks for
 * the module beside its executable (the build tree), then in the installed
 * library directory relative to it (TPRUN_MODULE_DIR, from CMake). */
#ifndef TPRUN_GPU_MODULE_H
#define TPRUN_GPU_MODULE_H

#include <stddef.h>
#include "runtime/backends/backend.h"
#include "runtime/comm/comm.h"

#define TP_GPU_MODULE_FILE "tprun_cuda.so"
#define TP_GPU_MODULE_SYMBOL "tp_gpu_module_table"

typedef struct tp_gpu_module {
    /* the build's version and the sizes of the tables tprun and the module
     * share: a module from another build is refused, not called */
    const char *version;
    size_t backend_size, comm_size;
    int (*count)(char *why, size_t whylen);
    int (*init)(const tp_comm *host, int device, char *err, size_t errlen);
    const tp_backend *(*backend)(tp_dtype dtype);
    int (*comm_nccl)(tp_comm *c, const tp_comm *host, char *err, size_t errlen);
    int (*bus_id)(char *id, size_t idlen, char *err, size_t errlen);
    int (*comm_staged)(tp_comm *c, const tp_comm *host, char *err, size_t errlen);
} tp_gpu_module;

#endif /* TPRUN_GPU_MODULE_H */
