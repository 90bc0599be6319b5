/* dp.h: data parallelism for training: D replicas of one tensor-parallel
 * group of T ranks (a schedule with "data_parallel": D).
 *
 * Launch rank r is replica r / T and tp rank r % T: the tp dimension
 * fastest, as torch's init_device_mesh(("dp", "tp")) lays ranks out. The
 * world splits into a tp communicator per replica (the executor's: the
 * replica runs the schedule as a job of T ranks would) and a dp
 * communicator per tp rank (the replicas' copies of the same shard, over
 * which the gradients are averaged). */
#ifndef TPRUN_TRAIN_DP_H
#define TPRUN_TRAIN_DP_H

#include <stdbool.h>
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"

typedef struct tr_dp {
    tp_comm tp, dp;
    tp_comm *world;       /* the job's: what every rank agrees on (tp_agree) */
    bool split;           /* tp and dp are groups of the world to release */
} tr_dp;

/* Splits `world` into the groups of a dp x tp job (dp == 1: tp is the
 * world itself and dp a single rank). Collective over world. Returns 0, or
 * -1 with a message (a communicator that cannot split: NCCL before 2.18). */
int tr_dp_init(tr_dp *g, tp_comm *world, int tp, int dp, char *err, size_t errlen);
void tr_dp_free(tr_dp *g);

/* Every gradient of x summed over the dp group and divided by its size:
 * the gradient of the mean loss over the global batch. */
int tr_dp_average_grads(tp_comm *dp, tr_exec *x, char *err, size_t errlen);

/* The mean of `value` over the dp group, through `scratch` (one float of
 * backend memory). */
int tr_dp_mean(tp_comm *dp, tr_exec *x, float *scratch, float *value, char *err, size_t errlen);

#endif /* TPRUN_TRAIN_DP_H */
