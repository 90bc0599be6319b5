/* run.h: one tprun job on one rank: load the schedule and this rank's
 * weights, read the inputs, run the forward step, and produce the outputs
 * (logits, loss, summary, profile, trace), gathered on rank 0; or, for a
 * training schedule, hand the loaded weights to the training loop. */
#ifndef TPRUN_RUN_H
#define TPRUN_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include "runtime/comm/comm.h"
#include "runtime/train/options.h"

typedef struct tr_options {
    const char *schedule;
    const char *weights;        /* NULL: seeded initialisation */
    uint64_t seed;
    const char *tokens, *labels;
    const char *out, *compare;
    double tolerance;
    bool profile, quiet;
    const char *profile_json, *trace;
    int threads;
    int repeat;                 /* --repeat: forward steps on the same inputs (0: not given, one) */
    const char *backend;        /* "cpu" or "cuda" (tprun resolves the default) */
    const char *comm;           /* --comm: "nccl" or "mpi" for the CUDA backend; NULL: nccl unless ranks share GPUs */
    tr_train_options train;     /* a training schedule's run (runtime/train/) */
} tr_options;

/* Returns 0, or an exit status with a message (naming this rank) in err.
 * With o->backend "cuda", tp_gpu_init has run and comm is tp_comm_nccl's or
 * tp_comm_staged's. */
int tr_run(const tr_options *o, tp_comm *comm, char *err, size_t errlen);

#endif /* TPRUN_RUN_H */
