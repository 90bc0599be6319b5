/* comm_staged.c: the communicator of GPU ranks that share a GPU — every
 * collective copied to host memory, run by the host communicator (MPI,
 * comm/mpi.c) and copied back.
 *
 * NCCL refuses two ranks on one device, so where a node runs more ranks
 * than it has GPUs (or --comm mpi asks for it) tprun gives the CUDA backend
 * this communicator instead of comm_nccl.c's: tensor parallelism, data
 * parallelism and ZeRO-1 then run on one GPU, slower (each collective
 * crosses the bus twice and waits for the device) but the same program.
 *
 * A collective, on the host thread that queues the backend's work:
 *   1. the device's input is copied to a host staging buffer on the compute
 *      stream, and the host waits for that stream: everything queued before
 *      (the kernels that wrote the input) has run, as the backend's to_host
 *      waits;
 *   2. the host communicator's collective runs on the host copies; bf16
 *      reductions on float32 copies (see `widen`);
 *   3. the result is copied back on the compute stream and waited for, so
 *      the staging buffer is free for the next collective and the result is
 *      there for whatever is queued next.
 * The staging buffer is pinned (cudaMallocHost: copies at the bus's rate)
 * where the driver can pin it, else plain host memory; one buffer serves
 * every communicator of the process, since collectives run one at a time
 * on one thread, and grows to the largest collective.
 *
 * Groups (data parallelism) split the host communicator; a failure is
 * returned with its message and the executor ends the job through the host
 * communicator's abort (MPI_Abort), which the host's stall watchdog
 * (TPRUN_TIMEOUT) also reaches when a collective waits too long. */
#include "runtime/backends/cuda/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "util/bf16.h"

typedef struct staged_comm {
    tp_comm host;      /* MPI (or single; a group's MPI group): runs every collective */
    bool root;         /* the world's: finalizing it releases the GPU, the staging and MPI */
} staged_comm;

/* The process's staging: `bytes` of host memory holding the device's
 * data, and for bf16 reductions `wide`, the float32 copies reduced. */
static struct {
    void *bytes;
    size_t bytes_size;
    bool pinned;       /* from cudaMallocHost, else malloc */
    float *wide;
    size_t wide_count;
} staging;

static int release_staging_bytes(char *err, size_t errlen)
{
    void *p = staging.bytes;
    bool pinned = staging.pinned;
    staging.bytes = NULL;
    staging.bytes_size = 0;
    if (pinned && p)
        TP_CUDA_TRY(cudaFreeHost(p));
    else
        free(p);
    return 0;
}

/* At least `size` bytes of staging, pinned where the driver can pin them. */
static int reserve_bytes(size_t size, char *err, size_t errlen)
{
    if (size <= staging.bytes_size)
        return 0;
    if (release_staging_bytes(err, errlen))
        return -1;
    staging.pinned = cudaMallocHost(&staging.bytes, size) == cudaSuccess;
    if (!staging.pinned) {
        (void)cudaGetLastError();      /* not pinned: slower copies, same results */
        staging.bytes = malloc(size);
    }
    if (!staging.bytes) {
        snprintf(err, errlen, "cannot allocate %zu bytes of host memory to stage a collective", size);
        return -1;
    }
    staging.bytes_size = size;
    return 0;
}

static int reserve_wide(size_t count, char *err, size_t errlen)
{
    if (count <= staging.wide_count)
        return 0;
    float *p = realloc(staging.wide, count * sizeof *p);
    if (!p) {
        snprintf(err, errlen, "cannot allocate %zu floats to reduce a bf16 collective", count);
        return -1;
    }
    staging.wide = p;
    staging.wide_count = count;
    return 0;
}

typedef enum collective { ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, ALL_TO_ALL } collective;

/* The host communicator's collective on host buffers (all_reduce in place
 * on `out`, which holds its input). */
