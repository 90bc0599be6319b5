/* node.h: which node each rank runs on, and what follows from it: the GPU
 * a rank takes, the rank map tprun prints, and whether a tensor-parallel
 * group crosses nodes.
 *
 * Ranks are laid out tp fastest: world rank r is data-parallel replica
 * r / T and tensor-parallel rank r % T (train/dp.c), so a tp group is T
 * consecutive ranks and stays inside a node when every node holds a
 * multiple of T consecutive ranks. Everything but tp_node_alone is a pure
 * function of its arguments, so the tests give it any layout of nodes. */
#ifndef TPRUN_COMM_NODE_H
#define TPRUN_COMM_NODE_H

#include <stddef.h>
#include "runtime/comm/comm.h"
#include "util/xalloc.h"

/* The node of a process that is a job by itself (index 0 of 1, local rank
 * 0 of 1) on this machine, named by its host name. */
void tp_node_alone(tp_rank_node *node);

/* The device a rank takes among the `visible` usable devices its process
 * sees: the only one when it sees one (Slurm's --gpus-per-task=1 and any
 * launcher setting CUDA_VISIBLE_DEVICES per rank give each rank its own),
 * else the one at its local rank, modulo `visible` on a node running more
 * ranks than it shows GPUs: ranks then share GPUs, which NCCL refuses and
 * the host-staged communicator allows (gpu_share.h). -1 with a message
 * naming the host when the rank sees no GPU. */
int tp_node_gpu(const tp_rank_node *node, int visible, char *err, size_t errlen);

/* The rank map, one line per node (at most 8, then how many more):
 * "node 0 (host): 0-3 (dp 0-1 x tp 0-1)", every line after the first
 * preceded by `indent`, each ending in a newline. `nodes` holds each of
 * the `world` ranks' tp_rank_node; `tp` divides world. */
void tp_node_rank_map(tp_buf *out, const tp_rank_node *nodes, int world, int tp, const char *indent);

/* The number of tensor-parallel groups (tp consecutive ranks) whose ranks
 * are on more than one node, with the warning about the first in msg
 * (nothing written when there is none). */
int tp_node_tp_spans(const tp_rank_node *nodes, int world, int tp, char *msg, size_t msglen);

#endif /* TPRUN_COMM_NODE_H */
