/* comm/mpi.c: collectives over MPI for CPU ranks (Debian's MPICH).
 *
 * Errors are returned, not fatal: MPI_ERRORS_RETURN is set on the world
 * communicator so the executor can say which op and rank failed before it
 * aborts the job. A group split off the world (data parallelism) has its
 * own MPI_Comm and shares the world's stall watchdog (stall.h), which ends
 * the job when a collective waits longer than TPRUN_TIMEOUT. */
#include <limits.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/comm/comm.h"
#include "runtime/comm/node.h"
#include "runtime/comm/stall.h"
#include "util/number.h"
#include "util/xalloc.h"

typedef struct mpi_comm {
    MPI_Comm comm;
    tp_stall_watch *watch;     /* the world's; NULL for one rank (nobody to wait for) */
    bool world;                /* the world owns the watchdog; a group only its MPI_Comm */
    int64_t max_count;         /* elements (gather_bytes: bytes) one MPI call carries; a group's is the world's */
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

/* ---- chunking -------------------------------------------------------------
 *
 * MPI counts are int, and a rank's share of a real model passes 2^31-1
 * (its whole weight region, gathered as bytes for --save). A collective
 * is therefore a run of MPI calls over chunks of at most max_count
 * elements of each rank's block: the same bits as one call, since
 * reductions are elementwise. A block of n is rank-major in the buffers
 * that hold every rank's (all_gather's output, all_to_all's both,
 * gather_bytes's output): a chunk goes through a derived type of its
 * elements whose extent is the whole block, so MPI puts rank r's part of
 * the chunk at block r. */

/* Staging for reduce_scatter's chunks (below): at most this many bytes. */
#define STAGE_BYTES ((int64_t)64 << 20)

/* One rank's part of a chunk in a rank-major buffer: `count` of `type`. */
typedef struct rank_part {
    MPI_Datatype type;
    int count;
} rank_part;

typedef struct chunked chunked;
struct chunked {
    const char *what;          /* the MPI function: errors and the watchdog name it */
    MPI_Comm comm;
    int world;
    MPI_Datatype type;         /* one element */
    int64_t elem;              /* its bytes */
    int64_t n;                 /* elements of one rank's block (all_reduce: of the buffer) */
    int64_t chunk;             /* elements per MPI call, at most INT_MAX */
    void *out;                 /* NULL where a rank receives nothing (gather_bytes off the root) */
    const void *in;
    MPI_Op op;                 /* all_reduce's: sum or max */
    void *stage;               /* reduce_scatter's packed chunk; NULL when n is one chunk */
    bool rank_major;           /* a buffer holds every rank's block (see one_chunk) */
    /* one MPI call on elements [off, off + cnt) of every block, a rank's
     * part of them in a rank-major buffer as `part`; an MPI return code */
    int (*call)(const chunked *k, int64_t off, int cnt, rank_part part);
};

/* p + off elements of k, or NULL for a buffer a rank does not have. */
static void *at(const chunked *k, const void *p, int64_t off)
{
    return p ? (char *)p + off * k->elem : NULL;
}

/* cnt elements of one rank's block, with the extent of the whole block: a
 * count of one per rank places rank r's chunk r blocks further on. The
 * caller frees it with MPI_Type_free. */
static int block_chunk_type(const chunked *k, int cnt, MPI_Datatype *out)
{
    MPI_Datatype run;
    int rc = MPI_Type_contiguous(cnt, k->type, &run);
    if (rc != MPI_SUCCESS)
        return rc;
    rc = MPI_Type_create_resized(run, 0, (MPI_Aint)(k->n * k->elem), out);
    int freed = MPI_Type_free(&run);       /* *out keeps what it needs of run */
    if (rc != MPI_SUCCESS)
        return rc;
    if (freed == MPI_SUCCESS && (rc = MPI_Type_commit(out)) == MPI_SUCCESS)
        return MPI_SUCCESS;
    MPI_Type_free(out);                    /* the failure to report is the one before */
    return freed != MPI_SUCCESS ? freed : rc;
}

/* One chunk's call. In rank-major buffers, a chunk that is the whole block
 * is cnt plain elements per rank, as one unchunked call passes them (no
 * derived type in the common case, and Debian's MPICH hangs in an
 * MPI_Gather of a zero-sized one); a smaller one a block-chunk type made
 * for the call and released after. The first failure is returned. */
static int one_chunk(const chunked *k, int64_t off, int cnt)
{
    if (!k->rank_major || cnt == k->n)
        return k->call(k, off, cnt, (rank_part){k->type, cnt});
    MPI_Datatype blocks;
    int rc = block_chunk_type(k, cnt, &blocks);
    if (rc != MPI_SUCCESS)
        return rc;
    rc = k->call(k, off, cnt, (rank_part){blocks, 1});
    int freed = MPI_Type_free(&blocks);
    return rc != MPI_SUCCESS ? rc : freed;
}

/* The watchdog covers the whole run of calls, which stops at the first failure. */
static int run_chunks(tp_comm *c, const chunked *k, char *err, size_t errlen)
{
    tp_stall_watch *w = entering(c, k->what, k->n);
    int rc = MPI_SUCCESS;
    int64_t off = 0;
    do {       /* at least one call, so a collective of nothing still meets the others' */
        int64_t cnt = k->n - off < k->chunk ? k->n - off : k->chunk;
        rc = one_chunk(k, off, (int)cnt);
        off += cnt;
    } while (rc == MPI_SUCCESS && off < k->n);
    return left(w, rc, k->what, err, errlen);
}

/* k (its name, count, buffers and call set) on c: the communicator and
 * its chunk size. */
static int on_comm(tp_comm *c, chunked *k, char *err, size_t errlen)
{
    if (k->n < 0) {
        snprintf(err, errlen, "%s of %lld elements: a negative count", k->what, (long long)k->n);
        return -1;
    }
    mpi_comm *m = c->impl;
    k->comm = m->comm;
    k->world = c->world;
    k->chunk = m->max_count;
    return 0;
}

/* ... and of elements of type t. */
static int on_comm_typed(tp_comm *c, tp_dtype t, bool reduce, chunked *k, char *err, size_t errlen)
{
    if (on_comm(c, k, err, errlen) || type_of(t, reduce, &k->type, err, errlen))
        return -1;
    k->elem = (int64_t)tp_dtype_size(t);
    return 0;
}

static int all_gather_chunk(const chunked *k, int64_t off, int cnt, rank_part part)
{
    return MPI_Allgather(at(k, k->in, off), cnt, k->type, at(k, k->out, off), part.count, part.type, k->comm);
}

static int all_gather(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    chunked k = {.what = "MPI_Allgather", .n = n, .out = out, .in = in, .rank_major = true,
                 .call = all_gather_chunk};
    return on_comm_typed(c, t, false, &k, err, errlen) ? -1 : run_chunks(c, &k, err, errlen);
}

/* MPI_Reduce_scatter_block reads world contiguous blocks of one count, so
 * a chunk of every rank's block is packed into the staging buffer first
 * (a derived type would need MPI to reduce through it, which the standard
 * does not promise); a collective of one chunk reads its input as it is. */
static int reduce_scatter_chunk(const chunked *k, int64_t off, int cnt, rank_part unused)
{
    (void)unused;
    const void *blocks = k->in;
    if (k->stage) {
        for (int r = 0; r < k->world; r++)
            memcpy(at(k, k->stage, (int64_t)r * cnt), at(k, k->in, r * k->n + off), (size_t)(cnt * k->elem));
        blocks = k->stage;
    }
    return MPI_Reduce_scatter_block(blocks, at(k, k->out, off), cnt, k->type, MPI_SUM, k->comm);
}

static int reduce_scatter(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    chunked k = {.what = "MPI_Reduce_scatter_block", .n = n, .out = out, .in = in, .call = reduce_scatter_chunk};
    if (on_comm_typed(c, t, true, &k, err, errlen))
        return -1;
    if (n > k.chunk) {
        /* smaller chunks where world of them would pass STAGE_BYTES: the staging stays bounded */
        int64_t bounded = STAGE_BYTES / (k.world * k.elem);
        k.chunk = bounded < 1 ? 1 : bounded < k.chunk ? bounded : k.chunk;
        k.stage = tp_xmalloc((size_t)(k.world * k.chunk * k.elem));
    }
    int rc = run_chunks(c, &k, err, errlen);
    free(k.stage);
    return rc;
}

static int all_reduce_chunk(const chunked *k, int64_t off, int cnt, rank_part unused)
{
    (void)unused;
    return MPI_Allreduce(MPI_IN_PLACE, at(k, k->out, off), cnt, k->type, k->op, k->comm);
}

static int all_reduce(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    chunked k = {.what = "MPI_Allreduce", .n = n, .out = buf, .op = max ? MPI_MAX : MPI_SUM,
                 .call = all_reduce_chunk};
    return on_comm_typed(c, t, true, &k, err, errlen) ? -1 : run_chunks(c, &k, err, errlen);
}

/* Both buffers hold world blocks of n: the same type sends and receives. */
static int all_to_all_chunk(const chunked *k, int64_t off, int cnt, rank_part part)
{
    (void)cnt;
    return MPI_Alltoall(at(k, k->in, off), part.count, part.type, at(k, k->out, off), part.count, part.type,
                        k->comm);
}

static int all_to_all(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    chunked k = {.what = "MPI_Alltoall", .n = n, .out = out, .in = in, .rank_major = true,
                 .call = all_to_all_chunk};
    return on_comm_typed(c, t, false, &k, err, errlen) ? -1 : run_chunks(c, &k, err, errlen);
}

static int gather_chunk(const chunked *k, int64_t off, int cnt, rank_part part)
{
    return MPI_Gather(at(k, k->in, off), cnt, MPI_BYTE, at(k, k->out, off), part.count, part.type, 0, k->comm);
}

/* Bytes: max_count bounds the bytes of one call. Only rank 0 has `out`. */
static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    if (bytes > INT64_MAX) {
        snprintf(err, errlen, "MPI_Gather of %zu bytes: more than a 64-bit count", bytes);
        return -1;
    }
    chunked k = {.what = "MPI_Gather", .type = MPI_BYTE, .elem = 1, .n = (int64_t)bytes,
                 .out = c->rank == 0 ? out : NULL, .in = in, .rank_major = true, .call = gather_chunk};
    return on_comm(c, &k, err, errlen) ? -1 : run_chunks(c, &k, err, errlen);
}

