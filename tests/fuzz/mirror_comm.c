/* mirror_comm.c: see mirror_comm.h. */
#include <string.h>
#include "tests/fuzz/mirror_comm.h"
#include "runtime/comm/node.h"

static size_t bytes_of(tp_dtype t, int64_t n) { return (size_t)n * tp_dtype_size(t); }

/* out (world * n): this rank's in, world times */
static int all_gather(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    (void)err; (void)errlen;
    for (int r = 0; r < c->world; r++)
        memmove((char *)out + (size_t)r * bytes_of(t, n), in, bytes_of(t, n));
    return 0;
}

/* out (n): block `rank` of in (the others add zeros) */
static int reduce_scatter(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    (void)err; (void)errlen;
    memmove(out, (const char *)in + (size_t)c->rank * bytes_of(t, n), bytes_of(t, n));
    return 0;
}

static int all_reduce(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    (void)c; (void)t; (void)buf; (void)n; (void)max; (void)err; (void)errlen;
    return 0;
}

/* out block r (n each): block `rank` of rank r's in, which is this rank's */
static int all_to_all(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    return all_gather(c, t, out, (const char *)in + (size_t)c->rank * bytes_of(t, n), n, err, errlen);
}

/* rank 0's out: this rank's bytes, world times; the other ranks receive nothing */
static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    (void)err; (void)errlen;
    for (int r = 0; out && r < c->world; r++)
        memmove((char *)out + (size_t)r * bytes, in, bytes);
    return 0;
}

static void finalize(tp_comm *c) { (void)c; }

static const tp_comm_ops mirror_ops = {
    "mirror", all_gather, reduce_scatter, all_reduce, all_to_all, gather_bytes, NULL, finalize, NULL,
    NULL,   /* agree: each rank runs alone, its status its own */
    NULL,   /* reduce_i64: and its values */
};

void tp_comm_mirror(tp_comm *c, int rank, int world)
{
    c->ops = &mirror_ops;
    c->rank = rank;
    c->world = world;
    c->impl = NULL;
    tp_node_alone(&c->node);
}
