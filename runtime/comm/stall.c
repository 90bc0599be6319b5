/* stall.c: see stall.h. */
#include "runtime/comm/stall.h"
#include "runtime/comm/progress.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "util/number.h"

struct tp_stall_watch {
    int rank;
    tp_stall_limits limits;
    void (*abort_job)(void *ctx);
    void *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stop;
    /* the collective in flight: its ordinal (0: none), name, size and start */
    _Atomic long current;
    _Atomic(const char *) what;
    _Atomic int64_t elems;
    _Atomic double since;
    long count;
};

/* The environment's `name` in *seconds, or `fallback`. */
static int limit(const char *name, double fallback, double *seconds, char *err, size_t errlen)
{
    const char *v = getenv(name);
    *seconds = fallback;
    if (!v)
        return 0;
    double s;
    if (tp_parse_real(v, 0, &s) || s == 0) {
        snprintf(err, errlen, "%s takes a positive number of seconds, not '%s'", name, v);
        return -1;
    }
    *seconds = s;
    return 0;
}

int tp_stall_limits_get(tp_stall_limits *l, char *err, size_t errlen)
{
    return limit("TPRUN_TIMEOUT", 600, &l->collective, err, errlen) ||
           limit("TPRUN_IO_TIMEOUT", 7200, &l->io, err, errlen) ? -1 : 0;
}

/* An I/O phase past its limit, or else a collective past its own: the
 * rank says which and ends every rank. */
static void check(tp_stall_watch *w)
{
    const char *phase;
    double since, t = tp_progress_now();
    if (tp_progress_in_io(&phase, &since)) {
        if (t - since < w->limits.io)
            return;
        char where[200];
        tp_progress_where(where, sizeof where);
        fprintf(stderr, "tprun: rank %d: %s: not done after %.0f s (TPRUN_IO_TIMEOUT=%g): a file system stalled, or "
                        "a rank stopped or died in it; ending every rank (a slow file system needs a larger "
                        "TPRUN_IO_TIMEOUT)\n", w->rank, where, t - since, w->limits.io);
    } else {
        long current = atomic_load(&w->current);
        double waited = t - atomic_load(&w->since);
        if (!current || waited < w->limits.collective)
            return;
        fprintf(stderr, "tprun: rank %d: collective %ld (%s of %lld elements) has not completed after %.0f s: "
                        "another rank stalled or died (TPRUN_TIMEOUT=%g); ending every rank\n",
                w->rank, current, atomic_load(&w->what), (long long)atomic_load(&w->elems), waited,
                w->limits.collective);
    }
    fflush(stderr);
    w->abort_job(w->ctx);
}

static void *watch(void *arg)
{
    tp_stall_watch *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&w->wake, &w->lock, &until);
        if (!w->stop)
            check(w);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int tp_stall_watch_start(tp_stall_watch **out, int rank, tp_stall_limits limits, void (*abort_job)(void *ctx),
                         void *ctx, char *err, size_t errlen)
{
    tp_stall_watch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory starting the stall watchdog");
        return -1;
    }
    w->rank = rank;
    w->limits = limits;
    w->abort_job = abort_job;
    w->ctx = ctx;
    int rc = pthread_mutex_init(&w->lock, NULL);
    if (!rc && (rc = pthread_cond_init(&w->wake, NULL)) != 0)
        pthread_mutex_destroy(&w->lock);
    if (!rc && (rc = pthread_create(&w->thread, NULL, watch, w)) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
    }
    if (rc) {
        free(w);
        snprintf(err, errlen, "cannot start the stall watchdog: %s", strerror(rc));
        return -1;
    }
    *out = w;
    return 0;
}

void tp_stall_watch_stop(tp_stall_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void tp_stall_enter(tp_stall_watch *w, const char *what, int64_t n)
{
    if (!w)
        return;
    atomic_store(&w->what, what);
    atomic_store(&w->elems, n);
    atomic_store(&w->since, tp_progress_now());
    atomic_store(&w->current, ++w->count);
}

void tp_stall_leave(tp_stall_watch *w)
{
    if (w)
        atomic_store(&w->current, 0);
}
