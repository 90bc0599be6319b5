/* zero.c: see zero.h. */
#include "runtime/train/zero.h"
#include <stdlib.h>
#include "sched/dp_shard.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

static void *at(const void *base, int64_t elems, size_t es) { return (char *)base + elems * (int64_t)es; }

static int64_t run_elems(const tr_zero *z, int w)
{
    return tp_dp_shard_elems(z->x->s->weights[w].local_elems, z->dp->world);
}

int64_t tr_zero_first(const tr_zero *z, int w) { return (int64_t)z->dp->rank * run_elems(z, w); }

int64_t tr_zero_held(const tr_zero *z, int w)
{
    return tp_dp_shard_held(z->x->s->weights[w].local_elems, z->dp->world, z->dp->rank);
}

float *tr_zero_grad(const tr_zero *z, int w)
{
    size_t es = tp_dtype_size(z->x->be->dtype);
    if (z->scheduled)
        return tr_exec_buf(z->x, z->x->s->grads[w]);
    if (z->padded_at[w] >= 0)
        return at(z->grads, z->padded_at[w], es);
    return at(tr_exec_buf(z->x, z->x->s->grads[w]), tr_zero_first(z, w), es);
}

void *tr_zero_weight_run(const tr_zero *z, int w)
{
    char *stored = (char *)tr_exec_weight(z->x, w);
    return z->fsdp ? stored : stored + tr_zero_first(z, w) * (int64_t)tp_dtype_size(z->x->be->dtype);
}

int tr_zero_init(tr_zero *z, tr_exec *x, tp_comm *dp, char *err, size_t errlen)
{
    const tr_schedule *s = x->s;
    const tp_backend *be = x->be;
    *z = (tr_zero){.x = x, .dp = dp, .scheduled = s->dp_shard >= TP_DP_SHARD_GRADIENTS,
                   .fsdp = s->dp_shard == TP_DP_SHARD_PARAMETERS};
    z->offset = tp_xcalloc((size_t)s->nweights + 1, sizeof *z->offset);
    z->padded_at = tp_xcalloc((size_t)s->nweights + 1, sizeof *z->padded_at);
    for (int i = 0; i < s->nweights; i++) {
        if (s->bufs[s->grads[i]].dtype != be->dtype) {
            tr_zero_free(z);
            return tp_error(err, errlen, "the gradient of %s is %s, the %s backend's weights %s: a schedule tpcc "
                            "--train did not write", s->weights[i].name, tp_dtype_name(s->bufs[s->grads[i]].dtype),
                            be->name, tp_dtype_name(be->dtype));
        }
        int64_t c = run_elems(z, i);
        z->offset[i] = z->elems;
        z->elems += c;
        z->widest = c > z->widest ? c : z->widest;
        bool own_run = !z->scheduled && tp_dp_shard_padded(s->weights[i].local_elems, dp->world);
        z->padded_at[i] = own_run ? z->padded : -1;
        z->padded += z->padded_at[i] >= 0 ? c : 0;
    }
    z->pad = be->alloc((size_t)(dp->world * z->widest) * sizeof(float) + 1);
    z->tail = be->alloc((size_t)z->widest * sizeof(float) + 1);
    z->grads = be->alloc((size_t)z->padded * tp_dtype_size(be->dtype) + 1);
    if (!z->pad || !z->tail || !z->grads) {
        tr_zero_free(z);
        return tp_error(err, errlen, "cannot allocate the %lld-element gradient runs and the %lld-element "
                        "staging of ZeRO's collectives on the %s backend", (long long)z->padded,
                        (long long)((dp->world + 1) * z->widest), be->name);
    }
    return 0;
}

void tr_zero_free(tr_zero *z)
{
    if (!z->x)
        return;
    void (*release)(void *) = z->x->be->release;
    if (z->pad)
        release(z->pad);
    if (z->tail)
        release(z->tail);
    if (z->grads)
        release(z->grads);
    free(z->offset);
    free(z->padded_at);
    *z = (tr_zero){0};
}