/* The lowest failing rank (world: none) by MPI_MIN, then its message
 * from it. The message travels as a fixed buffer: every rank passes the
 * same count, whatever its own errlen. */
static int agree(tp_comm *c, int rc, char *err, size_t errlen)
{
    MPI_Comm comm = comm_of(c);
    int mine = rc ? c->rank : c->world, first = c->world;
    tp_stall_watch *w = entering(c, "MPI_Allreduce of the ranks' status", 1);
    if (left(w, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce of the ranks' status", err,
             errlen))
        return -1;
    if (first == c->world)
        return 0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", c->rank == first ? err : "");
    w = entering(c, "MPI_Bcast of a rank's error", (int64_t)sizeof msg);
    if (left(w, MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, comm), "MPI_Bcast of a rank's error", err, errlen))
        return -1;
    snprintf(err, errlen, "%s", msg);
    return 1 + first;
}

static int reduce_i64(tp_comm *c, int64_t *buf, int64_t n, int min, char *err, size_t errlen)
{
    chunked k = {.what = "MPI_Allreduce of int64", .type = MPI_INT64_T, .elem = (int64_t)sizeof *buf, .n = n,
                 .out = buf, .op = min ? MPI_MIN : MPI_SUM, .call = all_reduce_chunk};
    return on_comm(c, &k, err, errlen) ? -1 : run_chunks(c, &k, err, errlen);
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
    group->max_count = ((mpi_comm *)c->impl)->max_count;
    out->node = c->node;
    out->ops = c->ops;
    out->impl = group;
    return 0;
}

