/* comm.h: the table of collectives a communicator provides.
 *
 * MPI on the CPU; NCCL on GPUs. Every call is collective over the whole
 * communicator: the world, or a group split off it. Buffers are contiguous, in the backend's memory, of element type
 * `t` (TP_F32, or TP_BF16 for the activations of a bf16 schedule, whose
 * loss pieces stay TP_F32); counts are elements. The executor rearranges
 * data so that the gathered or scattered dimension is the outermost one.
 * A host communicator (MPI, single) has finished its part when a call
 * returns; a device communicator (NCCL) has queued it in order with the
 * backend's compute (the backend's to_host waits for it). On failure a call
 * returns -1 with a message; the executor then aborts the whole job
 * (tp_comm.abort) so no rank is left waiting. */
#ifndef TPRUN_COMM_H
#define TPRUN_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sched/ops.h"     /* tp_dtype */

typedef struct tp_comm_ops tp_comm_ops;

/* Where a process runs: its node (the ranks that share memory with it,
 * MPI_COMM_TYPE_SHARED) among the job's nodes. It describes the process,
 * not a group: a communicator split off the world keeps the world's, so
 * the GPU choice, the start-up line and the check that a tensor-parallel
 * group stays inside a node all read the same. */
typedef struct tp_rank_node {
    int index;          /* the node's number, nodes numbered in the order of their lowest rank */
    int count;          /* the job's nodes */
    int local_rank;     /* this rank among the ranks of its node, in rank order */
    int local_size;     /* the ranks on this node */
    char host[64];      /* the node's host name, for messages */
} tp_rank_node;

typedef struct tp_comm {
    const tp_comm_ops *ops;
    int rank, world;
    void *impl;
    tp_rank_node node;       /* filled by tp_comm_mpi and tp_comm_single (runtime/comm/node.h) */
} tp_comm;

struct tp_comm_ops {
    const char *name;
    /* out (world * n) = concatenation of every rank's in (n), rank-major */
    int (*all_gather)(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen);
    /* out (n) = sum over ranks of block `rank` of in (world * n) */
    int (*reduce_scatter)(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen);
    /* buf (n) = sum (or max) over ranks, in place */
    int (*all_reduce)(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen);
    /* out block r (n each) = block `rank` of rank r's in (world * n) */
    int (*all_to_all)(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen);
    /* rank 0 receives `bytes` of host memory from every rank (gathered
     * output); blocks until done */
    int (*gather_bytes)(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen);
    /* end every rank now, with status; prints nothing. (optional: NULL
     * for a single process, whose main simply returns) */
    void (*abort)(tp_comm *c, int status);
    /* a group communicator's finalize releases the group only */
    void (*finalize)(tp_comm *c);
    /* out = the ranks of c that pass the same color, ordered by key
     * (MPI_Comm_split); collective over c. (optional: NULL where the
     * communicator cannot split, which then refuses data parallelism) */
    int (*split)(tp_comm *c, int color, int key, tp_comm *out, char *err, size_t errlen);
    /* host memory: every rank's status rc (0: it succeeded) and, from the
     * lowest rank whose rc is not 0, its message in err, on every rank;
     * returns 0 when every rc was 0, else 1 + that rank; -1 when the call
     * itself failed (err: why, this rank's). Collective over c.
     * (optional: NULL where each rank runs alone, whose status stays its
     * own) */
    int (*agree)(tp_comm *c, int rc, char *err, size_t errlen);
    /* host memory: buf (n int64) = the sum, or with min the least, over
     * ranks, in place; exact where float32 is not (counts, positions in a
     * stream of tokens). Collective over c. (optional: NULL where each
     * rank runs alone, whose values stay its own) */
    int (*reduce_i64)(tp_comm *c, int64_t *buf, int64_t n, int min, char *err, size_t errlen);
};

/* Every rank leaves an I/O phase (progress.h), or a step that failed on
 * every rank, together, knowing whether one failed and why: 0 when no
 * rank's rc was set; else -1. Where *everywhere is set, err holds the
 * lowest failing rank's message on every rank, "rank R: " before it when
 * c has several (no rank waits for another: the job ends without an
 * abort). It stays false where the agreement itself failed or c cannot
 * agree, err then this rank's own. Collective over c. */
int tp_agree(tp_comm *c, int rc, bool *everywhere, char *err, size_t errlen);

/* The host-data operations of a communicator whose collectives run on a
 * device (comm_nccl.c, comm_staged.c): its host communicator's, which
 * carries the ranks' status and host values. A host without them runs
 * one rank (single.c): its status and values are the job's. */
static inline int tp_comm_host_agree(tp_comm *host, int rc, char *err, size_t errlen)
{
    return host->ops->agree ? host->ops->agree(host, rc, err, errlen) : rc != 0;
}

static inline int tp_comm_host_reduce_i64(tp_comm *host, int64_t *buf, int64_t n, int min, char *err, size_t errlen)
{
    return host->ops->reduce_i64 ? host->ops->reduce_i64(host, buf, n, min, err, errlen) : 0;
}

/* A single process: every collective is a copy; node 0 of 1. */
int tp_comm_single(tp_comm *c);

/* MPI (MPI_Init_thread must not have been called yet), with the node of
 * every rank found at start-up (collective over the world). */
int tp_comm_mpi(tp_comm *c, int *argc, char ***argv, char *err, size_t errlen);

#endif /* TPRUN_COMM_H */
