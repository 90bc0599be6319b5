/* comm_nccl.c: the communicator of GPU ranks — NCCL collectives on the
 * devices, with MPI (the host communicator tprun started with) for what
 * happens on the host.
 *
 * Bring-up, eagerly, before the schedule runs: rank 0 makes the
 * ncclUniqueId and broadcasts it over MPI; every rank joins with
 * ncclCommInitRank on its own device (tp_gpu_init chose it).
 *
 * Ordering, without the host waiting: each collective is queued on a
 * separate comm stream after an event recorded on the compute stream
 * (cudaEventRecord + cudaStreamWaitEvent), and the compute stream waits, in
 * turn, on an event recorded after the collective. The host only ever
 * waits in the backend's to_host, which follows everything.
 *
 * Failures never leave a rank hanging:
 *   - every NCCL and CUDA call is checked; a failing collective returns -1
 *     with the message, the executor names the op, and tprun aborts the
 *     job (tp_comm.abort: ncclCommAbort, then MPI_Abort);
 *   - ncclCommGetAsyncError is read after each collective is queued (a host
 *     read, no wait) and polled by a watchdog thread, which also times
 *     every collective, from the moment it is queued to the moment its
 *     event completes; after TPRUN_NCCL_TIMEOUT seconds (default 300)
 *     without progress — a rank died, stalled, or runs another schedule —
 *     it prints which collective is stuck, aborts the NCCL communicator
 *     and ends the job through MPI. The id exchange and ncclCommInitRank
 *     are timed the same way.
 *   - a fatal error in the backend (backend_cuda.c) aborts the
 *     communicator and the job through the same path (tp_gpu.on_fatal).
 * The watchdog calls MPI_Abort from its own thread, outside the
 * MPI_THREAD_FUNNELED contract comm/mpi.c asks for: it is the last call the
 * process makes, and MPICH's abort does not depend on the calling thread.
 *
 * One rank needs no NCCL: collectives over one rank are device copies on
 * the compute stream. */
#include "runtime/backends/cuda/backend_cuda.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Collectives the watchdog can see in flight at once: the events are
 * reused round-robin. Reusing one that is still pending only delays when
 * the watchdog sees progress (a stream completes in order). */
#define RING 64
#define DEFAULT_TIMEOUT_S 300.0

