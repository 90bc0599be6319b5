/* optim.c: see optim.h. */
#include "runtime/train/optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sched/train_settings.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

/* The part of weight i this rank updates: the whole local slice, or with
 * ZeRO its run (n 0 where the run lies past a short weight's end: the
 * pointers are then not to be used). `w` is the stored weight (bf16 or
 * fp32), `master` the fp32 copy where the weights are not fp32. */
typedef struct optim_part {
    float *w, *master, *g, *m, *v;
    int64_t n;
} optim_part;

static optim_part part_of(const tr_optim *o, int i)
{
    tr_exec *x = o->x;
    const tr_weight *w = &x->s->weights[i];
    if (!o->zero)
        return (optim_part){tr_exec_weight(x, i), o->master ? o->master + w->region_offset : NULL,
                            tr_exec_buf(x, x->s->grads[i]), o->m + w->region_offset, o->v + w->region_offset,
                            w->local_elems};
    int64_t at = o->zero->offset[i];
    return (optim_part){tr_zero_weight_run(o->zero, i), o->master ? o->master + at : NULL, tr_zero_grad(o->zero, i),
                        o->m + at, o->v + at, tr_zero_held(o->zero, i)};
}

int tr_optim_init(tr_optim *o, tr_exec *x, tr_zero *zero, const float *weights, char *err, size_t errlen)
{
    const tp_backend *be = x->be;
    *o = (tr_optim){.x = x, .zero = zero, .grad_scale = 1};
    size_t bytes = (size_t)(zero ? zero->elems : x->s->weight_elems) * sizeof(float) + 1;
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
    if (masters && zero)
        tr_zero_take_runs(zero, weights, o->master, true);
    else if (masters)
        be->to_device(o->master, weights, bytes - 1);
    return 0;
}

int tr_optim_weight_to_host(tr_optim *o, int k, int i, float *host, char *err, size_t errlen)
{
    tr_exec *x = o->x;
    const tr_weight *w = &x->s->weights[i];
    size_t bytes = (size_t)w->local_elems * sizeof(float);
    const float *state = k == 1 ? o->m : k == 2 ? o->v : o->master ? o->master : NULL;
    if (!state && o->zero && o->zero->fsdp)   /* fp32 weights kept in runs */
        return tr_zero_unshard_stored(o->zero, i, host, err, errlen);
    if (!state)             /* fp32 weights: the weight itself, whole on every replica */
        x->be->to_host(host, tr_exec_weight(x, i), bytes);
    else if (o->zero)
        return tr_zero_unshard_weight(o->zero, state, i, host, err, errlen);
    else
        x->be->to_host(host, state + w->region_offset, bytes);
    return 0;
}

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

/* The two floats of o->sum added over c. */
static int add_over(tr_optim *o, tp_comm *c, float pair[2], char *err, size_t errlen)
{
    o->x->be->to_device(o->sum, pair, 2 * sizeof(float));
    if (c->ops->all_reduce(c, TP_F32, o->sum, 2, 0, err, errlen))
        return -1;
    o->x->be->to_host(pair, o->sum, 2 * sizeof(float));
    return 0;
}

int tr_optim_grad_norm(tr_optim *o, tp_comm *dp, double *norm, char *err, size_t errlen)
{
    tr_exec *x = o->x;
    const tr_schedule *s = x->s;
    /* every part this rank counts, in one sum: one wait for the backend */
    tp_run *runs = tp_xcalloc((size_t)s->nweights + 1, sizeof *runs);
    int nruns = 0;
    for (int i = 0; i < s->nweights; i++)
        if (x->comm->rank % tr_weight_replicas(&s->weights[i], x->comm->world) == 0) {
            optim_part p = part_of(o, i);
            if (p.n)
                runs[nruns++] = (tp_run){p.g, p.n};
        }
    double sum = x->be->sum_squares(runs, nruns);
    free(runs);
    /* two floats, the sum and what float32 rounded off it, keep the
     * all-reduced total near double precision */
    float pair[2] = {(float)sum, 0};
    pair[1] = (float)(sum - (double)pair[0]);
    if (add_over(o, x->comm, pair, err, errlen) || (o->zero && add_over(o, dp, pair, err, errlen)))
        return -1;
    *norm = sqrt((double)pair[0] + (double)pair[1]);
    return 0;
}

int tr_optim_first_nonfinite(tr_optim *o, tp_comm *dp, int *first, char *err, size_t errlen)
{
    tr_exec *x = o->x;
    int n = x->s->nweights;
    size_t bytes = (size_t)n * sizeof(float) + 1;
    float *flags = tp_xcalloc(1, bytes), *dev = x->be->alloc(bytes);
    if (!dev) {
        free(flags);
        return tp_error(err, errlen, "cannot allocate %zu bytes on the %s backend", bytes, x->be->name);
    }
    for (int i = 0; i < n; i++) {
        optim_part p = part_of(o, i);
        const tp_run run = {p.g, p.n};
        flags[i] = p.n && !isfinite(x->be->sum_squares(&run, 1));   /* in double: finite when every element is */
    }
    x->be->to_device(dev, flags, bytes - 1);
    int rc = x->comm->ops->all_reduce(x->comm, TP_F32, dev, n, 0, err, errlen);
    if (!rc && o->zero)
        rc = dp->ops->all_reduce(dp, TP_F32, dev, n, 0, err, errlen);
    if (!rc)
        x->be->to_host(flags, dev, bytes - 1);
    *first = -1;
    for (int i = 0; !rc && i < n && *first < 0; i++)
        if (flags[i] > 0)
            *first = i;
    x->be->release(dev);
    free(flags);
    return rc;
}

void tr_optim_clip(tr_optim *o, double norm, double max_norm)
{
    double coef = max_norm / (norm + 1e-6);
    /* the update multiplies each gradient by it in fp32: with fp32
     * gradients the product scaling them in place would store, with bf16
     * ones not rounded to bf16 once more */
    o->grad_scale = max_norm <= 0 || coef >= 1 ? 1.0f : (float)coef;
}

bool tr_adamw_decays(const tr_adamw_hparams *h, const tr_weight *w)
{
    if (h->decay_all)
        return true;
    if (!h->no_decay)
        return w->rank >= 2;
    size_t n;
    for (const char *at = h->no_decay, *part; tp_train_names_next(&at, &part, &n);)
        for (const char *in = w->name; n && *in; in++)
            if (!strncmp(in, part, n))
                return false;
    return true;
}

void tr_optim_adamw(tr_optim *o, double lr, const tr_adamw_hparams *h)
{
    tr_exec *x = o->x;
    const tr_schedule *s = x->s;
    o->step++;
    const tp_adamw_step st = {.lr = lr, .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps,
                              .weight_decay = h->weight_decay, .step = o->step};
    /* every weight in one pass (multi-tensor); without masters (fp32
     * weights) each part's step updates its weight in place */
    tp_adamw_part *parts = tp_xcalloc((size_t)s->nweights + 1, sizeof *parts);
    int nparts = 0;
    for (int i = 0; i < s->nweights; i++) {
        optim_part p = part_of(o, i);
        if (p.n)
            parts[nparts++] = (tp_adamw_part){p.master, p.w, p.m, p.v, p.g, p.n, tr_adamw_decays(h, &s->weights[i])};
    }
    x->be->adamw(parts, nparts, o->grad_scale, &st);
    free(parts);
}
