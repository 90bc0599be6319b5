/* sched/buf.c: a buffer's element count (declared in sched/load.h beside
 * tr_buf). Its own file, below the loader and validate.c, which both read
 * it: the loader calls validate.c, so neither may hold what the other
 * needs. */
#include "sched/load.h"

int64_t tr_buf_elems(const tr_buf *b)
{
    int64_t n = 1;
    for (int i = 0; i < b->rank; i++)
        n *= b->shape[i];
    return n;
}