typedef struct nccl_comm {
    tp_comm host;                  /* MPI (or single): the id, host gathers, the job's abort */
    ncclComm_t nccl;               /* NULL for one rank */
    _Atomic(ncclComm_t) live;      /* nccl once initialised: what the watchdog may poll */
    cudaStream_t stream;           /* the collectives */
    cudaEvent_t compute_done;      /* recorded on the compute stream before each collective */
    cudaEvent_t done[RING];        /* recorded on the comm stream after each */
    double issued_at[RING];        /* when collective i % RING was queued */
    const char *kind[RING];
    int op[RING];                  /* schedule op index, -1 outside the forward pass */
    atomic_long started;           /* collectives queued (or being queued) */
    atomic_long recorded;          /* collectives whose done event is recorded */
    double timeout;                /* seconds */
    pthread_t watchdog;
    bool watching;
    atomic_int stop;
} nccl_comm;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ncclDataType_t nccl_type(tp_dtype t)
{
    TP_GPU_ASSERT(t == TP_F32 || t == TP_BF16);
    return t == TP_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* ------------------------------------------------------------------------ */
/* ending every rank                                                         */
/* ------------------------------------------------------------------------ */

/* Abort NCCL (unblocking a rank stuck in a collective), then the job. */
static void end_job(nccl_comm *m, int status)
{
    ncclComm_t nc = atomic_exchange(&m->live, NULL);
    if (nc) {
        ncclResult_t r = ncclCommAbort(nc);
        if (r != ncclSuccess)     /* reported, not fatal: the job is ending anyway */
            fprintf(stderr, "tprun: %sncclCommAbort failed: %s\n", tp_gpu_rank_prefix(), ncclGetErrorString(r));
    }
    fflush(NULL);
    if (m->host.world > 1 && m->host.ops->abort) {
        /* mpiexec forwards output asynchronously and an abort discards
         * what it has not forwarded yet */
        usleep(300 * 1000);
        m->host.ops->abort(&m->host, status);
    }
}

/* tp_gpu.on_fatal: a fatal CUDA or cuBLAS error in the backend */
static void on_fatal(void *ctx) { end_job(ctx, 1); }

static _Noreturn void watchdog_fail(nccl_comm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void watchdog_fail(nccl_comm *m, const char *fmt, ...)
{
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tprun: %s%s; aborting NCCL and ending every rank\n", tp_gpu_rank_prefix(), msg);
    end_job(m, 1);
    _exit(1);
}

/* ------------------------------------------------------------------------ */
/* the watchdog                                                              */
/* ------------------------------------------------------------------------ */

static void *watchdog_main(void *arg)
{
    nccl_comm *m = arg;
    /* the current device is per thread: the events live on ours */
    cudaError_t e = cudaSetDevice(tp_gpu_ctx.device);
    if (e != cudaSuccess)
        watchdog_fail(m, "the NCCL watchdog: cudaSetDevice failed: %s", cudaGetErrorString(e));
    double poll = m->timeout / 10 < 0.05 ? m->timeout / 10 : 0.05;
    struct timespec ts = {0, (long)(poll * 1e9)};
    long oldest = 0;               /* the first collective not seen complete */
    double progress = now_seconds();
    while (!atomic_load(&m->stop)) {
        nanosleep(&ts, NULL);
        ncclComm_t nc = atomic_load(&m->live);
        if (nc) {
            ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(nc, &async);
            if (r != ncclSuccess)
                watchdog_fail(m, "ncclCommGetAsyncError failed: %s", ncclGetErrorString(r));
            if (async != ncclSuccess && async != ncclInProgress)
                watchdog_fail(m, "NCCL reports an asynchronous error: %s", ncclGetErrorString(async));
        }
        long started = atomic_load(&m->started), recorded = atomic_load(&m->recorded);
        while (oldest < recorded) {
            cudaError_t q = cudaEventQuery(m->done[oldest % RING]);
            if (q == cudaErrorNotReady)
                break;
            if (q != cudaSuccess)
                watchdog_fail(m, "collective %ld (%s, op %d) failed: %s", oldest, m->kind[oldest % RING],
                              m->op[oldest % RING], cudaGetErrorString(q));
            oldest++;
            progress = now_seconds();
        }
        if (oldest < started) {
            int slot = (int)(oldest % RING);
            double since = progress > m->issued_at[slot] ? progress : m->issued_at[slot];
            if (now_seconds() - since > m->timeout)
                watchdog_fail(m,
                              "collective %ld (%s, op %d) has not completed after %g s: another rank failed, "
                              "stalled or runs another schedule (TPRUN_NCCL_TIMEOUT=%g)",
                              oldest, m->kind[slot], m->op[slot], m->timeout, m->timeout);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* queueing a collective                                                     */
/* ------------------------------------------------------------------------ */

/* The comm stream waits for everything queued on the compute stream. */
static int begin(nccl_comm *m, const char *kind, char *err, size_t errlen)
{
    long i = atomic_load(&m->started);
    int slot = (int)(i % RING);
    m->issued_at[slot] = now_seconds();
    m->kind[slot] = kind;
    m->op[slot] = tp_gpu_ctx.op_index;
    atomic_store(&m->started, i + 1);   /* publishes the three above */
    TP_CUDA_TRY(cudaEventRecord(m->compute_done, tp_gpu_ctx.stream));
    TP_CUDA_TRY(cudaStreamWaitEvent(m->stream, m->compute_done, 0));
    return 0;
}

/* The compute stream waits for the collective; NCCL's errors so far are
 * read (no wait). */
static int finish(nccl_comm *m, char *err, size_t errlen)
{
    long i = atomic_load(&m->started) - 1;
    cudaEvent_t ev = m->done[i % RING];
    TP_CUDA_TRY(cudaEventRecord(ev, m->stream));
    atomic_store(&m->recorded, i + 1);
    TP_CUDA_TRY(cudaStreamWaitEvent(tp_gpu_ctx.stream, ev, 0));
    ncclResult_t async = ncclSuccess;
    TP_NCCL_TRY(ncclCommGetAsyncError(m->nccl, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
        snprintf(err, errlen, "NCCL reports an asynchronous error: %s", ncclGetErrorString(async));
        return -1;
    }
    return 0;
}

/* One rank: the collective is a copy, queued on the compute stream. */
static int local_copy(void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    if (bytes && out != in)
        TP_CUDA_TRY(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, tp_gpu_ctx.stream));
    return 0;
}

static int all_gather_queue(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    if (!m->nccl)
        return local_copy(out, in, (size_t)n * tp_dtype_size(t), err, errlen);
    if (begin(m, "all_gather", err, errlen))
        return -1;
    TP_NCCL_TRY(ncclAllGather(in, out, (size_t)n, nccl_type(t), m->nccl, m->stream));
    return finish(m, err, errlen);
}

static int reduce_scatter_queue(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    if (!m->nccl)
        return local_copy(out, in, (size_t)n * tp_dtype_size(t), err, errlen);
    if (begin(m, "reduce_scatter", err, errlen))
        return -1;
    TP_NCCL_TRY(ncclReduceScatter(in, out, (size_t)n, nccl_type(t), ncclSum, m->nccl, m->stream));
    return finish(m, err, errlen);
}

static int all_reduce_queue(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    if (!m->nccl)
        return 0;
    if (begin(m, max ? "all_reduce max" : "all_reduce", err, errlen))
        return -1;
    TP_NCCL_TRY(ncclAllReduce(buf, buf, (size_t)n, nccl_type(t), max ? ncclMax : ncclSum, m->nccl, m->stream));
    return finish(m, err, errlen);
}

/* Point-to-point in one group: ncclAlltoAll exists only from NCCL 2.28. */
static int all_to_all_queue(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    size_t block = (size_t)n * tp_dtype_size(t);
    if (!m->nccl)
        return local_copy(out, in, block, err, errlen);
    if (begin(m, "all_to_all", err, errlen))
        return -1;
    TP_NCCL_TRY(ncclGroupStart());
    for (int r = 0; r < c->world; r++) {
        TP_NCCL_TRY(ncclSend((const char *)in + (size_t)r * block, (size_t)n, nccl_type(t), r, m->nccl, m->stream));
        TP_NCCL_TRY(ncclRecv((char *)out + (size_t)r * block, (size_t)n, nccl_type(t), r, m->nccl, m->stream));
    }
    TP_NCCL_TRY(ncclGroupEnd());
    return finish(m, err, errlen);
}

/* A collective that failed leaves the communicator in an unknown state, and
 * the job is ending: abort NCCL now, so nothing waits for it on the way out
 * (the executor frees device memory first, and cudaFree waits for the
 * device). tprun then aborts the job. */
static int failed(tp_comm *c, int rc)
{
    if (rc) {
        nccl_comm *m = c->impl;
        ncclComm_t nc = atomic_exchange(&m->live, NULL);
        if (nc)
            (void)ncclCommAbort(nc);   /* the failure being reported is the collective's */
    }
    return rc;
}

static int all_gather(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return failed(c, all_gather_queue(c, t, out, in, n, err, errlen));
}

static int reduce_scatter(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return failed(c, reduce_scatter_queue(c, t, out, in, n, err, errlen));
}

static int all_reduce(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    return failed(c, all_reduce_queue(c, t, buf, n, max, err, errlen));
}

static int all_to_all(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return failed(c, all_to_all_queue(c, t, out, in, n, err, errlen));
}

/* Host memory: MPI's job. */
static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    return m->host.ops->gather_bytes(&m->host, out, in, bytes, err, errlen);
}

static void abort_all(tp_comm *c, int status)
{
    nccl_comm *m = c->impl;
    end_job(m, status);
}

static void finalize(tp_comm *c)
{
    nccl_comm *m = c->impl;
    if (m->watching) {
        atomic_store(&m->stop, 1);
        pthread_join(m->watchdog, NULL);
    }
    tp_gpu_ctx.on_fatal = NULL;
    /* NULL when a failure aborted it (ncclCommAbort frees it) */
    ncclComm_t nc = atomic_exchange(&m->live, NULL);
    if (nc) {
        TP_CUDA_CHECK(cudaStreamSynchronize(m->stream));
#if NCCL_VERSION_CODE >= 21400
        TP_NCCL_CHECK(ncclCommFinalize(nc));
#endif
        TP_NCCL_CHECK(ncclCommDestroy(nc));
    }
    if (m->nccl) {
        for (int i = 0; i < RING; i++)
            TP_CUDA_CHECK(cudaEventDestroy(m->done[i]));
        TP_CUDA_CHECK(cudaEventDestroy(m->compute_done));
        TP_CUDA_CHECK(cudaStreamDestroy(m->stream));
    }
    tp_gpu_shutdown();
    tp_comm host = m->host;
    free(m);
    c->impl = NULL;
    host.ops->finalize(&host);
}

static const tp_comm_ops nccl_ops = {
    "nccl", all_gather, reduce_scatter, all_reduce, all_to_all, gather_bytes, abort_all, finalize,
    NULL,   /* split: no ncclCommSplit yet, so no data parallelism on GPUs */
};

/* ------------------------------------------------------------------------ */
/* bring-up                                                                  */
/* ------------------------------------------------------------------------ */

static int parse_timeout(double *out, char *err, size_t errlen)
{
    const char *s = getenv("TPRUN_NCCL_TIMEOUT");
    *out = DEFAULT_TIMEOUT_S;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v > 0) || !isfinite(v)) {
        snprintf(err, errlen, "TPRUN_NCCL_TIMEOUT takes a positive number of seconds, not '%s'", s);
        return -1;
    }
    *out = v;
    return 0;
}

static int mpi_check(int rc, const char *what, char *err, size_t errlen)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    snprintf(err, errlen, "%s failed: %s", what, msg);
    return -1;
}

/* The id from rank 0, then NCCL, under the watchdog's clock. */
static int join(nccl_comm *m, char *err, size_t errlen)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    m->issued_at[0] = now_seconds();
    m->kind[0] = "ncclUniqueId exchange and ncclCommInitRank";
    m->op[0] = -1;
    atomic_store(&m->started, 1);
    if (m->host.rank == 0)
        TP_NCCL_TRY(ncclGetUniqueId(&id));
    if (mpi_check(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast of the ncclUniqueId", err,
                  errlen))
        return -1;
    TP_NCCL_TRY(ncclCommInitRank(&m->nccl, m->host.world, id, m->host.rank));
    atomic_store(&m->live, m->nccl);
    TP_CUDA_TRY(cudaEventRecord(m->done[0], m->stream));      /* bring-up: complete */
    atomic_store(&m->recorded, 1);
    return 0;
}

