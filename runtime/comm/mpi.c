/* comm/mpi.c: collectives over MPI for CPU ranks (Debian's MPICH).
 *
 * Errors are returned, not fatal: MPI_ERRORS_RETURN is set on the world
 * communicator so the executor can say which op and rank failed before it
 * aborts the job. A group split off the world (data parallelism) has its
 * own MPI_Comm and shares the world's stall watchdog (stall.h), which ends
 * the job when a collective waits longer than TPRUN_TIMEOUT. */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/comm/comm.h"
#include "runtime/comm/node.h"
#include "runtime/comm/stall.h"

typedef struct mpi_comm {
    MPI_Comm comm;
    tp_stall_watch *watch;     /* the world's; NULL for one rank (nobody to wait for) */
    bool world;                /* the world owns the watchdog; a group only its MPI_Comm */
} mpi_comm;

static int check(int rc, const char *what, char *err, size_t errlen)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    snprintf(err, errlen, "%s failed: %s", what, msg);
    return -1;
}

static MPI_Comm comm_of(const tp_comm *c) { return ((mpi_comm *)c->impl)->comm; }

/* A collective's return code, with the watchdog told it ran from here to now. */
static tp_stall_watch *entering(tp_comm *c, const char *what, int64_t n)
{
    tp_stall_watch *w = ((mpi_comm *)c->impl)->watch;
    tp_stall_enter(w, what, n);
    return w;
}

static int left(tp_stall_watch *w, int rc, const char *what, char *err, size_t errlen)
{
    tp_stall_leave(w);
    return check(rc, what, err, errlen);
}

/* MPI counts are int: a larger collective is refused with a message */
static int count_of(int64_t n, int *out, char *err, size_t errlen)
{
    if (n < 0 || n > 0x7fffffff) {
        snprintf(err, errlen, "a collective of %lld elements exceeds MPI's int count", (long long)n);
        return -1;
    }
    *out = (int)n;
    return 0;
}

/* Element types: fp32 is MPI_FLOAT; bf16 (a bf16 schedule, which only the
 * CUDA backend runs) can be moved as 16-bit words but MPI has no bf16
 * arithmetic, so reductions refuse it. */
static int type_of(tp_dtype t, bool reduce, MPI_Datatype *out, char *err, size_t errlen)
{
    if (t == TP_F32) {
        *out = MPI_FLOAT;
        return 0;
    }
    if (t == TP_BF16 && !reduce) {
        *out = MPI_UINT16_T;
        return 0;
    }
    snprintf(err, errlen, "the MPI communicator cannot %s %s tensors", reduce ? "reduce" : "move", tp_dtype_name(t));
    return -1;
}

static int all_gather(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    int cnt;
    MPI_Datatype ty;
    if (count_of(n, &cnt, err, errlen) || type_of(t, false, &ty, err, errlen))
        return -1;
    tp_stall_watch *w = entering(c, "MPI_Allgather", n);
    return left(w, MPI_Allgather(in, cnt, ty, out, cnt, ty, comm_of(c)), "MPI_Allgather", err, errlen);
}

static int reduce_scatter(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    int cnt;
    MPI_Datatype ty;
    if (count_of(n, &cnt, err, errlen) || type_of(t, true, &ty, err, errlen))
        return -1;
    tp_stall_watch *w = entering(c, "MPI_Reduce_scatter_block", n);
    return left(w, MPI_Reduce_scatter_block(in, out, cnt, ty, MPI_SUM, comm_of(c)), "MPI_Reduce_scatter_block",
                err, errlen);
}

static int all_reduce(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    int cnt;
    MPI_Datatype ty;
    if (count_of(n, &cnt, err, errlen) || type_of(t, true, &ty, err, errlen))
        return -1;
    tp_stall_watch *w = entering(c, "MPI_Allreduce", n);
    return left(w, MPI_Allreduce(MPI_IN_PLACE, buf, cnt, ty, max ? MPI_MAX : MPI_SUM, comm_of(c)), "MPI_Allreduce",
                err, errlen);
}

static int all_to_all(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    int cnt;
    MPI_Datatype ty;
    if (count_of(n, &cnt, err, errlen) || type_of(t, false, &ty, err, errlen))
        return -1;
    tp_stall_watch *w = entering(c, "MPI_Alltoall", n);
    return left(w, MPI_Alltoall(in, cnt, ty, out, cnt, ty, comm_of(c)), "MPI_Alltoall", err, errlen);
}

static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    int cnt;
    if (count_of((int64_t)bytes, &cnt, err, errlen))
        return -1;
    tp_stall_watch *w = entering(c, "MPI_Gather", (int64_t)bytes);
    return left(w, MPI_Gather(in, cnt, MPI_BYTE, out, cnt, MPI_BYTE, 0, comm_of(c)), "MPI_Gather", err, errlen);
}

