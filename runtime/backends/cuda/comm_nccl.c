/* comm_nccl.c: the communicator of GPU ranks — NCCL collectives on the
 * devices, with MPI (the host communicator tprun started with) for what
 * happens on the host.
 *
 * Bring-up, eagerly, before the schedule runs: rank 0 makes the
 * ncclUniqueId and broadcasts it over MPI; every rank joins with
 * ncclCommInitRank on its own device (tp_gpu_init chose it).
 *
 * Groups (data parallelism: a tp and a dp communicator per rank, dp.h)
 * are split off with ncclCommSplit (NCCL 2.18), collective over the parent
 * as MPI_Comm_split is, and the host communicator is split alongside it
 * with the same color and key, so rank r of the group is rank r of both.
 * ncclCommSplit needs no id exchange over the group and lets NCCL order the
 * group's ranks itself; NCCL before 2.18 has no split, and the table's split
 * is NULL there (dp.c then refuses data parallelism with the way out). Each
 * group has its own comm stream, events and watchdog, as the world's has.
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
 *     and ends the job through MPI. The id exchange and ncclCommInitRank,
 *     and each split, are timed the same way.
 *   - a fatal error in the backend (backend_cuda.c) aborts the
 *     communicator and the job through the same path (tp_gpu.on_fatal).
 *   - whatever fails, every communicator of the process (the world's and
 *     its groups') is aborted, not only the one that failed: a collective of
 *     another group queued on the device would otherwise keep it, and the
 *     teardown of the failing run, waiting.
 * The watchdog calls MPI_Abort from its own thread, outside the
 * MPI_THREAD_FUNNELED contract comm/mpi.c asks for: it is the last call the
 * process makes, and MPICH's abort does not depend on the calling thread.
 *
 * One rank needs no NCCL: collectives over one rank are device copies on
 * the compute stream. */
#include "runtime/backends/cuda/backend_cuda.h"

#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/number.h"

/* Collectives the watchdog can see in flight at once: the events are
 * reused round-robin. Reusing one that is still pending only delays when
 * the watchdog sees progress (a stream completes in order). */
#define RING 64
#define DEFAULT_TIMEOUT_S 300.0

typedef struct nccl_comm {
    tp_comm host;                  /* MPI (or single; a group's MPI group): the id, host gathers */
    tp_comm job;                   /* the world's host communicator: the job's abort */
    bool root;                     /* the world's: finalizing it releases the GPU and MPI */
    char label[64];                /* "" for the world, " in group C (rank R of N)" for a split */
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
    int events;                    /* of done[] created */
    pthread_t watchdog;
    bool watching;
    atomic_int stop;
} nccl_comm;

/* Every communicator of the process with its watchdog running: what a
 * failure aborts. */
#define MAX_COMMS 16
static nccl_comm *comms[MAX_COMMS];
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* Abort every NCCL communicator of the process (unblocking a rank stuck in
 * a collective of any group); `report` says whether a failing abort is
 * worth a line (not when it follows the failure being reported). */
static void abort_every_comm(bool report)
{
    pthread_mutex_lock(&comms_lock);
    for (int i = 0; i < MAX_COMMS; i++) {
        ncclComm_t nc = comms[i] ? atomic_exchange(&comms[i]->live, NULL) : NULL;
        if (!nc)
            continue;
        ncclResult_t r = ncclCommAbort(nc);
        if (r != ncclSuccess && report)     /* not fatal: the job is ending anyway */
            fprintf(stderr, "tprun: %sncclCommAbort failed: %s\n", tp_gpu_rank_prefix(), ncclGetErrorString(r));
    }
    pthread_mutex_unlock(&comms_lock);
}

