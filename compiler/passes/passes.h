/* passes.h: from the checked global graph to the per-rank program a
 * schedule describes. tp_passes_run applies them in order; each pass is
 * its own file. */
#ifndef TP_PASSES_PASSES_H
#define TP_PASSES_PASSES_H

#include <stdbool.h>
#include "compiler/ir/graph.h"
#include "sched/program.h"

typedef struct tp_passes_opts {
    bool merge;          /* -O1: merge redistributions of a tensor to one layout, drop undone ones */
    tp_dtype dtype;      /* element type of the schedule's floating-point buffers */
} tp_passes_opts;

/* merge.c: -O1. Marks merged redistribution nodes removed and redirects
 * their results to the kept ones. */
void tp_pass_merge(tp_graph *g);
/* dce.c: marks nodes whose results nobody reads dead (op.dead). */
void tp_pass_dce(tp_graph *g);
/* lower.c: the per-rank program: one buffer per value (local shapes), a
 * weight table in order of first use, the live and dead nodes as ops. */
void tp_pass_lower(const tp_graph *g, tp_ir *out);

/* The whole pipeline: merge (when asked), dead code, lower, the element
 * type, the memory plan (memplan.h). `out` is zeroed first. */
void tp_passes_run(tp_graph *g, const tp_passes_opts *opts, tp_ir *out);

#endif /* TP_PASSES_PASSES_H */
