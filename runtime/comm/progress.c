/* comm/progress.c: see progress.h. */
#include "runtime/comm/progress.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include "util/errmsg.h"
#include "util/number.h"

typedef struct record {
    _Atomic int rank;              /* -1 until the communicator knows it */
    _Atomic int64_t step;
    _Atomic(const char *) phase;   /* a string literal; NULL before any */
    atomic_bool io;                /* phase is an I/O phase */
    _Atomic double since;          /* when the I/O phase began */
} record;

static record own = {.rank = -1};
static record *rec = &own;

double tp_progress_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int tp_progress_share(char *err, size_t errlen)
{
    void *p = mmap(NULL, sizeof *rec, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return tp_error(err, errlen, "cannot map the memory a rank shares with its monitor: %s", strerror(errno));
    memcpy(p, rec, sizeof *rec);   /* nothing else runs yet: a plain copy is whole */
    rec = p;
    return 0;
}

/* The tests' way to kill a rank at a chosen point, as SIGKILL from
 * outside would: TPRUN_TEST_KILL=R:S:PHASE raises SIGKILL in rank R
 * when, at step S, it enters a phase whose name holds PHASE. */
static struct {
    bool armed;
    int64_t step;
    const char *phase;
} kill_at;

static void arm_test_kill(int rank)
{
    const char *v = getenv("TPRUN_TEST_KILL");
    const char *colon = v ? strchr(v, ':') : NULL, *second = colon ? strchr(colon + 1, ':') : NULL;
    char number[24];
    int64_t r, step;
    if (!second || colon - v >= (int)sizeof number || second - colon > (int)sizeof number)
        return;
    snprintf(number, sizeof number, "%.*s", (int)(colon - v), v);
    if (tp_parse_int(number, 0, INT32_MAX, &r) || r != rank)
        return;
    snprintf(number, sizeof number, "%.*s", (int)(second - colon - 1), colon + 1);
    if (tp_parse_int(number, 0, INT64_MAX, &step))
        return;
    kill_at.step = step;
    kill_at.phase = second + 1;
    kill_at.armed = true;
}

static void test_kill(const char *what)
{
    if (kill_at.armed && atomic_load(&rec->step) == kill_at.step && strstr(what, kill_at.phase))
        raise(SIGKILL);
}

void tp_progress_set_rank(int rank)
{
    atomic_store(&rec->rank, rank);
    arm_test_kill(rank);
}

int tp_progress_rank(void) { return atomic_load(&rec->rank); }

void tp_progress_step(int64_t step) { atomic_store(&rec->step, step); }

void tp_progress_phase(const char *what)
{
    atomic_store(&rec->io, false);
    atomic_store(&rec->phase, what);
    test_kill(what);
}

void tp_progress_io(const char *what)
{
    atomic_store(&rec->since, tp_progress_now());
    atomic_store(&rec->phase, what);
    atomic_store(&rec->io, true);    /* last: the watchdog reads the phase and its start once this is set */
    test_kill(what);
}

bool tp_progress_in_io(const char **what, double *since)
{
    if (!atomic_load(&rec->io))
        return false;
    *what = atomic_load(&rec->phase);
    *since = atomic_load(&rec->since);
    return true;
}

void tp_progress_where(char *buf, size_t len)
{
    int64_t step = atomic_load(&rec->step);
    const char *phase = atomic_load(&rec->phase);
    if (!phase)
        snprintf(buf, len, "%s", "");
    else if (step > 0)
        snprintf(buf, len, "at step %lld, %s", (long long)step, phase);
    else
        snprintf(buf, len, "%s", phase);
}