static int host_collective(tp_comm *host, collective k, tp_dtype t, void *out, const void *in, int64_t n, int max,
                           char *err, size_t errlen)
{
    switch (k) {
    case ALL_GATHER: return host->ops->all_gather(host, t, out, in, n, err, errlen);
    case REDUCE_SCATTER: return host->ops->reduce_scatter(host, t, out, in, n, err, errlen);
    case ALL_REDUCE: return host->ops->all_reduce(host, t, out, n, max, err, errlen);
    case ALL_TO_ALL: return host->ops->all_to_all(host, t, out, in, n, err, errlen);
    }
    snprintf(err, errlen, "unknown collective %d", (int)k);
    return -1;
}

/* A bf16 reduction runs on float32 copies: MPI has no bf16 arithmetic.
 * Each rank's bf16 values widen exactly, the sum (or max) is taken in
 * float32 and rounded to bf16 once, to nearest even. NCCL's bf16 sum
 * (a ring or a tree) rounds to bf16 after each addition, in an order its
 * algorithm and topology choose: with two ranks that is the same single
 * rounding of an exact float32 sum, so the results agree bit for bit
 * (barring a pair whose float32 sum is itself inexact, exponents 16 apart);
 * with more ranks NCCL's sum carries up to world - 1 roundings where this
 * one carries one, so the two agree within bf16's rounding and this one is
 * the closer to the exact sum. A max is exact either way. */
static void widen(float *dst, const uint16_t *src, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        dst[i] = tp_bf16_to_f32(src[i]);
}

static void narrow(uint16_t *dst, const float *src, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        dst[i] = tp_f32_to_bf16(src[i]);
}

/* One collective through host memory (the top of the file): `in` holds
 * in_count elements on the device, `out` receives out_count; an all_reduce
 * reads and writes `out` in place. */
static int through_host(tp_comm *c, collective k, tp_dtype t, void *out, const void *in, int64_t n, int max,
                        char *err, size_t errlen)
{
    if (n < 0) {
        snprintf(err, errlen, "a collective of %lld elements", (long long)n);
        return -1;
    }
    staged_comm *m = c->impl;
    const bool in_place = k == ALL_REDUCE, reduces = k == REDUCE_SCATTER || k == ALL_REDUCE;
    const int64_t in_count = k == ALL_GATHER || in_place ? n : c->world * n;
    const int64_t out_count = reduces ? n : c->world * n;
    const size_t elem = tp_dtype_size(t), in_bytes = (size_t)in_count * elem;
    if (reserve_bytes(in_bytes + (in_place ? 0 : (size_t)out_count * elem), err, errlen))
        return -1;
    char *host_in = staging.bytes, *host_out = in_place ? host_in : host_in + in_bytes;
    const void *device_in = in_place ? out : in;
    if (in_bytes) {
        TP_CUDA_TRY(cudaMemcpyAsync(host_in, device_in, in_bytes, cudaMemcpyDeviceToHost, tp_gpu_ctx.stream));
        TP_CUDA_TRY(cudaStreamSynchronize(tp_gpu_ctx.stream));
    }
    if (reduces && t == TP_BF16) {
        if (reserve_wide((size_t)(in_place ? in_count : in_count + out_count), err, errlen))
            return -1;
        float *wide_in = staging.wide, *wide_out = in_place ? wide_in : wide_in + in_count;
        widen(wide_in, (const uint16_t *)host_in, in_count);
        if (host_collective(&m->host, k, TP_F32, wide_out, wide_in, n, max, err, errlen))
            return -1;
        narrow((uint16_t *)host_out, wide_out, out_count);
    } else if (host_collective(&m->host, k, t, host_out, host_in, n, max, err, errlen)) {
        return -1;
    }
    if (out_count) {
        TP_CUDA_TRY(cudaMemcpyAsync(out, host_out, (size_t)out_count * elem, cudaMemcpyHostToDevice,
                                    tp_gpu_ctx.stream));
        TP_CUDA_TRY(cudaStreamSynchronize(tp_gpu_ctx.stream));
    }
    return 0;
}

static int all_gather(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return through_host(c, ALL_GATHER, t, out, in, n, 0, err, errlen);
}

static int reduce_scatter(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return through_host(c, REDUCE_SCATTER, t, out, in, n, 0, err, errlen);
}

