/* fuzz_run.c: libFuzzer entry point. The input is a schedule file, run as
 * tprun runs it (tr_run: load and validate, seeded weights, seeded token
 * ids, the forward step; a training schedule one optimizer step on a
 * token stream of zeros) on the CPU backend, for every rank, each in this
 * process on the mirror communicator (mirror_comm.h). Whatever the loader
 * accepts the executor must run without touching memory it does not own;
 * whatever it refuses must come with a message. Schedules whose sizes
 * would make one input take seconds are skipped: the fuzzer is after
 * memory errors, which the loader's checks do not tell apart by size. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/job/run.h"
#include "runtime/io/npy.h"
#include "sched/load.h"
#include "tests/fuzz/mirror_comm.h"
#include "tests/fuzz/scratch.h"

#define MAX_RANKS 4
#define MAX_ARENA_BYTES (1 << 20)
#define MAX_WEIGHT_ELEMS (1 << 18)
#define MAX_WORK ((int64_t)1 << 26)   /* multiply-adds of the matmuls and attentions, per rank */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t saturating_product(const int64_t *v, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (v[i] <= 0)
            return 0;
        if (p > MAX_WORK / v[i])
            return MAX_WORK + 1;
        p *= v[i];
    }
    return p;
}

/* An upper bound of the rank's work, saturated just above MAX_WORK: every
 * other op is linear in the buffers it touches, which the arena bounds. */
static bool small_enough(const tr_schedule *s)
{
    if (s->arena_bytes > MAX_ARENA_BYTES || s->weight_elems > MAX_WEIGHT_ELEMS || s->nops > 4096)
        return false;
    int64_t work = 0;
    for (int i = 0; i < s->nops && work <= MAX_WORK; i++) {
        const tr_op *op = &s->ops[i];
        int64_t mm[] = {op->m, op->n, op->k}, attn[] = {op->batch, op->heads, op->seq, op->seq, op->head_dim};
        work += saturating_product(mm, 3) + saturating_product(attn, 5);
    }
    return work <= MAX_WORK;
}

/* A training run's token stream: zeros, as many as one step reads. */
static const char *zero_tokens(const tr_schedule *s)
{
    const char *path = tp_fuzz_path("data.npy");
    int64_t n = tr_buf_elems(&s->bufs[s->input_ids]);
    int32_t *ids = calloc((size_t)n + 1, sizeof *ids);
    char err[400];
    int rc = ids ? tp_npy_write_i32(path, ids, &n, 1, err, sizeof err) : -1;
    free(ids);
    return rc ? NULL : path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = tp_fuzz_path("input.sched");
    if (tp_fuzz_write(path, data, size))
        return 0;
    char err[1200];
    tr_schedule s;
    if (tr_schedule_load(&s, path, 0, 0, err, sizeof err))
        return 0;
    int ranks = s.world * s.data_parallel;
    tr_options o = {.schedule = path, .tolerance = 1e-4, .quiet = true, .threads = 1, .backend = "cpu",
                    .train = tr_train_defaults()};
    o.labels = s.loss >= 0 && !s.grads ? "tokens" : NULL;    /* training reads its labels from --data */
    if (s.grads) {
        o.train.streams[TR_STREAM_DATA] = zero_tokens(&s);
        o.train.steps = 1;
    }
    bool run = ranks <= MAX_RANKS && small_enough(&s) && (!s.grads || o.train.streams[TR_STREAM_DATA]);
    tr_schedule_free(&s);
    for (int rank = 0; run && rank < ranks; rank++) {
        tp_comm comm;
        tp_comm_mirror(&comm, rank, ranks);
        err[0] = '\0';
        bool everywhere;
        if (tr_run(&o, &comm, &everywhere, err, sizeof err) && !err[0]) {
            fprintf(stderr, "fuzz_run: rank %d failed without a message\n", rank);
            abort();
        }
    }
    return 0;
}
