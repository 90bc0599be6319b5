/* batches.c: see batches.h. */
#include "runtime/train/batches.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/train/labels.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

static int64_t per_replica(const tr_batch_shape *s) { return s->batch * s->seq; }
static int64_t per_step(const tr_batch_shape *s) { return per_replica(s) * s->replicas * s->micro_batches; }

/* Where step i's micro-batch m of replica d starts in the streams. */
static int64_t offset(const tr_batch_shape *s, int64_t i, int m, int d)
{
    return ((i * s->micro_batches + m) * s->replicas + d) * per_replica(s);
}

/* With neither --labels nor a loss that shifts, the labels are the
 * stream one token further on. */
static bool next_in_stream(const tr_batches *b)
{
    return !b->labels.count && b->shape.label_shift == 0;
}

static int check_labels(tr_batches *b, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    if (b->labels.count != b->data.count)
        return tp_error(err, errlen, "--labels %s holds %" PRId64 " labels and --data %s %" PRId64 " tokens: the "
                        "labels are a stream beside the tokens, one per token", b->labels_path, b->labels.count,
                        b->data_path, b->data.count);
    int64_t bad = tr_labels_first_invalid(b->labels.ids, b->labels.count, s->vocab, s->ignore_index);
    if (bad >= 0)
        return tp_error(err, errlen, "--labels %s: label %" PRId64 " is %d, neither a token of the model's "
                        "vocabulary [0, %" PRId64 ") nor the ignore index %d%s", b->labels_path, bad,
                        b->labels.ids[bad], s->vocab, s->ignore_index,
                        s->ignore_index == TR_IGNORE_INDEX ? "" : " (--ignore-index; -100 is ignored only as the "
                        "default)");
    return 0;
}

/* Every step's labelled tokens over the replicas; a step without one is
 * refused (PyTorch's mean over no element is NaN). */
static int count_steps(tr_batches *b, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    b->labelled = tp_xmalloc((size_t)s->steps * sizeof *b->labelled + 1);
    for (int64_t i = 0; i < s->steps; i++) {
        b->labelled[i] = 0;
        for (int m = 0; m < s->micro_batches; m++)
            for (int d = 0; d < s->replicas; d++)
                b->labelled[i] += tr_labels_counted(tr_batches_labels(b, i, m, d), s->batch, s->seq, s->label_shift,
                                                    TR_IGNORE_INDEX);
        if (!b->labelled[i])
            return tp_error(err, errlen, "step %" PRId64 " has no label to score: every label of its %" PRId64
                            " tokens is ignored (--ignore-index %d%s), so its loss would be 0/0; give it labelled "
                            "tokens or train fewer steps", i + 1, per_step(s), s->ignore_index,
                            s->label_shift ? ", or the last position of a row, which has no next token" : "");
    }
    return 0;
}

int tr_batches_open(tr_batches *b, const tr_batch_shape *shape, const char *data_path, const char *labels_path,
                    char *err, size_t errlen)
{
    *b = (tr_batches){.shape = *shape, .data_path = data_path, .labels_path = labels_path};
    const tr_batch_shape *s = &b->shape;
    b->step_labels = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_labels + 1);
    if (tr_tokens_open(&b->data, data_path, s->vocab, err, errlen))
        return -1;
    if (labels_path && (tr_tokens_read(&b->labels, labels_path, err, errlen) || check_labels(b, err, errlen)))
        return -1;
    char is[160] = "batch x seq";
    if (s->micro_batches > 1 || s->replicas > 1) {
        int n = 0;
        if (s->micro_batches > 1)
            n += snprintf(is + n, sizeof is - (size_t)n, "%d micro-batches x ", s->micro_batches);
        if (s->replicas > 1)
            n += snprintf(is + n, sizeof is - (size_t)n, "%d data-parallel replicas x ", s->replicas);
        snprintf(is + n, sizeof is - (size_t)n, "%" PRId64 " of batch x seq", per_replica(s));
    }
    if (tr_tokens_require(&b->data, data_path, per_step(s), is, s->steps, next_in_stream(b) ? 1 : 0, err, errlen))
        return -1;
    return count_steps(b, err, errlen);
}

void tr_batches_free(tr_batches *b)
{
    tr_tokens_free(&b->data);
    tr_tokens_free(&b->labels);
    free(b->step_labels);
    free(b->labelled);
    b->step_labels = NULL;
    b->labelled = NULL;
}

const int32_t *tr_batches_ids(const tr_batches *b, int64_t i, int m, int d)
{
    return b->data.ids + offset(&b->shape, i, m, d);
}

const int32_t *tr_batches_labels(tr_batches *b, int64_t i, int m, int d)
{
    const tr_batch_shape *s = &b->shape;
    const int32_t *from = b->labels.count ? b->labels.ids : b->data.ids;
    int64_t n = per_replica(s);
    memcpy(b->step_labels, from + offset(s, i, m, d) + (next_in_stream(b) ? 1 : 0), (size_t)n * sizeof *from);
    tr_labels_map_ignored(b->step_labels, n, s->ignore_index);
    return b->step_labels;
}

double tr_batches_divisor(const tr_batches *b, int64_t i)
{
    return (double)b->labelled[i] / (double)b->shape.replicas;
}
