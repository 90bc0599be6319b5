/* pool.h: the CPU backend's worker threads, one pool sized by tprun's
 * --threads, which every CPU kernel splits its work over.
 *
 * A kernel hands tp_cpu_parallel a range [0, n) of independent items
 * (rows, heads, column blocks) and a function that computes a contiguous
 * part of it. Each item's result must depend on the item alone, never on
 * which part it falls in: the parts change with the thread count, and
 * tprun's output must not (--threads 1, 2 and 3 agree bit for bit). A
 * reduction across items is therefore cut into parts of a fixed size
 * (independent of the thread count) whose partial results the caller adds
 * in order.
 *
 * BLAS: every kernel that calls BLAS does so from inside the pool, one call
 * per part, so OpenBLAS itself runs single-threaded (tp_cpu_pool_resize
 * sets it to one thread); its own worker threads never compete with the
 * pool's for the cores. */
#ifndef TPRUN_CPU_POOL_H
#define TPRUN_CPU_POOL_H

#include <stdint.h>

/* computes items [begin, end) */
typedef void (*tp_cpu_task)(void *ctx, int64_t begin, int64_t end);

/* The threads the kernels use from now on (the caller's included): 1 runs
 * everything on the calling thread. A thread that cannot be started is
 * reported on stderr and the pool runs with those it has. */
void tp_cpu_pool_resize(int threads);

/* Runs task over [0, n) in contiguous parts of at least `grain` items (so
 * small ops don't pay for waking threads), one per thread at most, and
 * returns when all are done. Called while the pool is busy (another
 * thread's kernel, or from inside a task) it runs the whole range on the
 * calling thread. */
void tp_cpu_parallel(int64_t n, int64_t grain, tp_cpu_task task, void *ctx);

#endif /* TPRUN_CPU_POOL_H */
