/* comm_collectives.c: every collective of the MPI communicator
 * (runtime/comm/mpi.c) on small blocks of many sizes, for
 * test_comm_chunks.cc, which runs it under mpiexec with and without
 * TPRUN_MPI_MAX_COUNT.
 *
 *   comm_collectives OUT_PREFIX
 *
 * Rank r checks every result against what it computes itself (the inputs
 * are whole numbers, so every sum is exact in any order) and writes
 * the bits of every result, in order, to OUT_PREFIX.rank<r>, so runs that
 * split the collectives into different chunks can be compared byte for
 * byte. Exits non-zero with a message at the first wrong element. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm/comm.h"
#include "util/xalloc.h"

/* Element i of block b of rank r's input: distinct for every (r, b, i). */
static int value(int r, int b, int64_t i) { return r * 1000 + b * 100 + (int)i; }

typedef struct probe {
    tp_comm comm;
    FILE *out;
    char err[512];
} probe;

/* The result, checked against `want` (elements of `size` bytes), then kept. */
static bool keep(probe *p, const char *what, int64_t n, const void *got, const void *want, int64_t count, size_t size)
{
    for (int64_t i = 0; i < count; i++)
        if (memcmp((const char *)got + i * size, (const char *)want + i * size, size)) {
            fprintf(stderr, "rank %d: %s of %lld: element %lld is wrong\n", p->comm.rank, what, (long long)n,
                    (long long)i);
            return false;
        }
    if (fwrite(got, size, (size_t)count, p->out) != (size_t)count) {
        fprintf(stderr, "rank %d: cannot write the %s result\n", p->comm.rank, what);
        return false;
    }
    return true;
}

static bool failed(probe *p, const char *what, int rc)
{
    if (rc)
        fprintf(stderr, "rank %d: %s: %s\n", p->comm.rank, what, p->err);
    return rc != 0;
}

/* all_gather in fp32 and in bf16 (16-bit words): out block r is rank r's input. */
static bool all_gather(probe *p, int64_t n)
{
    int world = p->comm.world, rank = p->comm.rank;
    float *in = tp_xcalloc((size_t)n + 1, 4), *out = tp_xcalloc((size_t)(world * n) + 1, 4),
          *want = tp_xcalloc((size_t)(world * n) + 1, 4);
    uint16_t *in16 = tp_xcalloc((size_t)n + 1, 2), *out16 = tp_xcalloc((size_t)(world * n) + 1, 2),
             *want16 = tp_xcalloc((size_t)(world * n) + 1, 2);
    for (int64_t i = 0; i < n; i++) {
        in[i] = (float)value(rank, 0, i);
        in16[i] = (uint16_t)value(rank, 0, i);
    }
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < n; i++) {
            want[r * n + i] = (float)value(r, 0, i);
            want16[r * n + i] = (uint16_t)value(r, 0, i);
        }
    bool ok = !failed(p, "all_gather", p->comm.ops->all_gather(&p->comm, TP_F32, out, in, n, p->err, sizeof p->err)) &&
              keep(p, "all_gather", n, out, want, world * n, 4) &&
              !failed(p, "all_gather bf16",
                      p->comm.ops->all_gather(&p->comm, TP_BF16, out16, in16, n, p->err, sizeof p->err)) &&
              keep(p, "all_gather bf16", n, out16, want16, world * n, 2);
    free(in), free(out), free(want), free(in16), free(out16), free(want16);
    return ok;
}

/* reduce_scatter: out is the sum over ranks of block `rank` of their inputs. */
static bool reduce_scatter(probe *p, int64_t n)
{
    int world = p->comm.world, rank = p->comm.rank;
    float *in = tp_xcalloc((size_t)(world * n) + 1, 4), *out = tp_xcalloc((size_t)n + 1, 4),
          *want = tp_xcalloc((size_t)n + 1, 4);
    for (int b = 0; b < world; b++)
        for (int64_t i = 0; i < n; i++)
            in[b * n + i] = (float)value(rank, b, i);
    for (int64_t i = 0; i < n; i++)
        for (int r = 0; r < world; r++)
            want[i] += (float)value(r, rank, i);
    bool ok = !failed(p, "reduce_scatter",
                      p->comm.ops->reduce_scatter(&p->comm, TP_F32, out, in, n, p->err, sizeof p->err)) &&
              keep(p, "reduce_scatter", n, out, want, n, 4);
    free(in), free(out), free(want);
    return ok;
}

