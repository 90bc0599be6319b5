/* gpu_dlopen.c: gpu.h in a tprun built with CUDA. The CUDA backend is the
 * module tprun_cuda.so (gpu_module.h), loaded the first time a GPU is asked
 * about; until then no CUDA library is mapped. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "runtime/backends/gpu.h"
#include "runtime/backends/gpu_module.h"

static const tp_gpu_module *module;

/* The directory of the running executable, ending in '/'. */
static int exe_dir(char *dir, size_t len, char *err, size_t errlen)
{
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n < 0) {
        snprintf(err, errlen, "cannot find tprun's own path to load its CUDA backend (/proc/self/exe): %s",
                 strerror(errno));
        return -1;
    }
    dir[n] = '\0';
    strrchr(dir, '/')[1] = '\0';
    return 0;
}

/* The module's table: dlopen'ed from the first place that has it, and
 * checked to come from this build. NULL with a message. */
static const tp_gpu_module *load(char *err, size_t errlen)
{
    if (module)
        return module;
    char dir[PATH_MAX], path[2][PATH_MAX + sizeof TPRUN_MODULE_DIR + sizeof TP_GPU_MODULE_FILE];
    if (exe_dir(dir, sizeof dir, err, errlen))
        return NULL;
    /* beside tprun (the build tree), then the installed library directory */
    snprintf(path[0], sizeof path[0], "%s%s", dir, TP_GPU_MODULE_FILE);
    snprintf(path[1], sizeof path[1], "%s%s/%s", dir, TPRUN_MODULE_DIR, TP_GPU_MODULE_FILE);
    for (int i = 0; i < 2; i++) {
        if (access(path[i], F_OK) != 0)
            continue;
        void *h = dlopen(path[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(err, errlen,
                     "cannot load the CUDA backend %s: %s (the CUDA runtime, cuBLAS and NCCL must be installed where "
                     "the dynamic linker finds them, e.g. on LD_LIBRARY_PATH)",
                     path[i], dlerror());
            return NULL;
        }
        const tp_gpu_module *m = dlsym(h, TP_GPU_MODULE_SYMBOL);
        if (!m || strcmp(m->version, TPCC_VERSION) || m->backend_size != sizeof(tp_backend) ||
            m->comm_size != sizeof(tp_comm)) {
            snprintf(err, errlen,
                     "%s is not the CUDA backend of this tprun (%s %s): install tprun and %s from the same build",
                     path[i], m ? "version" : "no symbol", m ? m->version : TP_GPU_MODULE_SYMBOL, TP_GPU_MODULE_FILE);
            dlclose(h);
            return NULL;
        }
        return module = m;
    }
    snprintf(err, errlen,
             "the CUDA backend %s is missing (looked for %s and %s): build it beside tprun "
             "(cmake --build BUILD --target tprun_cuda; in the source tree, tools/setup.sh --cuda)",
             TP_GPU_MODULE_FILE, path[0], path[1]);
    return NULL;
}

/* the NVIDIA driver's control device, or WSL's GPU device */
bool tp_gpu_driver_present(void) { return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0; }

int tp_gpu_count(char *why, size_t whylen)
{
    const tp_gpu_module *m = load(why, whylen);
    return m ? m->count(why, whylen) : 0;
}

int tp_gpu_init(const tp_comm *host, int device, char *err, size_t errlen)
{
    const tp_gpu_module *m = load(err, errlen);
    return m ? m->init(host, device, err, errlen) : -1;
}

const tp_backend *tp_backend_cuda(tp_dtype dtype)
{
    return module ? module->backend(dtype) : NULL;
}

int tp_comm_nccl(tp_comm *c, const tp_comm *host, char *err, size_t errlen)
{
    const tp_gpu_module *m = load(err, errlen);
    return m ? m->comm_nccl(c, host, err, errlen) : -1;
}

int tp_gpu_bus_id(char *id, size_t idlen, char *err, size_t errlen)
{
    const tp_gpu_module *m = load(err, errlen);
    return m ? m->bus_id(id, idlen, err, errlen) : -1;
}

int tp_comm_staged(tp_comm *c, const tp_comm *host, char *err, size_t errlen)
{
    const tp_gpu_module *m = load(err, errlen);
    return m ? m->comm_staged(c, host, err, errlen) : -1;
}
