/* narrow_dims.h: a narrow's view of its tensor, shared by narrow
 * (backend_cpu.c) and its gradient (backward.c): outer x shape[dim] x inner
 * elements, where each of the outer slabs holds the narrowed part as one
 * contiguous run of length * inner elements. */
#ifndef TPRUN_CPU_NARROW_DIMS_H
#define TPRUN_CPU_NARROW_DIMS_H

#include <assert.h>
#include <stdint.h>

typedef struct narrow_dims {
    int64_t outer, extent, inner; /* extent = shape[dim] */
} narrow_dims;

/* dim may count from the end (Shard(-1) style) */
static inline narrow_dims narrow_dims_of(const int64_t *shape, int rank, int dim, int64_t start, int64_t length)
{
    if (dim < 0)
        dim += rank;
    assert(dim >= 0 && dim < rank && start >= 0 && length >= 0 && start + length <= shape[dim]);
    (void)start, (void)length; /* read by the assert only */
    narrow_dims nd = {1, shape[dim], 1};
    for (int i = 0; i < dim; i++)
        nd.outer *= shape[i];
    for (int i = dim + 1; i < rank; i++)
        nd.inner *= shape[i];
    return nd;
}

#endif /* TPRUN_CPU_NARROW_DIMS_H */
