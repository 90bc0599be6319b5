/* packed.c: the packed output of a fused projection under packed_colwise
 * holds each rank's share of every segment one after another; split() and
 * chunk() into those segments (split.c) are the only right readers, and
 * anything else that reads it (an op, a module, an operator) is an error. */
#include "compiler/sema/check_impl.h"

void tp_packed_misuse(interp *I, tp_val *x, const char *what, tp_span span)
{
    if (!x->nsegments || x->poisoned)
        return;
    const tp_style *s = x->shard_cause;
    tp_diag *g = tp_finding(I, TP_ERROR, s ? tp_entry_span(s) : span, "fused-shard", x, NULL,
                            "the packed output of '%s' (each rank's share of its %d segments, one after another) "
                            "reaches %s: only split() or chunk() into those segments reads it right",
                            x->producer ? x->producer->fqn : "a fused projection", x->nsegments, what);
    if (g)
        tp_diag_note_at(g, span, "it is used here");
    if (g)
        tp_diag_help(g, "unpack it first, e.g. 'q, k, v = split(x, (a, b, c), dim=-1)' with the segments of "
                        "packed=, or shard the projection with ColwiseParallel(use_local_output=False)");
    x->poisoned = true;
}
