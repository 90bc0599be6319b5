/* pipeline.c: the passes, in the order they run (see passes.h). */
#include <string.h>
#include "sched/memplan.h"
#include "compiler/passes/passes.h"

int tp_passes_run(tp_graph *g, const tp_passes_opts *opts, tp_ir *out, tp_autodiff_error *err)
{
    memset(out, 0, sizeof *out);
    err->segments = false;
    err->unsupported = false;
    if (opts->optimize) {
        tp_pass_merge(g);
        tp_pass_fuse(g);
    }
    tp_pass_dce(g);
    if (opts->train && tp_pass_autodiff(g, opts->optimize, err))
        return -1;
    if (opts->train)
        tp_pass_recompute(g, opts->recompute);
    tp_pass_lower(g, out);
    if (opts->train && tp_pass_attention_stats(out, err->message, sizeof err->message)) {
        err->node = -1;
        tp_ir_free(out);
        return -1;
    }
    if (opts->optimize)
        tp_pass_fuse_pairs(out);
    if (opts->train)
        tp_pass_zero(out, opts->data_parallel, opts->dp_shard);
    if (opts->segments && tp_pass_segments(out, err->message, sizeof err->message)) {
        err->node = -1;
        err->segments = true;
        tp_ir_free(out);
        return -1;
    }
    if (opts->optimize)
        tp_pass_fuse_rope(out);
    tp_ir_set_dtype(out, opts->dtype);
    tp_memplan(out);
    return 0;
}
