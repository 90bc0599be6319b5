/* exec.h: the executor: walks a rank's ops, calling the backend's kernels
 * and the communicator's collectives. One executor for every backend: it
 * knows nothing of CPUs or GPUs. */
#ifndef TPRUN_EXEC_H
#define TPRUN_EXEC_H

#include <stdio.h>
#include "runtime/backends/backend.h"
#include "runtime/comm/comm.h"
#include "sched/load.h"
#include "sched/workspace.h"

typedef struct tr_trace_event {
    int op;                      /* index in the rank's ops */
    double start_us, dur_us;
} tr_trace_event;

/* Where a step's time went. The executor fills the op times; a training
 * step adds what it does outside the schedule (the trainer, train.c). */
typedef struct tr_profile {
    double seconds[TP_OP_COUNT];  /* time per op kind */
    int count[TP_OP_COUNT];
    double phase_seconds[TP_PHASE_COUNT];   /* the ops' time per phase (forward, backward, grad_sync) */
    double dp_seconds;            /* training: gradients averaged over the data-parallel replicas */
    double optimizer_seconds;     /* training: the gradient norm, clipping and AdamW */
    double comm_bytes;            /* bytes of the full tensors this rank's collectives moved */
    double total_seconds;         /* all of the above */
} tr_profile;

/* Of n steps' profiles: every step's total time, in the order run, into
 * seconds[0, n); the median step's profile (by total time; the lower
 * middle one for an even n, so its op times add up to one real step)
 * into *kept. Sorts steps. */
void tr_profile_keep_median(tr_profile *kept, tr_profile *steps, int n, double *seconds);

typedef struct tr_exec {
    const tr_schedule *s;
    const tp_backend *be;
    tp_comm *comm;
    tp_comm *dp;                 /* the data-parallel replicas of this rank (a training run), or NULL */
    char *arena;                 /* backend memory: activations */
    char *weights;               /* backend memory: this rank's weight slices, in be->dtype */
    float *staging[TP_STAGING_BUFFERS]; /* backend memory: reshard staging, never reallocated */
    size_t staging_bytes;        /* of each */
    tr_profile profile;
    tr_trace_event *trace;       /* one per op of the last run */
    double **rope_inv_freq;      /* per op: RoPE's inverse frequencies, then their negations (rope,
                                    rope_attention and its gradient; else NULL), computed once from
                                    the op's attributes */
    bool tracing;                /* op times wanted (profile, trace): an asynchronous
                                    backend is synchronised after every op */
    double loss_divisor;         /* > 0: a training step's cross-entropy is its sum over
                                    this (tp_ce_rule); 0: the mean over the rank's labels */
} tr_exec;

/* Allocate the arena, the weight region and the staging buffers once,
 * after checking that be computes in s's dtype and has every kernel and
 * limit s needs (kernels_check.h, limits_check.h). Returns 0 or -1 with a
 * message. */
int tr_exec_init(tr_exec *x, const tr_schedule *s, const tp_backend *be, tp_comm *comm, char *err, size_t errlen);
void tr_exec_free(tr_exec *x);

/* Copy host data into the arena buffer b / out of it: int32 for id
 * buffers, float32 for floating-point ones whatever the backend stores
 * (bf16 is converted, rounding to nearest even). */
void tr_exec_write_buf(tr_exec *x, int b, const void *src);
void tr_exec_read_buf(tr_exec *x, int b, void *dst);
/* n elements of type t at src (backend memory) into dst as read_buf
 * gives them: int32 or float32. */
void tr_exec_download(tr_exec *x, void *dst, const void *src, int64_t n, tp_dtype t);
/* Fill the weight region from host float32 (s->weight_elems values, laid
 * out by region_offset), converted to the backend's dtype. Tests write
 * weights of their own with it, on schedules that keep the whole region
 * (not FSDP's runs); tprun loads with tr_weights_load, which keeps no host
 * copy of the region. */
void tr_exec_write_weights(tr_exec *x, const float *host);

/* Where buffer b and weight w's slice (with FSDP, this rank's run of it)
 * live in backend memory, for the optimizer, which updates weights from
 * the gradient buffers in place. */
float *tr_exec_buf(const tr_exec *x, int b);
float *tr_exec_weight(const tr_exec *x, int w);

/* Run every op once. On failure the message names the rank, the op, its
 * module and plan entry. */
int tr_exec_run(tr_exec *x, char *err, size_t errlen);
/* The first nops ops of the schedule only (a training schedule's forward:
 * the ops up to the one that writes the loss). */
int tr_exec_run_ops(tr_exec *x, int nops, char *err, size_t errlen);

#endif /* TPRUN_EXEC_H */
