/* values.c: the tensors of the symbolic forward pass (tp_val): made,
 * copied, described, and measured globally and on one rank. The walk and
 * every handler use them; this file calls no other file of sema/. */
#include <string.h>
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

const iv tp_none_iv = {IV_NONE, NULL, NULL, 0, 0, NULL, {NULL}};

tp_val *tp_val_new(interp *I, int rank, const int64_t *shape, const char *const *names)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (__builtin_mul_overflow(n, shape[i], &n) && !I->stop) {
            /* sizes come from the configuration: a tensor this large is a typo */
            tp_diag_add(I->d, TP_ERROR, TP_NO_SPAN, "config",
                        "a tensor in '%s' would have more than 2^63 elements; check the sizes", tp_cur_fqn(I));
            I->stop = true;
        }
    tp_val *v = tp_xcalloc(1, sizeof *v);
    v->id = I->next_id++;
    v->rank = rank;
    for (int i = 0; i < rank; i++) {
        v->shape[i] = shape[i];
        v->dimname[i] = names ? names[i] : "";
    }
    v->pl = tp_replicate();
    v->redist_src = -1;
    v->gather_comm = -1;
    v->gv = -1;
    v->heads_diag = -1;
    v->span = TP_NO_SPAN;
    I->vals = tp_xgrow(I->vals, I->nvals, &I->capvals, sizeof *I->vals, 1024);
    I->vals[I->nvals++] = v;
    return v;
}

const char *tp_intern(interp *I, const char *s)
{
    for (int i = 0; i < I->nstrings; i++)
        if (!strcmp(I->strings[i], s))
            return I->strings[i];
    I->strings = tp_xrealloc(I->strings, (size_t)(I->nstrings + 1) * sizeof *I->strings);
    return I->strings[I->nstrings++] = tp_xstrdup(s);
}

tp_val *tp_val_copy(interp *I, const tp_val *v)
{
    tp_val *c = tp_val_new(I, v->rank, v->shape, v->dimname);
    int id = c->id;
    *c = *v;
    c->id = id;
    c->redist_src = -1;
    return c;
}

const char *tp_pl_str(tp_placement p, int rank, char *buf)
{
    return tp_placement_str(tp_placement_norm(p, rank), buf, 24);
}

char *tp_val_describe(const tp_val *v)
{
    char pl[24], shape[160] = "";
    size_t n = 0;
    for (int i = 0; i < v->rank && n < sizeof shape - 24; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? ", " : "", (long long)v->shape[i]);
    /* a fused projection's packed output: each segment sharded on its own */
    return tp_xasprintf("%s%s %s [%s]", tp_pl_str(v->pl, v->rank, pl), v->nsegments ? " packed" : "",
                        v->dtensor ? "DTensor" : "plain", shape);
}

int64_t tp_local_size(const interp *I, const tp_val *v, int d)
{
    tp_placement p = tp_placement_norm(v->pl, v->rank);
    if (p.kind == TP_SHARD && p.dim == d)
        return (v->shape[d] + I->tp - 1) / I->tp;
    return v->shape[d];
}

int64_t tp_val_elems(const tp_val *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        n *= v->shape[i];
    return n;
}

/* [..., k] rows as a matrix: the product of the local leading dims. */
int64_t tp_local_rows(const interp *I, const tp_val *x)
{
    int64_t m = 1;
    for (int d = 0; d < x->rank - 1; d++)
        m *= tp_local_size(I, x, d);
    return m;
}