int tr_zero_reduce_grads(tr_zero *z, char *err, size_t errlen)
{
    tr_exec *x = z->x;
    const tr_schedule *s = x->s;
    int dp = z->dp->world;
    size_t es = tp_dtype_size(x->be->dtype);
    for (int i = 0; i < s->nweights; i++) {
        int64_t n = s->weights[i].local_elems, c = run_elems(z, i), held = tr_zero_held(z, i);
        const void *g = tr_exec_buf(x, s->grads[i]);
        float *mine = tr_zero_grad(z, i);
        bool padded = z->padded_at[i] >= 0;
        if (padded)             /* padded to dp runs; the padding's sums are never read */
            x->be->copy(z->pad, g, (size_t)n * es);
        /* an unpadded run is reduced into `tail`, then copied to its place:
         * a collective's input and output may not overlap */
        char why[800];
        if (z->dp->ops->reduce_scatter(z->dp, x->be->dtype, padded ? (void *)mine : z->tail, padded ? z->pad : g, c,
                                       why, sizeof why))
            return tp_error(err, errlen, "reduce-scattering the gradient of %s over the %d data-parallel ranks: %s",
                            s->weights[i].name, dp, why);
        if (!padded)
            x->be->copy(mine, z->tail, (size_t)c * es);
        if (held)
            x->be->scale(mine, mine, held, 1.0f / (float)dp);
    }
    return 0;
}

/* Run w of every dp rank, from `mine` (a whole run readable, in t), into
 * dst: the weight's local elements, in backend memory or, to_host, in
 * host memory as float32. */
static int gather_run(tr_zero *z, int w, tp_dtype t, const void *mine, void *dst, bool to_host, const char *what,
                      char *err, size_t errlen)
{
    const tr_weight *weight = &z->x->s->weights[w];
    char why[800];
    if (z->dp->ops->all_gather(z->dp, t, z->pad, mine, run_elems(z, w), why, sizeof why))
        return tp_error(err, errlen, "gathering the %s of %s over the %d data-parallel ranks: %s", what, weight->name,
                        z->dp->world, why);
    if (to_host)
        tr_exec_download(z->x, dst, z->pad, weight->local_elems, t);
    else
        z->x->be->copy(dst, z->pad, (size_t)weight->local_elems * tp_dtype_size(t));
    return 0;
}

int tr_zero_gather_weights(tr_zero *z, char *err, size_t errlen)
{
    tr_exec *x = z->x;
    tp_dtype t = x->be->dtype;
    size_t es = tp_dtype_size(t);
    for (int i = 0; i < x->s->nweights; i++) {
        float *w = tr_exec_weight(x, i);
        int64_t held = tr_zero_held(z, i);
        const void *mine = held ? tr_zero_weight_run(z, i) : z->tail;    /* an empty run sends padding */
        if (held && held < run_elems(z, i)) {   /* the weight ends inside the run: the rest would be read past it */
            x->be->copy(z->tail, mine, (size_t)held * es);
            mine = z->tail;
        }
        if (gather_run(z, i, t, mine, w, false, "updated weights", err, errlen))
            return -1;
    }
    return 0;
}

int tr_zero_unshard_stored(tr_zero *z, int w, float *host, char *err, size_t errlen)
{
    return gather_run(z, w, TP_F32, tr_zero_weight_run(z, w), host, true, "weights", err, errlen);
}

int tr_zero_grad_to_host(tr_zero *z, int w, float *host, char *err, size_t errlen)
{
    return gather_run(z, w, z->x->be->dtype, tr_zero_grad(z, w), host, true, "gradient", err, errlen);
}

int tr_zero_unshard_weight(tr_zero *z, const float *shards, int w, float *host, char *err, size_t errlen)
{
    return gather_run(z, w, TP_F32, shards + z->offset[w], host, true, "optimizer state", err, errlen);
}

void tr_zero_take_runs(const tr_zero *z, const float *full, float *shards, bool from_host)
{
    const tr_schedule *s = z->x->s;
    const tp_backend *be = z->x->be;
    for (int i = 0; i < s->nweights; i++) {
        int64_t held = tr_zero_held(z, i);
        if (held)
            (from_host ? be->to_device : be->copy)(shards + z->offset[i],
                                                   full + s->weights[i].region_offset + tr_zero_first(z, i),
                                                   (size_t)held * sizeof(float));
    }
}