static int all_reduce(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    return through_host(c, ALL_REDUCE, t, buf, NULL, n, max, err, errlen);
}

static int all_to_all(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return through_host(c, ALL_TO_ALL, t, out, in, n, 0, err, errlen);
}

/* Host memory already: the host communicator's. */
static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    staged_comm *m = c->impl;
    return m->host.ops->gather_bytes(&m->host, out, in, bytes, err, errlen);
}

/* Host memory already: the host communicator's. */
static int agree(tp_comm *c, int rc, char *err, size_t errlen)
{
    staged_comm *m = c->impl;
    return tp_comm_host_agree(&m->host, rc, err, errlen);
}

/* Host memory: the host communicator's. */
static int reduce_i64(tp_comm *c, int64_t *buf, int64_t n, int min, char *err, size_t errlen)
{
    staged_comm *m = c->impl;
    return tp_comm_host_reduce_i64(&m->host, buf, n, min, err, errlen);
}

static void abort_all(tp_comm *c, int status)
{
    staged_comm *m = c->impl;
    if (m->host.ops->abort)
        m->host.ops->abort(&m->host, status);
}

/* A group releases its host group; the world's communicator also the
 * staging, the GPU context and MPI, after every group. */
static void finalize(tp_comm *c)
{
    staged_comm *m = c->impl;
    tp_comm host = m->host;
    if (m->root) {
        char err[256];
        tp_gpu_ctx.on_fatal = NULL;
        if (release_staging_bytes(err, sizeof err))     /* not fatal: the run is over */
            fprintf(stderr, "tprun: %s%s\n", tp_gpu_rank_prefix(), err);
        free(staging.wide);
        staging.wide = NULL;
        staging.wide_count = 0;
        tp_gpu_shutdown();
    }
    free(m);
    c->impl = NULL;
    host.ops->finalize(&host);
}

static int split(tp_comm *c, int color, int key, tp_comm *out, char *err, size_t errlen);

static const tp_comm_ops staged_ops = {
    "mpi-staged", all_gather, reduce_scatter, all_reduce, all_to_all, gather_bytes, abort_all, finalize, split, agree,
    reduce_i64,
};

/* The host communicator split with the same color and key: rank r of the
 * group is rank r of its host group. */
static int split(tp_comm *c, int color, int key, tp_comm *out, char *err, size_t errlen)
{
    staged_comm *parent = c->impl;
    if (!parent->host.ops->split) {
        snprintf(err, errlen, "the %s host communicator cannot split into groups", parent->host.ops->name);
        return -1;
    }
    staged_comm *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory splitting the staged communicator");
        return -1;
    }
    if (parent->host.ops->split(&parent->host, color, key, &m->host, err, errlen)) {
        free(m);
        return -1;
    }
    *out = (tp_comm){.ops = &staged_ops, .rank = m->host.rank, .world = m->host.world, .impl = m, .node = c->node};
    return 0;
}

/* tp_gpu.on_fatal: a fatal CUDA or cuBLAS error in the backend ends every
 * rank, not only this one, which the others would wait for in MPI */
static void on_fatal(void *ctx)
{
    staged_comm *m = ctx;
    fflush(NULL);
    if (m->host.world > 1 && m->host.ops->abort) {
        usleep(300 * 1000);      /* mpiexec forwards output asynchronously; an abort discards the rest */
        m->host.ops->abort(&m->host, 1);
    }
}

int tp_comm_staged(tp_comm *c, const tp_comm *host, char *err, size_t errlen)
{
    if (!tp_gpu_ctx.ready) {
        snprintf(err, errlen, "tp_comm_staged before tp_gpu_init");
        return -1;
    }
    staged_comm *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->host = *host;
    m->root = true;
    *c = (tp_comm){.ops = &staged_ops, .rank = host->rank, .world = host->world, .impl = m, .node = host->node};
    tp_gpu_ctx.on_fatal = on_fatal;
    tp_gpu_ctx.on_fatal_ctx = m;
    return 0;
}
