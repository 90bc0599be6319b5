/* bench_sgemm.c: the OpenBLAS reference for tools/bench_tprun.sh.
 *
 * Times cblas_sgemm(RowMajor, NoTrans, Trans, m, n, k) -- exactly the call
 * the CPU backend makes for a matmul op (x [m, k] times w^T, w [n, k]) --
 * for a list of shapes, each with the number of times a schedule runs it:
 *
 *   bench_sgemm [--threads T] [--min-seconds S] [--min-passes P] M,N,K,COUNT...
 *
 * A shape that a forward step runs COUNT times (q_proj in every layer, say)
 * multiplies COUNT different weight matrices, each read once. The benchmark
 * does the same: it allocates COUNT copies of the weight operand (up to a
 * memory cap, then cycles) and one pass calls sgemm once on each copy, so
 * the weights are not flattered by sitting in cache the way one matrix
 * multiplied over and over would be. One untimed pass warms up (page
 * faults, OpenBLAS's thread pool); then passes repeat until both
 * --min-seconds (default 0.3) and --min-passes (default 3) are reached.
 * The time of a call is the median pass time / COUNT.
 *
 * Output, whitespace separated: the library, one line per shape, a total:
 *
 *   openblas THREADS CORENAME CONFIG...
 *   shape M N K COUNT SECONDS_PER_CALL GFLOPS
 *   total FLOPS SECONDS GFLOPS        (FLOPS = sum 2 M N K COUNT,
 *                                      SECONDS = sum COUNT x seconds per call)
 *
 * Build: gcc -O2 tools/bench_sgemm.c $(pkg-config --cflags --libs openblas) -o bench_sgemm
 * (or the bench_sgemm target of tools/CMakeLists.txt). */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OpenBLAS extensions (declared in its cblas.h; repeated so that building
 * against another CBLAS fails at link time, naming the missing function) */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);
char *openblas_get_corename(void);

#define MAX_WEIGHT_BYTES ((size_t)1 << 30) /* copies of one shape's weight: at most 1 GiB */

typedef struct shape {
    long m, n, k, count;
} shape;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "bench_sgemm: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* Small values in [-0.5, 0.5): no denormals, no overflow. */
static void fill(float *p, size_t n, uint64_t seed)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(z >> 40) / (double)(1ull << 24)) - 0.5f;
    }
}

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > INT_MAX)
        return -1;
    *out = v;
    return 0;
}

static int parse_shape(const char *arg, shape *sh)
{
    char buf[128];
    if (strlen(arg) >= sizeof buf)
        return -1;
    strcpy(buf, arg);
    long v[4];
    char *save = NULL, *tok = strtok_r(buf, ",", &save);
    for (int i = 0; i < 4; i++) {
        if (!tok || parse_long(tok, &v[i]))
            return -1;
        tok = strtok_r(NULL, ",", &save);
    }
    if (tok)
        return -1;
    *sh = (shape){v[0], v[1], v[2], v[3]};
    return 0;
}

/* Seconds per call of one shape. */
static double time_shape(const shape *sh, double min_seconds, int min_passes)
{
    size_t a_elems = (size_t)sh->m * (size_t)sh->k, w_elems = (size_t)sh->n * (size_t)sh->k,
           c_elems = (size_t)sh->m * (size_t)sh->n;
    long copies = sh->count;
    size_t cap = MAX_WEIGHT_BYTES / (w_elems * sizeof(float));
    if (cap < 1)
        cap = 1;
    if ((size_t)copies > cap)
        copies = (long)cap;
    float *a = xmalloc(a_elems * sizeof *a), *c = xmalloc(c_elems * sizeof *c);
    float **w = xmalloc((size_t)copies * sizeof *w);
    fill(a, a_elems, 1);
    for (long i = 0; i < copies; i++) {
        w[i] = xmalloc(w_elems * sizeof *w[i]);
        fill(w[i], w_elems, (uint64_t)i + 2);
    }
    int m = (int)sh->m, n = (int)sh->n, k = (int)sh->k;
    int cap_passes = 1000;
    double *pass = xmalloc((size_t)cap_passes * sizeof *pass), total = 0;
    int npass = 0;
    for (int p = -1; p < cap_passes; p++) { /* p = -1: the untimed warm-up pass */
        double t0 = now_seconds();
        for (long i = 0; i < sh->count; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, w[i % copies], k, 0.0f, c, n);
        double dt = now_seconds() - t0;
        if (p < 0)
            continue;
        pass[npass++] = dt;
        total += dt;
        if (npass >= min_passes && total >= min_seconds)
            break;
    }
    qsort(pass, (size_t)npass, sizeof *pass, cmp_double);
    double med = npass % 2 ? pass[npass / 2] : 0.5 * (pass[npass / 2 - 1] + pass[npass / 2]);
    volatile float sink = c[0]; /* keep the products observable */
    (void)sink;
    for (long i = 0; i < copies; i++)
        free(w[i]);
    free(w);
    free(a);
    free(c);
    free(pass);
    return med / (double)sh->count;
}

int main(int argc, char **argv)
{
    long threads = 1, min_passes = 3;
    double min_seconds = 0.3;
    shape *shapes = xmalloc((size_t)argc * sizeof *shapes);
    int nshapes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (parse_long(argv[++i], &threads) || threads > 256)
                goto usage;
        } else if (!strcmp(argv[i], "--min-passes") && i + 1 < argc) {
            if (parse_long(argv[++i], &min_passes) || min_passes > 1000)
                goto usage;
        } else if (!strcmp(argv[i], "--min-seconds") && i + 1 < argc) {
            char *end;
            min_seconds = strtod(argv[++i], &end);
            if (*end || !(min_seconds >= 0))
                goto usage;
        } else if (parse_shape(argv[i], &shapes[nshapes++])) {
            fprintf(stderr, "bench_sgemm: '%s' is not M,N,K,COUNT (positive integers)\n", argv[i]);
            goto usage;
        }
    }
    if (!nshapes)
        goto usage;
    openblas_set_num_threads((int)threads);
    printf("openblas %d %s %s\n", openblas_get_num_threads(), openblas_get_corename(), openblas_get_config());

    double flops = 0, seconds = 0;
    for (int i = 0; i < nshapes; i++) {
        const shape *sh = &shapes[i];
        double sec = time_shape(sh, min_seconds, (int)min_passes);
        double f = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k;
        printf("shape %ld %ld %ld %ld %.9g %.3f\n", sh->m, sh->n, sh->k, sh->count, sec, f / sec * 1e-9);
        fflush(stdout);
        flops += f * (double)sh->count;
        seconds += sec * (double)sh->count;
    }
    printf("total %.0f %.9g %.3f\n", flops, seconds, flops / seconds * 1e-9);
    free(shapes);
    return 0;

usage:
    fprintf(stderr, "usage: bench_sgemm [--threads T] [--min-seconds S] [--min-passes P] M,N,K,COUNT...\n");
    free(shapes);
    return 2;
}