int tp_comm_nccl(tp_comm *c, const tp_comm *host, char *err, size_t errlen)
{
    if (!tp_gpu_ctx.ready) {
        snprintf(err, errlen, "tp_comm_nccl before tp_gpu_init");
        return -1;
    }
    nccl_comm *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    m->host = *host;
    c->ops = &nccl_ops;
    c->rank = host->rank;
    c->world = host->world;
    c->impl = m;
    if (host->world <= 1)
        return 0;
    if (parse_timeout(&m->timeout, err, errlen))
        return -1;
    /* the comm stream at the device's highest priority: a collective is
     * on every rank's critical path */
    int least, greatest;
    TP_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TP_CUDA_TRY(cudaStreamCreateWithPriority(&m->stream, cudaStreamNonBlocking, greatest));
    TP_CUDA_TRY(cudaEventCreateWithFlags(&m->compute_done, cudaEventDisableTiming));
    for (int i = 0; i < RING; i++)
        TP_CUDA_TRY(cudaEventCreateWithFlags(&m->done[i], cudaEventDisableTiming));
    int rc = pthread_create(&m->watchdog, NULL, watchdog_main, m);
    if (rc) {
        snprintf(err, errlen, "cannot start the NCCL watchdog thread: %s", strerror(rc));
        return -1;
    }
    m->watching = true;
    tp_gpu_ctx.on_fatal = on_fatal;
    tp_gpu_ctx.on_fatal_ctx = m;
    return join(m, err, errlen);
}
