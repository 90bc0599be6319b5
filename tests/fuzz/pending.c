/* pending.c: the check of regress/pending/, driven by replay.c: the input,
 * a schedule a fuzzer found that the loader accepts and the executor then
 * runs out of bounds or misaligned, must be refused by the loader for one
 * of its first ranks; an accepted one ends the process with status 1 (a
 * status, not an abort: ctest inverts a status under WILL_FAIL, never a
 * crash). Each input is its own test,
 * Fuzz.Pending.NAME, expected to fail (WILL_FAIL) while the loader
 * accepts it. When one starts failing, the loader refuses its input: move
 * the input to regress/run/, where fuzz_replay_run runs it with the
 * corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "sched/load.h"
#include "tests/fuzz/scratch.h"

#define MAX_RANKS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = tp_fuzz_path("input.sched");
    if (tp_fuzz_write(path, data, size))
        abort();
    char err[1024];
    for (int rank = 0; rank < MAX_RANKS; rank++) {
        tr_schedule s;
        if (tr_schedule_load(&s, path, rank, 0, err, sizeof err)) {
            printf("refused: %s\n", err);
            return 0;
        }
        int ranks = s.world * s.data_parallel;
        tr_schedule_free(&s);
        if (rank + 1 >= ranks)
            break;
    }
    fprintf(stderr, "pending: the loader accepts this schedule\n");
    exit(1);
}
