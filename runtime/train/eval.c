/* eval.c: see eval.h. */
#include "runtime/train/eval.h"
#include <inttypes.h>
#include "runtime/train/dp.h"
#include "util/errmsg.h"

int tr_eval_open(tr_eval *e, const tr_schedule *s, const tr_batch_shape *shape,
                 const char *const paths[TR_STREAM_KINDS], char *err, size_t errlen)
{
    *e = (tr_eval){0};
    tr_batch_shape once = *shape;
    once.steps = 0;            /* every whole batch */
    once.epochs = 1;
    once.micro_batches = 1;
    once.shuffle = false;
    once.any_step = true;      /* the mean is over the whole stream's labelled tokens */
    once.evaluation = true;
    if (tr_batches_open(&e->batches, &once, paths, err, errlen))
        return -1;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].out == s->loss)
            e->forward_ops = i + 1;
    if (!e->forward_ops)
        return tp_error(err, errlen, "--eval-data: no op of the schedule writes its loss (buffer %d); recompile it "
                        "with tpcc --train", s->loss);
    return 0;
}

int tr_eval_check(tr_eval *e, tp_comm *c, bool *everywhere, char *err, size_t errlen)
{
    if (tr_batches_check(&e->batches, c, everywhere, err, errlen))
        return -1;
    for (int64_t i = 0; i < e->batches.steps; i++)
        e->labelled += e->batches.labelled[i];
    *everywhere = !e->labelled;      /* every rank counted the same */
    if (!e->labelled)
        return tp_error(err, errlen, "--eval-data %s: every label of its %" PRId64 " batches is ignored (--ignore-index "
                        "%d): there is no loss to evaluate", e->batches.streams[TR_STREAM_DATA].path,
                        e->batches.steps, e->batches.shape.ignore_index);
    return 0;
}

void tr_eval_free(tr_eval *e)
{
    tr_batches_free(&e->batches);
}

int tr_eval_loss(tr_eval *e, tr_exec *x, tp_comm *dp, float *scratch, double *loss, char *err, size_t errlen)
{
    const tr_schedule *s = x->s;
    const double divisor = (double)e->labelled / (double)dp->world;
    double total = 0.0;
    for (int64_t i = 0; i < e->batches.steps; i++) {
        if (tr_batches_write(&e->batches, x, i, 0, dp->rank, err, errlen))
            return -1;
        x->loss_divisor = divisor;
        if (tr_exec_run_ops(x, e->forward_ops, err, errlen))
            return -1;
        float part;
        tr_exec_read_buf(x, s->loss, &part);
        total += part;
    }
    float mean = (float)total;
    if (tr_dp_mean(dp, x, scratch, &mean, err, errlen))
        return -1;
    *loss = mean;
    return 0;
}
