/* param_placement.c: where each rank's share of a parameter comes from
 * under the plan: its placement, and how many ranks hold each slice. The
 * parameter checks (params.c) and the recorded weight table (record.c)
 * read them. */
#include <string.h>
#include "compiler/sema/check_impl.h"

/* PyTorch's partition functions (plan/styles.def's params column):
 * Colwise shards Linear rows (out features) and Embedding columns;
 * Rowwise shards Linear columns (in features, bias replicated) and
 * Embedding rows (vocab). */
tp_placement tp_style_partition(tp_style_params params, const tp_module *m, bool bias)
{
    switch (params) {
    case TP_STYLE_PARAMS_OUT_FEATURES: return m->kind == TP_MOD_LINEAR ? tp_shard(0) : tp_shard(1);
    case TP_STYLE_PARAMS_IN_FEATURES:
        return bias ? tp_replicate() : m->kind == TP_MOD_LINEAR ? tp_shard(1) : tp_shard(0);
    case TP_STYLE_PARAMS_REPLICATED:
    case TP_STYLE_PARAMS_UNTOUCHED: break;
    }
    return tp_replicate();
}

tp_placement tp_param_placement(const tp_param *prm)
{
    const tp_module *m = prm->owner;
    const tp_style *s = m->style;
    if (!s || s->kind >= TP_STYLE_NCLASSES)
        return tp_replicate();
    return tp_style_partition(tp_style_rows[s->kind].params, m, !strcmp(prm->name, "bias"));
}

/* tpcc_replicate_heads=H at tp > H (params.c expands the weight): each
 * slice is held by tp / H ranks */
int64_t tp_head_replicas(const interp *I, const tp_param *prm)
{
    const tp_style *s = prm->owner->style;
    if (!s || !s->replicate_heads || I->tp <= s->replicate_heads ||     /* ColwiseParallel's keyword only */
        I->tp % s->replicate_heads)
        return 1;
    return I->tp / s->replicate_heads;
}
