/* batches_check.c: tr_batches_check (batches.h), the checks before step 1
 * split over the ranks. */
#include <inttypes.h>
#include <stdlib.h>
#include "runtime/train/batches.h"
#include "runtime/train/labels.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

/* The values of each stream a rank reads at once: a few MiB of int64. */
#define TR_CHECK_VALUES ((int64_t)1 << 18)

/* This rank's share of the rows: [*lo, *hi) of the R the streams' values
 * make in rows of S (the last one shorter where S does not divide them). */
static void share_of(const tr_batches *b, int share, int shares, int64_t *lo, int64_t *hi)
{
    const int64_t seq = b->shape.seq, rows = (b->streams[TR_STREAM_DATA].count + seq - 1) / seq;
    *lo = rows * share / shares;
    *hi = rows * (share + 1) / shares;
}

/* Reads this rank's rows in chunks: first[k], the first position of
 * stream k that breaks its rule (INT64_MAX: none), and each of its
 * samples' labelled tokens in per_sample (the others' left 0). */
static int scan_share(tr_batches *b, int share, int shares, int64_t first[TR_STREAM_KINDS], int64_t *per_sample,
                      char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    const int64_t chunk = TR_CHECK_VALUES / s->seq > 0 ? TR_CHECK_VALUES / s->seq : 1;
    int64_t lo, hi;
    share_of(b, share, shares, &lo, &hi);
    for (int64_t row = lo; row < hi; row += chunk) {
        const int64_t n = hi - row < chunk ? hi - row : chunk;
        if (tr_batches_read_rows(b, row, n, err, errlen))
            return -1;
        tr_batches_first_bad(b, first);
        for (int64_t k = row; s->scored && k < row + n && k < b->samples; k++) {
            tr_batches_sample_labels(b, k, b->step_labels);
            per_sample[k] = tr_labels_counted(b->step_labels, 1, s->seq, s->label_shift, TR_IGNORE_INDEX);
        }
    }
    return 0;
}

/* Every step's labelled tokens over the micro-batches and replicas, from
 * each sample's count; a training step without one is refused (PyTorch's
 * mean over no element is NaN). */
static int count_labelled(tr_batches *b, const int64_t *per_sample, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    const int64_t rows = s->batch * s->replicas * s->micro_batches;
    b->labelled = tp_xmalloc((size_t)b->steps * sizeof *b->labelled + 1);
    for (int64_t i = 0; i < b->steps; i++) {
        b->labelled[i] = 0;
        for (int64_t r = i * rows; r < (i + 1) * rows; r++)
            b->labelled[i] += per_sample[tr_batches_sample(b, r)];
        if (!b->labelled[i] && !s->any_step)
            return tp_error(err, errlen, "step %" PRId64 " has no label to score: every label of its %" PRId64
                            " tokens is ignored (--ignore-index %d%s), so its loss would be 0/0; give it labelled "
                            "tokens or train fewer steps", i + 1, rows * s->seq, s->ignore_index,
                            s->label_shift ? ", or the last position of a row, which has no next token" : "");
    }
    return 0;
}

int tr_batches_check(tr_batches *b, tp_comm *c, bool *everywhere, char *err, size_t errlen)
{
    const bool split = c->ops->reduce_i64 && c->world > 1;
    int64_t first[TR_STREAM_KINDS];
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        first[k] = INT64_MAX;
    int64_t *per_sample = tp_xcalloc((size_t)b->samples + 1, sizeof *per_sample);
    int rc = scan_share(b, split ? c->rank : 0, split ? c->world : 1, first, per_sample, err, errlen);
    if (tp_agree(c, rc, everywhere, err, errlen)) {
        free(per_sample);
        return -1;
    }
    char why[800];
    if (split && (c->ops->reduce_i64(c, first, TR_STREAM_KINDS, 1, why, sizeof why) ||
                  (b->shape.scored && c->ops->reduce_i64(c, per_sample, b->samples, 0, why, sizeof why)))) {
        free(per_sample);
        return tp_error(err, errlen, "combining the %d ranks' checks of %s: %s", c->world,
                        b->streams[TR_STREAM_DATA].path, why);
    }
    /* every rank holds what they all found: each fails alike, or none */
    rc = tr_batches_bad(b, first, err, errlen);
    if (!rc && b->shape.scored)
        rc = count_labelled(b, per_sample, err, errlen);
    free(per_sample);
    *everywhere = rc != 0;
    return rc;
}
