/* dp.c: see dp.h. */
#include "runtime/train/dp.h"
#include "runtime/comm/comm.h"
#include "util/errmsg.h"

int tr_dp_init(tr_dp *g, tp_comm *world, int tp, int dp, char *err, size_t errlen)
{
    *g = (tr_dp){.tp = *world, .world = world};
    if (dp == 1)
        return tp_comm_single(&g->dp);
    if (!world->ops->split)
        return tp_error(err, errlen, "a schedule with %d data-parallel replicas needs a communicator that splits into "
                        "groups; the %s communicator of this build cannot: train it with --backend cpu", dp,
                        world->ops->name);
    int r = world->rank;
    if (world->ops->split(world, r / tp, r % tp, &g->tp, err, errlen))
        return -1;
    if (world->ops->split(world, r % tp, r / tp, &g->dp, err, errlen)) {
        g->tp.ops->finalize(&g->tp);
        return -1;
    }
    g->split = true;
    return 0;
}

void tr_dp_free(tr_dp *g)
{
    if (g->split) {
        g->tp.ops->finalize(&g->tp);
        g->dp.ops->finalize(&g->dp);
    }
    g->split = false;
}

int tr_dp_average_grads(tp_comm *dp, tr_exec *x, char *err, size_t errlen)
{
    if (dp->world == 1)
        return 0;
    const tr_schedule *s = x->s;
    for (int i = 0; i < s->nweights; i++) {
        float *g = tr_exec_buf(x, s->grads[i]);
        int64_t n = s->weights[i].local_elems;
        char why[800];
        if (dp->ops->all_reduce(dp, s->bufs[s->grads[i]].dtype, g, n, 0, why, sizeof why))
            return tp_error(err, errlen, "averaging the gradient of %s over the %d data-parallel replicas: %s",
                            s->weights[i].name, dp->world, why);
        x->be->scale(g, g, n, 1.0f / (float)dp->world);
    }
    return 0;
}

int tr_dp_mean(tp_comm *dp, tr_exec *x, float *scratch, float *value, char *err, size_t errlen)
{
    if (dp->world == 1)
        return 0;
    x->be->to_device(scratch, value, sizeof *value);
    char why[800];
    if (dp->ops->all_reduce(dp, TP_F32, scratch, 1, 0, why, sizeof why))
        return tp_error(err, errlen, "the mean over the %d data-parallel replicas: %s", dp->world, why);
    x->be->to_host(value, scratch, sizeof *value);
    *value /= (float)dp->world;
    return 0;
}
