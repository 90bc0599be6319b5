/* gpu_share.h: whether ranks of the job share a GPU, which NCCL refuses
 * (it needs one device per rank) and the host-staged communicator of the
 * CUDA backend (comm_staged.c) allows.
 *
 * A GPU is known by its PCI bus id on its node, as NCCL knows it: ranks
 * that each see one GPU of their own (Slurm's --gpus-per-task=1, a
 * CUDA_VISIBLE_DEVICES per rank) take device 0 of their process and still
 * share nothing, which counting the GPUs a process sees cannot tell. */
#ifndef TPRUN_COMM_GPU_SHARE_H
#define TPRUN_COMM_GPU_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include "runtime/comm/comm.h"

typedef struct tp_rank_gpu {
    tp_rank_node node;
    char bus_id[32];        /* the PCI bus id of the rank's device, "0000:41:00.0" */
} tp_rank_gpu;

/* Over every rank's GPU: the first node (in node order) whose ranks
 * outnumber the GPUs they run on, as "4 ranks share 1 GPU on node 0
 * (host)" in msg; 0 when every rank has a GPU of its own. Returns the
 * number of nodes where ranks share a GPU. */
int tp_gpu_sharing(const tp_rank_gpu *ranks, int world, char *msg, size_t msglen);

/* Collective over host: whether any ranks of the job share a GPU, told to
 * every rank (*shared); rank 0 gets tp_gpu_sharing's message in msg.
 * `bus_id` is this rank's device. Returns 0 or -1 with a message. */
int tp_gpus_shared(tp_comm *host, const char *bus_id, bool *shared, char *msg, size_t msglen, char *err,
                   size_t errlen);

#endif /* TPRUN_COMM_GPU_SHARE_H */
