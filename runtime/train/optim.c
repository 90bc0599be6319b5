/* optim.c: see optim.h. */
#include "runtime/train/optim.h"
#include <math.h>
#include <stdio.h>
#include "util/errmsg.h"

int tr_optim_init(tr_optim *o, tr_exec *x, const float *weights, char *err, size_t errlen)
{
    const tp_backend *be = x->be;
    *o = (tr_optim){.x = x, .grad_scale = 1};
    size_t bytes = (size_t)x->s->weight_elems * sizeof(float) + 1;
    bool masters = be->dtype != TP_F32;
    o->m = be->alloc(bytes);
    o->v = be->alloc(bytes);
    o->master = masters ? be->alloc(bytes) : NULL;
    o->sum = be->alloc(2 * sizeof(float));
    if (!o->m || !o->v || !o->sum || (masters && !o->master)) {
        tr_optim_free(o);
        return tp_error(err, errlen, "cannot allocate %d x %zu bytes of optimizer state%s on the %s backend",
                        masters ? 3 : 2, bytes, masters ? " and fp32 master weights" : "", be->name);
    }
    if (masters)
        be->to_device(o->master, weights, bytes - 1);
    return 0;
}

const float *tr_optim_weights(const tr_optim *o) { return o->master ? o->master : (const float *)o->x->weights; }

void tr_optim_free(tr_optim *o)
{
    if (!o->x)
        return;
    void (*release)(void *) = o->x->be->release;
    if (o->m)
        release(o->m);
    if (o->v)
        release(o->v);
    if (o->master)
        release(o->master);
    if (o->sum)
        release(o->sum);
    *o = (tr_optim){0};
}

int tr_weight_replicas(const tr_weight *w, int world)
{
    if (w->dim < 0)
        return world;
    int64_t held = 0;
    for (int k = 0; k < w->nsegments; k++)
        held += w->length[k];
    return world / (int)(w->shape[w->dim] / held);   /* exact: the loader checks both divisions */
}

int tr_optim_grad_norm(tr_optim *o, double *norm, char *err, size_t errlen)
{
    tr_exec *x = o->x;
    const tr_schedule *s = x->s;
    double sum = 0;
    for (int i = 0; i < s->nweights; i++)
        if (x->comm->rank % tr_weight_replicas(&s->weights[i], x->comm->world) == 0)
            sum += x->be->sum_squares(tr_exec_buf(x, s->grads[i]), s->weights[i].local_elems);
    /* two floats, the sum and what float32 rounded off it, keep the
     * all-reduced total near double precision */
    float pair[2] = {(float)sum, 0};
    pair[1] = (float)(sum - (double)pair[0]);
    x->be->to_device(o->sum, pair, sizeof pair);
    if (x->comm->ops->all_reduce(x->comm, TP_F32, o->sum, 2, 0, err, errlen))
        return -1;
    x->be->to_host(pair, o->sum, sizeof pair);
    *norm = sqrt((double)pair[0] + (double)pair[1]);
    return 0;
}

void tr_optim_clip(tr_optim *o, double norm, double max_norm)
{
    double coef = max_norm / (norm + 1e-6);
    o->grad_scale = 1;
    if (max_norm <= 0 || coef >= 1)
        return;
    if (o->master) {            /* in the update, in fp32 */
        o->grad_scale = (float)coef;
        return;
    }
    tr_exec *x = o->x;
    for (int i = 0; i < x->s->nweights; i++) {
        float *g = tr_exec_buf(x, x->s->grads[i]);
        x->be->scale(g, g, x->s->weights[i].local_elems, (float)coef);
    }
}

void tr_optim_adamw(tr_optim *o, double lr, double wd, bool decay_all)
{
    tr_exec *x = o->x;
    const tr_schedule *s = x->s;
    o->step++;
    for (int i = 0; i < s->nweights; i++) {
        const tr_weight *w = &s->weights[i];
        tp_adamw_step st = {.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                            .weight_decay = decay_all || w->rank >= 2 ? wd : 0, .step = o->step};
        float *m = o->m + w->region_offset, *v = o->v + w->region_offset, *g = tr_exec_buf(x, s->grads[i]);
        if (o->master)
            x->be->adamw_master(o->master + w->region_offset, tr_exec_weight(x, i), g, m, v, w->local_elems,
                                o->grad_scale, &st);
        else
            x->be->adamw(tr_exec_weight(x, i), g, m, v, w->local_elems, &st);
    }
}