static void abort_all(tp_comm *c, int status)
{
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, status);
}

static void finalize(tp_comm *c)
{
    mpi_comm *m = c->impl;
    if (m->world) {
        tp_stall_watch_stop(m->watch);
        MPI_Finalize();
    } else {
        MPI_Comm_free(&m->comm);     /* a group: nothing to report at the end of the run */
    }
    free(m);
    c->impl = NULL;
}

static int split(tp_comm *c, int color, int key, tp_comm *out, char *err, size_t errlen)
{
    mpi_comm *group = calloc(1, sizeof *group);
    if (!group) {
        snprintf(err, errlen, "out of memory splitting the MPI communicator");
        return -1;
    }
    if (check(MPI_Comm_split(comm_of(c), color, key, &group->comm), "MPI_Comm_split", err, errlen) ||
        check(MPI_Comm_set_errhandler(group->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", err, errlen) ||
        check(MPI_Comm_rank(group->comm, &out->rank), "MPI_Comm_rank", err, errlen) ||
        check(MPI_Comm_size(group->comm, &out->world), "MPI_Comm_size", err, errlen)) {
        free(group);
        return -1;
    }
    group->watch = ((mpi_comm *)c->impl)->watch;
    out->node = c->node;
    out->ops = c->ops;
    out->impl = group;
    return 0;
}

static const tp_comm_ops mpi_ops = {
    "mpi", all_gather, reduce_scatter, all_reduce, all_to_all, gather_bytes, abort_all, finalize, split,
};

/* The watchdog's way to end the job: MPI_Abort, from its own thread
 * (MPICH's abort does not depend on the calling thread), after a moment
 * for mpiexec to forward the message (an abort discards what it has not
 * forwarded yet). */
static void abort_stalled(void *ctx)
{
    (void)ctx;
    usleep(300 * 1000);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* This rank's node: the ranks sharing its memory (MPI_COMM_TYPE_SHARED,
 * keyed by world rank, so local ranks follow world ranks), numbered by
 * the rank of the node's first rank among the nodes' first ranks, which
 * that first rank hands to the others of its node. */
static int locate(int rank, tp_rank_node *node, char *err, size_t errlen)
{
    MPI_Comm local, firsts;
    int numbering[2] = {0, 0};      /* the node's index and the number of nodes */
    if (check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
              "MPI_Comm_split_type (the ranks of this node)", err, errlen))
        return -1;
    int rc = check(MPI_Comm_rank(local, &node->local_rank), "MPI_Comm_rank", err, errlen) ||
             check(MPI_Comm_size(local, &node->local_size), "MPI_Comm_size", err, errlen) ||
             check(MPI_Comm_split(MPI_COMM_WORLD, node->local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &firsts),
                   "MPI_Comm_split (the first rank of each node)", err, errlen);
    if (!rc && firsts != MPI_COMM_NULL) {
        rc = check(MPI_Comm_rank(firsts, &numbering[0]), "MPI_Comm_rank", err, errlen) ||
             check(MPI_Comm_size(firsts, &numbering[1]), "MPI_Comm_size", err, errlen);
        MPI_Comm_free(&firsts);
    }
    if (!rc)
        rc = check(MPI_Bcast(numbering, 2, MPI_INT, 0, local), "MPI_Bcast of the node's number", err, errlen);
    MPI_Comm_free(&local);
    node->index = numbering[0];
    node->count = numbering[1];
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (!rc)
        rc = check(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name", err, errlen);
    snprintf(node->host, sizeof node->host, "%.*s", len, name);
    return rc ? -1 : 0;
}

int tp_comm_mpi(tp_comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
    double timeout;
    if (tp_stall_timeout(&timeout, err, errlen))
        return -1;
    int provided;
    if (check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread", err, errlen))
        return -1;
    if (check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", err, errlen) ||
        check(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank), "MPI_Comm_rank", err, errlen) ||
        check(MPI_Comm_size(MPI_COMM_WORLD, &c->world), "MPI_Comm_size", err, errlen) ||
        locate(c->rank, &c->node, err, errlen))
        return -1;
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of memory setting up MPI");
        return -1;
    }
    m->comm = MPI_COMM_WORLD;
    m->world = true;
    if (c->world > 1 && tp_stall_watch_start(&m->watch, c->rank, timeout, abort_stalled, NULL, err, errlen)) {
        free(m);
        return -1;
    }
    c->ops = &mpi_ops;
    c->impl = m;
    return 0;
}
