/* stall.c: see stall.h. */
#include "runtime/comm/stall.h"
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
    double seconds;
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

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int tp_stall_timeout(double *seconds, char *err, size_t errlen)
{
    const char *v = getenv("TPRUN_TIMEOUT");
    *seconds = 600;
    if (!v)
        return 0;
    double s;
    if (tp_parse_real(v, 0, &s) || s == 0) {
        snprintf(err, errlen, "TPRUN_TIMEOUT takes a positive number of seconds, not '%s'", v);
        return -1;
    }
    *seconds = s;
    return 0;
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
        long current = atomic_load(&w->current);
        double waited = now() - atomic_load(&w->since);
        if (w->stop || !current || waited < w->seconds)
            continue;
        fprintf(stderr, "tprun: rank %d: collective %ld (%s of %lld elements) has not completed after %.0f s: "
                        "another rank stalled or died (TPRUN_TIMEOUT=%g); ending every rank\n",
                w->rank, current, atomic_load(&w->what), (long long)atomic_load(&w->elems), waited, w->seconds);
        fflush(stderr);
        w->abort_job(w->ctx);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int tp_stall_watch_start(tp_stall_watch **out, int rank, double seconds, void (*abort_job)(void *ctx), void *ctx,
                         char *err, size_t errlen)
{
    tp_stall_watch *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory starting the stall watchdog");
        return -1;
    }
    w->rank = rank;
    w->seconds = seconds;
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
    atomic_store(&w->since, now());
    atomic_store(&w->current, ++w->count);
}

void tp_stall_leave(tp_stall_watch *w)
{
    if (w)
        atomic_store(&w->current, 0);
}
