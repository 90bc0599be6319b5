/* fuzz_schedule.c: libFuzzer entry point. The input is a schedule file,
 * loaded and validated for each of its first ranks as tprun loads it, and
 * printed by tpcc --dump's reader. A schedule the loader accepts must be
 * one the executor can run (fuzz_run.c runs them); one it refuses must say
 * why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "sched/format.h"
#include "sched/load.h"
#include "tests/fuzz/scratch.h"

#define MAX_RANKS 4   /* ranks loaded per input: rank 0 and the first few others */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused_with_a_reason(const char *what, const char *err)
{
    if (!err[0]) {
        fprintf(stderr, "fuzz_schedule: %s refused a schedule without a message\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *path;
    static FILE *devnull;
    if (!path) {
        path = tp_fuzz_path("input.sched");
        if (!(devnull = fopen("/dev/null", "w")))
            abort();
    }
    if (tp_fuzz_write(path, data, size))
        return 0;
    char err[1024];
    for (int rank = 0; rank < MAX_RANKS; rank++) {
        tr_schedule s;
        err[0] = '\0';
        if (tr_schedule_load(&s, path, rank, 0, err, sizeof err)) {
            refused_with_a_reason("tr_schedule_load", err);
            break;
        }
        int ranks = s.world * s.data_parallel;
        tr_schedule_free(&s);
        if (rank + 1 >= ranks)
            break;
    }
    err[0] = '\0';
    if (tp_schedule_dump(path, 0, devnull, err, sizeof err))
        refused_with_a_reason("tp_schedule_dump", err);
    return 0;
}
