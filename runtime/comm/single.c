/* comm/single.c: the communicator of a one-rank run: no launcher, no MPI,
 * every collective over one rank is a copy. */
#include <string.h>
#include "runtime/comm/comm.h"
#include "runtime/comm/node.h"

static int copy(tp_comm *c, tp_dtype t, void *out, const void *in, int64_t n, char *err, size_t errlen)
{
    (void)c; (void)err; (void)errlen;
    if (out != in)
        memmove(out, in, (size_t)n * tp_dtype_size(t));
    return 0;
}

static int reduce_in_place(tp_comm *c, tp_dtype t, void *buf, int64_t n, int max, char *err, size_t errlen)
{
    (void)c; (void)t; (void)buf; (void)n; (void)max; (void)err; (void)errlen;
    return 0;
}

static int gather_bytes(tp_comm *c, void *out, const void *in, size_t bytes, char *err, size_t errlen)
{
    (void)c; (void)err; (void)errlen;
    if (out != in)
        memmove(out, in, bytes);
    return 0;
}

static void finalize(tp_comm *c) { (void)c; }

static int split(tp_comm *c, int color, int key, tp_comm *out, char *err, size_t errlen)
{
    (void)color; (void)key; (void)err; (void)errlen;
    *out = *c;
    return 0;
}

static const tp_comm_ops single_ops = {
    "single", copy, copy, reduce_in_place, copy, gather_bytes, NULL, finalize, split,
    NULL,   /* agree: one rank's status is the job's */
    NULL,   /* reduce_i64: one rank's values are the job's */
};

int tp_comm_single(tp_comm *c)
{
    c->ops = &single_ops;
    c->rank = 0;
    c->world = 1;
    c->impl = NULL;
    tp_node_alone(&c->node);
    return 0;
}