/* Abort NCCL, then the job. */
static void end_job(nccl_comm *m, int status)
{
    abort_every_comm(true);
    fflush(NULL);
    if (m->job.world > 1 && m->job.ops->abort) {
        /* mpiexec forwards output asynchronously and an abort discards
         * what it has not forwarded yet */
        usleep(300 * 1000);
        m->job.ops->abort(&m->job, status);
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

/* "all_reduce, op 12" for an op of the schedule; the kind alone outside
 * them (bring-up, a split, data parallelism's averages) */
static const char *what(const nccl_comm *m, int slot, char *buf, size_t len)
{
    if (m->op[slot] < 0)
        return m->kind[slot];
    snprintf(buf, len, "%s, op %d", m->kind[slot], m->op[slot]);
    return buf;
}

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
    char buf[128];
    double progress = now_seconds();
    while (!atomic_load(&m->stop)) {
        nanosleep(&ts, NULL);
        ncclComm_t nc = atomic_load(&m->live);
        if (nc) {
            ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(nc, &async);
            if (r != ncclSuccess)
                watchdog_fail(m, "ncclCommGetAsyncError%s failed: %s", m->label, ncclGetErrorString(r));
            if (async != ncclSuccess && async != ncclInProgress)
                watchdog_fail(m, "NCCL reports an asynchronous error%s: %s", m->label, ncclGetErrorString(async));
        }
        long started = atomic_load(&m->started), recorded = atomic_load(&m->recorded);
        while (oldest < recorded) {
            cudaError_t q = cudaEventQuery(m->done[oldest % RING]);
            if (q == cudaErrorNotReady)
                break;
            if (q != cudaSuccess)
                watchdog_fail(m, "collective %ld (%s)%s failed: %s", oldest,
                              what(m, (int)(oldest % RING), buf, sizeof buf), m->label, cudaGetErrorString(q));
            oldest++;
            progress = now_seconds();
        }
        if (oldest < started) {
            int slot = (int)(oldest % RING);
            double since = progress > m->issued_at[slot] ? progress : m->issued_at[slot];
            if (now_seconds() - since > m->timeout)
                watchdog_fail(m,
                              "collective %ld (%s)%s has not completed after %g s: another rank failed, "
                              "stalled or runs another schedule (TPRUN_NCCL_TIMEOUT=%g)",
                              oldest, what(m, slot, buf, sizeof buf), m->label, m->timeout, m->timeout);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* queueing a collective                                                     */
/* ------------------------------------------------------------------------ */

/* The watchdog's clock starts for the next collective (or blocking call:
 * bring-up, a split). */
static void clock_start(nccl_comm *m, const char *kind, int op)
{
    long i = atomic_load(&m->started);
    int slot = (int)(i % RING);
    m->issued_at[slot] = now_seconds();
    m->kind[slot] = kind;
    m->op[slot] = op;
    atomic_store(&m->started, i + 1);   /* publishes the three above */
}

/* ... and stops when the comm stream reaches this point. */
static int clock_stop(nccl_comm *m, char *err, size_t errlen)
{
    long i = atomic_load(&m->started) - 1;
    TP_CUDA_TRY(cudaEventRecord(m->done[i % RING], m->stream));
    atomic_store(&m->recorded, i + 1);
    return 0;
}

/* The comm stream waits for everything queued on the compute stream. */
static int begin(nccl_comm *m, const char *kind, char *err, size_t errlen)
{
    clock_start(m, kind, tp_gpu_ctx.op_index);
    TP_CUDA_TRY(cudaEventRecord(m->compute_done, tp_gpu_ctx.stream));
    TP_CUDA_TRY(cudaStreamWaitEvent(m->stream, m->compute_done, 0));
    return 0;
}

/* The compute stream waits for the collective; NCCL's errors so far are
 * read (no wait). */
static int finish(nccl_comm *m, char *err, size_t errlen)
{
    cudaEvent_t ev = m->done[(atomic_load(&m->started) - 1) % RING];
    if (clock_stop(m, err, errlen))
        return -1;
    TP_CUDA_TRY(cudaStreamWaitEvent(tp_gpu_ctx.stream, ev, 0));
    ncclResult_t async = ncclSuccess;
    TP_NCCL_TRY(ncclCommGetAsyncError(m->nccl, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
        snprintf(err, errlen, "NCCL reports an asynchronous error%s: %s", m->label, ncclGetErrorString(async));
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
 * the job is ending: abort NCCL now, every communicator of the process, so
 * nothing waits for one on the way out (the executor frees device memory
 * first, and cudaFree waits for the device; the groups are finalized).
 * tprun then aborts the job. */
static int failed(int rc)
{
    if (rc)
        abort_every_comm(false);   /* the failure being reported is the collective's */
    return rc;
}

static int all_gather(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return failed(all_gather_queue(c, t, out, in, n, err, errlen));
}

static int reduce_scatter(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return failed(reduce_scatter_queue(c, t, out, in, n, err, errlen));
}

static int all_reduce(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    return failed(all_reduce_queue(c, t, buf, n, max, err, errlen));
}

static int all_to_all(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return failed(all_to_all_queue(c, t, out, in, n, err, errlen));
}

/* Host memory: MPI's job. */
static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    return m->host.ops->gather_bytes(&m->host, out, in, bytes, err, errlen);
}

/* On the host communicator too: the ranks' status and a message are host
 * data, and an I/O phase's ranks wait in it under the host watchdog's
 * TPRUN_IO_TIMEOUT, never in an NCCL collective the watchdog here would
 * hold to TPRUN_NCCL_TIMEOUT. */
static int agree(tp_comm *c, int rc, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    return tp_comm_host_agree(&m->host, rc, err, errlen);
}

/* Host memory: the host communicator's. */
static int reduce_i64(tp_comm *c, int64_t *buf, int64_t n, int min, char *err, size_t errlen)
{
    nccl_comm *m = c->impl;
    return tp_comm_host_reduce_i64(&m->host, buf, n, min, err, errlen);
}

static void abort_all(tp_comm *c, int status)
{
    nccl_comm *m = c->impl;
    end_job(m, status);
}

/* ------------------------------------------------------------------------ */
/* the process's communicators                                               */
/* ------------------------------------------------------------------------ */

static int register_comm(nccl_comm *m, char *err, size_t errlen)
{
    pthread_mutex_lock(&comms_lock);
    int i = 0;
    while (i < MAX_COMMS && comms[i])
        i++;
    if (i < MAX_COMMS)
        comms[i] = m;
    pthread_mutex_unlock(&comms_lock);
    if (i == MAX_COMMS) {
        snprintf(err, errlen, "more than %d NCCL communicators in one process", MAX_COMMS);
        return -1;
    }
    return 0;
}

static void unregister_comm(nccl_comm *m)
{
    pthread_mutex_lock(&comms_lock);
    for (int i = 0; i < MAX_COMMS; i++)
        if (comms[i] == m)
            comms[i] = NULL;
    pthread_mutex_unlock(&comms_lock);
}

/* The comm stream at the device's highest priority (a collective is on
 * every rank's critical path), its events, the watchdog. */
static int start(nccl_comm *m, char *err, size_t errlen)
{
    int least, greatest;
    TP_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TP_CUDA_TRY(cudaStreamCreateWithPriority(&m->stream, cudaStreamNonBlocking, greatest));
    TP_CUDA_TRY(cudaEventCreateWithFlags(&m->compute_done, cudaEventDisableTiming));
    for (; m->events < RING; m->events++)
        TP_CUDA_TRY(cudaEventCreateWithFlags(&m->done[m->events], cudaEventDisableTiming));
    if (register_comm(m, err, errlen))
        return -1;
    int rc = pthread_create(&m->watchdog, NULL, watchdog_main, m);
    if (rc) {
        snprintf(err, errlen, "cannot start the NCCL watchdog thread: %s", strerror(rc));
        return -1;
    }
    m->watching = true;
    return 0;
}

/* What start and the bring-up made, whichever of it exists: the watchdog
 * first (it reads the rest), then NCCL, then the stream and events. */
static void release(nccl_comm *m)
{
    if (m->watching) {
        atomic_store(&m->stop, 1);
        pthread_join(m->watchdog, NULL);
        m->watching = false;
    }
    unregister_comm(m);
    /* NULL when a failure aborted it (ncclCommAbort frees it) */
    ncclComm_t nc = atomic_exchange(&m->live, NULL);
    if (nc) {
        if (m->stream)
            TP_CUDA_CHECK(cudaStreamSynchronize(m->stream));
#if NCCL_VERSION_CODE >= 21400
        TP_NCCL_CHECK(ncclCommFinalize(nc));
#endif
        TP_NCCL_CHECK(ncclCommDestroy(nc));
    }
    for (int i = 0; i < m->events; i++)
        TP_CUDA_CHECK(cudaEventDestroy(m->done[i]));
    if (m->compute_done)
        TP_CUDA_CHECK(cudaEventDestroy(m->compute_done));
    if (m->stream)
        TP_CUDA_CHECK(cudaStreamDestroy(m->stream));
}

/* A group releases itself and its host group; the world's communicator
 * also the GPU context and MPI, after every group. */
static void finalize(tp_comm *c)
{
    nccl_comm *m = c->impl;
    if (m->root)
        tp_gpu_ctx.on_fatal = NULL;
    release(m);
    if (m->root)
        tp_gpu_shutdown();
    tp_comm host = m->host;
    free(m);
    c->impl = NULL;
    host.ops->finalize(&host);
}

/* ------------------------------------------------------------------------ */
/* groups                                                                    */
/* ------------------------------------------------------------------------ */

#if NCCL_VERSION_CODE >= 21800
/* NCCL's side of a split, m->host being split already: the child of
 * ncclCommSplit must hold the host group's rank and size, or the two
 * libraries ordered the group differently. */
static int split_nccl(nccl_comm *parent, nccl_comm *m, int color, int key, char *err, size_t errlen)
{
    ncclComm_t nc = NULL;
    TP_NCCL_TRY(ncclCommSplit(parent->nccl, color, key, &nc, NULL));   /* config NULL: the parent's */
    m->nccl = nc;
    atomic_store(&m->live, nc);
    int rank = -1, count = 0;
    TP_NCCL_TRY(ncclCommUserRank(nc, &rank));
    TP_NCCL_TRY(ncclCommCount(nc, &count));
    if (rank != m->host.rank || count != m->host.world) {
        snprintf(err, errlen, "ncclCommSplit(color %d, key %d) made rank %d of %d where the host communicator's "
                 "split made rank %d of %d", color, key, rank, count, m->host.rank, m->host.world);
        return -1;
    }
    return start(m, err, errlen);
}

/* The ranks of c passing `color`, ordered by `key` then by rank in c
 * (MPI_Comm_split's order, and ncclCommSplit's): the host communicator
 * split first, then NCCL, both under c's watchdog clock (a rank that never
 * joins is reported like a stalled collective). A one-rank communicator
 * splits into itself, without NCCL. */
static int split(tp_comm *c, int color, int key, tp_comm *out, char *err, size_t errlen)
{
    nccl_comm *parent = c->impl;
    if (color < 0) {
        snprintf(err, errlen, "splitting the NCCL communicator: color %d (a group takes a color of 0 or more)",
                 color);
        return -1;
    }
    if (parent->nccl && !atomic_load(&parent->live)) {
        snprintf(err, errlen, "splitting an NCCL communicator that a failure aborted");
        return -1;
    }
    if (!parent->host.ops->split) {
        snprintf(err, errlen, "the %s host communicator cannot split into groups", parent->host.ops->name);
        return -1;
    }
    nccl_comm *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory splitting the NCCL communicator");
        return -1;
    }
    m->job = parent->job;
    m->timeout = parent->timeout;
    if (parent->nccl)
        clock_start(parent, "ncclCommSplit", -1);
    int rc = parent->host.ops->split(&parent->host, color, key, &m->host, err, errlen);
    bool host_split = rc == 0;
    if (!rc) {
        snprintf(m->label, sizeof m->label, " in group %d (rank %d of %d)", color, m->host.rank, m->host.world);
        if (parent->nccl)
            rc = split_nccl(parent, m, color, key, err, errlen);
    }
    if (parent->nccl) {
        char stop_err[256];       /* the failure being reported, if any, is the split's */
        if (clock_stop(parent, rc ? stop_err : err, rc ? sizeof stop_err : errlen))
            rc = -1;
    }
    if (rc) {
        release(m);
        if (host_split)
            m->host.ops->finalize(&m->host);
        free(m);
        return -1;
    }
    *out = (tp_comm){.ops = c->ops, .rank = m->host.rank, .world = m->host.world, .impl = m, .node = c->node};
    return 0;
}
#endif

static const tp_comm_ops nccl_ops = {
    "nccl", all_gather, reduce_scatter, all_reduce, all_to_all, gather_bytes, abort_all, finalize,
#if NCCL_VERSION_CODE >= 21800
    split,
#else
    NULL,   /* split: ncclCommSplit is NCCL 2.18's */
#endif
    agree, reduce_i64,
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
    double v;
    if (tp_parse_real(s, 0, &v) || v == 0) {
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
    clock_start(m, "ncclUniqueId exchange and ncclCommInitRank", -1);
    if (m->host.rank == 0)
        TP_NCCL_TRY(ncclGetUniqueId(&id));
    if (mpi_check(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast of the ncclUniqueId", err,
                  errlen))
        return -1;
    TP_NCCL_TRY(ncclCommInitRank(&m->nccl, m->host.world, id, m->host.rank));
    atomic_store(&m->live, m->nccl);
    return clock_stop(m, err, errlen);      /* bring-up: complete */
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
    m->job = *host;
    m->root = true;
    c->ops = &nccl_ops;
    c->rank = host->rank;
    c->world = host->world;
    c->impl = m;
    c->node = host->node;
    if (host->world <= 1)
        return 0;
    if (parse_timeout(&m->timeout, err, errlen) || start(m, err, errlen))
        return -1;
    tp_gpu_ctx.on_fatal = on_fatal;
    tp_gpu_ctx.on_fatal_ctx = m;
    return join(m, err, errlen);
}
