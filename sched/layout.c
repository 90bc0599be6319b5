/* layout.c: placement algebra (see layout.h). */
#include <stdio.h>
#include "sched/layout.h"

tp_placement tp_placement_norm(tp_placement p, int rank)
{
    if (p.kind == TP_SHARD && p.dim < 0)
        p.dim += rank;
    return p;
}

bool tp_placement_eq(tp_placement a, tp_placement b, int rank)
{
    a = tp_placement_norm(a, rank);
    b = tp_placement_norm(b, rank);
    return a.kind == b.kind && (a.kind != TP_SHARD || a.dim == b.dim);
}

bool tp_placement_is_partial(tp_placement p)
{
    return p.kind == TP_PARTIAL || p.kind == TP_MASK_PARTIAL;
}

const char *tp_placement_str(tp_placement p, char *buf, size_t len)
{
    switch (p.kind) {
    case TP_REPLICATE: snprintf(buf, len, "Replicate()"); break;
    case TP_SHARD: snprintf(buf, len, "Shard(%d)", p.dim); break;
    case TP_PARTIAL: snprintf(buf, len, "Partial()"); break;
    case TP_MASK_PARTIAL: snprintf(buf, len, "MaskPartial()"); break;
    }
    return buf;
}

tp_redist_kind tp_redist_classify(tp_placement from, tp_placement to, int rank)
{
    from = tp_placement_norm(from, rank);
    to = tp_placement_norm(to, rank);
    if (tp_placement_eq(from, to, rank))
        return TP_REDIST_NONE;
    switch (from.kind) {
    case TP_REPLICATE:
        if (to.kind == TP_SHARD) return TP_REDIST_LOCAL_SLICE;
        return TP_REDIST_LOCAL_DIVIDE;          /* R -> P */
    case TP_SHARD:
        if (to.kind == TP_REPLICATE) return TP_REDIST_ALL_GATHER;
        if (to.kind == TP_SHARD) return TP_REDIST_ALL_TO_ALL;
        return TP_REDIST_INVALID;               /* S -> P */
    case TP_PARTIAL:
    case TP_MASK_PARTIAL:
        if (to.kind == TP_REPLICATE) return TP_REDIST_ALL_REDUCE;
        if (to.kind == TP_SHARD) return TP_REDIST_REDUCE_SCATTER;
        return TP_REDIST_NONE;                  /* P -> P (mask applied lazily) */
    }
    return TP_REDIST_INVALID;
}

const char *tp_redist_name(tp_redist_kind k)
{
    static const char *const names[] = {
        [TP_REDIST_NONE] = "none",
        [TP_REDIST_ALL_GATHER] = "all_gather",
        [TP_REDIST_ALL_REDUCE] = "all_reduce",
        [TP_REDIST_REDUCE_SCATTER] = "reduce_scatter",
        [TP_REDIST_ALL_TO_ALL] = "all_to_all",
        [TP_REDIST_LOCAL_SLICE] = "local_slice",
        [TP_REDIST_LOCAL_DIVIDE] = "local_divide",
        [TP_REDIST_INVALID] = "invalid",
    };
    return names[k];
}

bool tp_redist_communicates(tp_redist_kind k)
{
    return k == TP_REDIST_ALL_GATHER || k == TP_REDIST_ALL_REDUCE ||
           k == TP_REDIST_REDUCE_SCATTER || k == TP_REDIST_ALL_TO_ALL;
}