static const tp_comm_ops mpi_ops = {
    "mpi", all_gather, reduce_scatter, all_reduce, all_to_all, gather_bytes, abort_all, finalize, split, agree,
    reduce_i64,
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

/* TPRUN_MPI_MAX_COUNT: the most elements one MPI call carries, INT_MAX (the
 * most an int count holds) unless set lower, which only tests want: it
 * makes a tiny model's collectives run in several chunks. */
static int max_count_of(int64_t *out, char *err, size_t errlen)
{
    const char *v = getenv("TPRUN_MPI_MAX_COUNT");
    *out = INT_MAX;
    if (!v)
        return 0;
    if (tp_parse_int(v, 1, INT_MAX, out)) {
        snprintf(err, errlen, "TPRUN_MPI_MAX_COUNT takes a whole number of elements from 1 to %d, not '%s'", INT_MAX,
                 v);
        return -1;
    }
    return 0;
}

int tp_comm_mpi(tp_comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
    tp_stall_limits limits;
    int64_t max_count;
    if (tp_stall_limits_get(&limits, err, errlen) || max_count_of(&max_count, err, errlen))
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
    m->max_count = max_count;
    if (c->world > 1 && tp_stall_watch_start(&m->watch, c->rank, limits, abort_stalled, NULL, err, errlen)) {
        free(m);
        return -1;
    }
    c->ops = &mpi_ops;
    c->impl = m;
    return 0;
}