/* all_reduce, the sum and the max, in place. */
static bool all_reduce(probe *p, int64_t n, int max)
{
    int world = p->comm.world, rank = p->comm.rank;
    float *buf = tp_xcalloc((size_t)n + 1, 4), *want = tp_xcalloc((size_t)n + 1, 4);
    for (int64_t i = 0; i < n; i++) {
        buf[i] = (float)value(rank, 0, i);
        for (int r = 0; r < world; r++)
            want[i] = max ? (float)value(world - 1, 0, i) : want[i] + (float)value(r, 0, i);
    }
    const char *what = max ? "all_reduce max" : "all_reduce";
    bool ok = !failed(p, what, p->comm.ops->all_reduce(&p->comm, TP_F32, buf, n, max, p->err, sizeof p->err)) &&
              keep(p, what, n, buf, want, n, 4);
    free(buf), free(want);
    return ok;
}

/* reduce_i64, the sum and the min, in place, on values past float64's
 * exact integers (a few ranks' sums of them stay below 2^63). */
static bool reduce_i64(probe *p, int64_t n, int min)
{
    const int64_t big = ((int64_t)1 << 60) + 1;
    int world = p->comm.world, rank = p->comm.rank;
    int64_t *buf = tp_xcalloc((size_t)n + 1, 8), *want = tp_xcalloc((size_t)n + 1, 8);
    for (int64_t i = 0; i < n; i++) {
        buf[i] = big + value(rank, 0, i);
        want[i] = min ? big + value(0, 0, i) : 0;
        for (int r = 0; !min && r < world; r++)
            want[i] += big + value(r, 0, i);
    }
    const char *what = min ? "reduce_i64 min" : "reduce_i64";
    bool ok = !failed(p, what, p->comm.ops->reduce_i64(&p->comm, buf, n, min, p->err, sizeof p->err)) &&
              keep(p, what, n, buf, want, n, 8);
    free(buf), free(want);
    return ok;
}

/* all_to_all: out block r is block `rank` of rank r's input. */
static bool all_to_all(probe *p, int64_t n)
{
    int world = p->comm.world, rank = p->comm.rank;
    float *in = tp_xcalloc((size_t)(world * n) + 1, 4), *out = tp_xcalloc((size_t)(world * n) + 1, 4),
          *want = tp_xcalloc((size_t)(world * n) + 1, 4);
    for (int b = 0; b < world; b++)
        for (int64_t i = 0; i < n; i++) {
            in[b * n + i] = (float)value(rank, b, i);
            want[b * n + i] = (float)value(b, rank, i);
        }
    bool ok = !failed(p, "all_to_all", p->comm.ops->all_to_all(&p->comm, TP_F32, out, in, n, p->err, sizeof p->err)) &&
              keep(p, "all_to_all", n, out, want, world * n, 4);
    free(in), free(out), free(want);
    return ok;
}

/* gather_bytes: rank 0 holds every rank's bytes, rank-major; the others nothing. */
static bool gather_bytes(probe *p, int64_t n)
{
    int world = p->comm.world, rank = p->comm.rank;
    uint8_t *in = tp_xcalloc((size_t)n + 1, 1), *out = rank == 0 ? tp_xcalloc((size_t)(world * n) + 1, 1) : NULL,
            *want = tp_xcalloc((size_t)(world * n) + 1, 1);
    for (int64_t i = 0; i < n; i++)
        in[i] = (uint8_t)(rank * 50 + i);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < n; i++)
            want[r * n + i] = (uint8_t)(r * 50 + i);
    bool ok = !failed(p, "gather_bytes",
                      p->comm.ops->gather_bytes(&p->comm, out, in, (size_t)n, p->err, sizeof p->err)) &&
              (rank != 0 || keep(p, "gather_bytes", n, out, want, world * n, 1));
    free(in), free(out), free(want);
    return ok;
}

int main(int argc, char **argv)
{
    probe p = {0};
    if (tp_comm_mpi(&p.comm, &argc, &argv, p.err, sizeof p.err)) {
        fprintf(stderr, "comm_collectives: %s\n", p.err);
        return 1;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: comm_collectives OUT_PREFIX\n");
        p.comm.ops->finalize(&p.comm);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s.rank%d", argv[1], p.comm.rank);
    p.out = fopen(path, "wb");
    bool ok = p.out != NULL;
    if (!ok)
        fprintf(stderr, "rank %d: cannot write %s\n", p.comm.rank, path);
    /* ragged sizes: none, one, below, at and past small limits, odd */
    static const int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 11, 13, 29};
    for (size_t s = 0; ok && s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        ok = all_gather(&p, n) && reduce_scatter(&p, n) && all_reduce(&p, n, 0) && all_reduce(&p, n, 1) &&
             reduce_i64(&p, n, 0) && reduce_i64(&p, n, 1) && all_to_all(&p, n) && gather_bytes(&p, n);
    }
    if (p.out && fclose(p.out) != 0 && ok) {
        fprintf(stderr, "rank %d: cannot write %s\n", p.comm.rank, path);
        ok = false;
    }
    if (!ok) {
        p.comm.ops->abort(&p.comm, 1);     /* the other ranks would wait in their next collective */
        return 1;
    }
    p.comm.ops->finalize(&p.comm);
    return 0;
}
