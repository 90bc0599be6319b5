/* job_options.h: what tprun's command line says about one job: the
 * schedule, the weights, the inputs and outputs, and for a training
 * schedule the training options (options.h). The job (runtime/job/run.h)
 * runs with them and the training loop (train.h) reads them, so they sit
 * here, below both. */
#ifndef TPRUN_TRAIN_JOB_OPTIONS_H
#define TPRUN_TRAIN_JOB_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
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

#endif /* TPRUN_TRAIN_JOB_OPTIONS_H */
