/* pool.c: see pool.h. Workers sleep on a condition variable between
 * kernels (the machine may be shared; a spinning worker would take a core
 * from another rank), and wake when the generation count moves. Worker i
 * computes part i of the current job, the caller part 0. */
#include "runtime/backends/cpu/pool.h"

#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define POOL_MAX_THREADS 256 /* tprun's --threads limit */

static struct {
    pthread_mutex_t busy;   /* held by the thread running a job, and while resizing */
    pthread_mutex_t lock;   /* guards the fields below */
    pthread_cond_t start, done;
    pthread_t workers[POOL_MAX_THREADS];
    int nworkers;           /* threads besides the caller */
    uint64_t generation;    /* counts jobs: a worker runs each new one once */
    uint64_t started_at;    /* the generation when the workers were started: a worker that
                               first runs after a job was posted must still see it as new */
    bool stopping;
    /* the current job, fixed while it runs */
    tp_cpu_task task;
    void *ctx;
    int64_t n;
    int parts, pending;     /* parts in all; parts the workers have not finished */
} pool = {
    .busy = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .start = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

/* part p of parts: [n p / parts, n (p + 1) / parts) */
static void run_part(int part)
{
    const int64_t begin = pool.n * part / pool.parts, end = pool.n * (part + 1) / pool.parts;
    if (begin < end)
        pool.task(pool.ctx, begin, end);
}

static void *worker(void *arg)
{
    const int index = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    uint64_t seen = pool.started_at;
    for (;;) {
        while (pool.generation == seen && !pool.stopping)
            pthread_cond_wait(&pool.start, &pool.lock);
        if (pool.stopping)
            break;
        seen = pool.generation;
        if (index >= pool.parts)
            continue;
        pthread_mutex_unlock(&pool.lock);
        run_part(index);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* with busy held */
static void stop_workers(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.stopping = true;
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.nworkers; i++)
        pthread_join(pool.workers[i], NULL);
    pool.nworkers = 0;
    pool.stopping = false;
}

void tp_cpu_pool_resize(int threads)
{
    /* BLAS runs inside the pool's parts: see pool.h */
    openblas_set_num_threads(1);
    if (threads > POOL_MAX_THREADS)
        threads = POOL_MAX_THREADS;
    pthread_mutex_lock(&pool.busy);
    if (pool.nworkers + 1 != threads) {
        stop_workers();
        pool.started_at = pool.generation; /* no job is posted while busy is held */
        for (int i = 1; i < threads; i++) {
            int rc = pthread_create(&pool.workers[pool.nworkers], NULL, worker, (void *)(intptr_t)i);
            if (rc) {
                fprintf(stderr, "tprun: cannot start CPU thread %d of %d (%s); the CPU kernels run on %d\n", i + 1,
                        threads, strerror(rc), i);
                break;
            }
            pool.nworkers++;
        }
    }
    pthread_mutex_unlock(&pool.busy);
}

void tp_cpu_parallel(int64_t n, int64_t grain, tp_cpu_task task, void *ctx)
{
    if (n <= 0)
        return;
    /* a job already running (this thread's: a task calling back; or
     * another thread's): run here, the answer is the same */
    if (pthread_mutex_trylock(&pool.busy) != 0) {
        task(ctx, 0, n);
        return;
    }
    const int64_t most = n / (grain > 1 ? grain : 1);
    const int parts = most < pool.nworkers + 1 ? (int)(most > 1 ? most : 1) : pool.nworkers + 1;
    if (parts == 1) {
        pthread_mutex_unlock(&pool.busy);
        task(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    pool.task = task;
    pool.ctx = ctx;
    pool.n = n;
    pool.parts = parts;
    pool.pending = parts - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.start);
    pthread_mutex_unlock(&pool.lock);
    run_part(0);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
}
