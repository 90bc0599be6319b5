/* accum.c: see accum.h. */
#include "runtime/train/accum.h"
#include "util/errmsg.h"

static int64_t grad_elems(const tr_schedule *s, int i)
{
    return tr_buf_elems(&s->bufs[s->grads[i]]);
}

int tr_accum_init(tr_accum *a, tr_exec *x, int micro_batches, char *err, size_t errlen)
{
    *a = (tr_accum){.x = x, .micro_batches = micro_batches};
    if (micro_batches == 1)
        return 0;
    if (!x->be->accumulate_grad)
        return tp_error(err, errlen, "--micro-batches %d: the %s backend cannot accumulate gradients "
                        "(no accumulate_grad); train with --backend cpu", micro_batches, x->be->name);
    int64_t total = 0;
    for (int i = 0; i < x->s->nweights; i++)
        total += grad_elems(x->s, i);
    a->sum = x->be->alloc((size_t)total * sizeof *a->sum + 1);
    if (!a->sum)
        return tp_error(err, errlen, "--micro-batches %d: no memory for the %.1f MiB fp32 gradient accumulator",
                        micro_batches, (double)total * sizeof *a->sum / (1 << 20));
    return 0;
}

void tr_accum_free(tr_accum *a)
{
    if (a->sum)
        a->x->be->release(a->sum);
    a->sum = NULL;
}

void tr_accum_add(tr_accum *a, int m)
{
    if (a->micro_batches == 1)
        return;
    const tr_schedule *s = a->x->s;
    const tp_grad_accum phase = m == 0 ? TP_ACCUM_FIRST : m + 1 < a->micro_batches ? TP_ACCUM_ADD : TP_ACCUM_LAST;
    float *at = a->sum;
    for (int i = 0; i < s->nweights; i++) {
        const int64_t n = grad_elems(s, i);
        a->x->be->accumulate_grad(at, tr_exec_buf(a->x, s->grads[i]), n, phase);
        at += n;
    }
}
