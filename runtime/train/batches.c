/* batches.c: see batches.h. */
#include "runtime/train/batches.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/train/labels.h"
#include "runtime/train/segments.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

static int64_t per_replica(const tr_batch_shape *s) { return s->batch * s->seq; }
static int64_t rows_per_step(const tr_batch_shape *s) { return s->batch * s->replicas * s->micro_batches; }

/* With neither --labels nor a loss that shifts, the labels are the
 * stream one token further on. */
static bool next_in_stream(const tr_batches *b)
{
    return !b->labels.count && b->shape.label_shift == 0;
}

/* splitmix64: a seeded generator every rank runs alike. */
static uint64_t splitmix(uint64_t *z)
{
    uint64_t x = (*z += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Epoch e's order of the samples: the stream's, or with --shuffle-seed a
 * Fisher-Yates permutation drawn from (seed, e). */
static void order_epoch(tr_batches *b, int64_t e)
{
    if (!b->order || b->order_epoch == e)
        return;
    for (int64_t k = 0; k < b->samples; k++)
        b->order[k] = k;
    uint64_t z = b->shape.shuffle_seed ^ ((uint64_t)e * 0xD1B54A32D192ED03ull);
    for (int64_t k = b->samples - 1; k > 0; k--) {
        int64_t j = (int64_t)(splitmix(&z) % (uint64_t)(k + 1)), t = b->order[k];
        b->order[k] = b->order[j];
        b->order[j] = t;
    }
    b->order_epoch = e;
}

/* The sample the r-th row the run reads is: epoch r / (the rows an
 * epoch's steps take), the sample at that place of its order. */
static int64_t sample_of(tr_batches *b, int64_t r)
{
    const int64_t per_epoch = b->steps_per_epoch * rows_per_step(&b->shape), e = r / per_epoch, j = r % per_epoch;
    order_epoch(b, e);
    return b->order ? b->order[j] : j;
}

/* Sample k's labels (seq of them, the ignored ones -100) into out. */
static void sample_labels(const tr_batches *b, int64_t k, int32_t *out)
{
    const tr_batch_shape *s = &b->shape;
    const int32_t *from = b->labels.count ? b->labels.ids : b->data.ids;
    memcpy(out, from + k * s->seq + (next_in_stream(b) ? 1 : 0), (size_t)s->seq * sizeof *out);
    tr_labels_map_ignored(out, s->seq, s->ignore_index);
}

/* The first row of step i's micro-batch m of replica d. */
static int64_t first_row(const tr_batch_shape *s, int64_t i, int m, int d)
{
    return ((i * s->micro_batches + m) * s->replicas + d) * s->batch;
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

/* The samples the stream holds, the steps an epoch takes (whole steps:
 * the rest of an epoch's samples go unread, as DistributedSampler's
 * drop_last), and the steps of the run: --steps, or every step of the
 * epochs; -1 with a message when the epochs hold fewer. */
static int count_samples(tr_batches *b, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    const int64_t extra = next_in_stream(b) ? 1 : 0;
    b->samples = b->data.count > extra ? (b->data.count - extra) / s->seq : 0;
    b->steps_per_epoch = b->samples / rows_per_step(s);
    char step_is[160] = "batch x seq";
    if (s->micro_batches > 1 || s->replicas > 1) {
        int n = 0;
        if (s->micro_batches > 1)
            n += snprintf(step_is + n, sizeof step_is - (size_t)n, "%d micro-batches x ", s->micro_batches);
        if (s->replicas > 1)
            n += snprintf(step_is + n, sizeof step_is - (size_t)n, "%d data-parallel replicas x ", s->replicas);
        snprintf(step_is + n, sizeof step_is - (size_t)n, "%" PRId64 " of batch x seq", per_replica(s));
    }
    int64_t holds, rows;
    if (__builtin_mul_overflow(b->steps_per_epoch, s->epochs, &holds) ||
        __builtin_mul_overflow(holds, rows_per_step(s), &rows))
        return tp_error(err, errlen, "%s: %" PRId64 " epochs of %" PRId64 " steps are more steps than tprun counts; "
                        "train fewer epochs", b->data_path, s->epochs, b->steps_per_epoch);
    if (!b->steps)
        b->steps = holds;
    if (holds && b->steps <= holds)
        return 0;
    char over[120] = "", more[120] = "";
    if (s->epochs > 1)
        snprintf(over, sizeof over, " in %" PRId64 " epochs", s->epochs);
    if (extra)
        snprintf(more, sizeof more, " and a token after them (the labels are the stream one token further on)");
    if (!s->steps)
        return tp_error(err, errlen, "%s: its %" PRId64 " tokens hold no step of %" PRId64 " (%s)%s; pass more "
                        "data or a smaller batch", b->data_path, b->data.count, rows_per_step(s) * s->seq, step_is,
                        more);
    return tp_error(err, errlen, "%s: its %" PRId64 " tokens hold %" PRId64 " step%s of %" PRId64 " (%s)%s%s, "
                    "--steps asks for %" PRId64 "; pass more data or fewer steps", b->data_path, b->data.count, holds,
                    holds == 1 ? "" : "s", rows_per_step(s) * s->seq, step_is, more, over, s->steps);
}

/* Every step's labelled tokens over the micro-batches and replicas, from
 * each sample's count (the samples' tokens read once, whatever the
 * epochs); a training step without one is refused (PyTorch's mean over no
 * element is NaN). A loss without labels counts nothing. */
static int count_labelled(tr_batches *b, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    if (!s->scored)
        return 0;
    int64_t *per_sample = tp_xmalloc((size_t)b->samples * sizeof *per_sample + 1);
    for (int64_t k = 0; k < b->samples; k++) {
        sample_labels(b, k, b->step_labels);
        per_sample[k] = tr_labels_counted(b->step_labels, 1, s->seq, s->label_shift, TR_IGNORE_INDEX);
    }
    b->labelled = tp_xmalloc((size_t)b->steps * sizeof *b->labelled + 1);
    int rc = 0;
    for (int64_t i = 0; i < b->steps && !rc; i++) {
        b->labelled[i] = 0;
        for (int64_t r = i * rows_per_step(s); r < (i + 1) * rows_per_step(s); r++)
            b->labelled[i] += per_sample[sample_of(b, r)];
        if (!b->labelled[i] && !s->any_step)
            rc = tp_error(err, errlen, "step %" PRId64 " has no label to score: every label of its %" PRId64
                            " tokens is ignored (--ignore-index %d%s), so its loss would be 0/0; give it labelled "
                            "tokens or train fewer steps", i + 1, rows_per_step(s) * s->seq, s->ignore_index,
                            s->label_shift ? ", or the last position of a row, which has no next token" : "");
    }
    free(per_sample);
    return rc;
}

int tr_batches_open(tr_batches *b, const tr_batch_shape *shape, const char *data_path, const char *labels_path,
                    char *err, size_t errlen)
{
    *b = (tr_batches){.shape = *shape, .data_path = data_path, .labels_path = labels_path, .steps = shape->steps,
                      .order_epoch = -1};
    const tr_batch_shape *s = &b->shape;
    b->step_ids = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_ids + 1);
    b->step_labels = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_labels + 1);
    b->step_segments = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_segments + 1);
    if (tr_tokens_open(&b->data, data_path, s->vocab, err, errlen))
        return -1;
    if (labels_path && (tr_tokens_read(&b->labels, labels_path, err, errlen) || check_labels(b, err, errlen)))
        return -1;
    if (count_samples(b, err, errlen))
        return -1;
    if (s->shuffle)
        b->order = tp_xmalloc((size_t)b->samples * sizeof *b->order + 1);
    return count_labelled(b, err, errlen);
}

void tr_batches_free(tr_batches *b)
{
    tr_tokens_free(&b->data);
    tr_tokens_free(&b->labels);
    free(b->step_ids);
    free(b->step_labels);
    free(b->step_segments);
    free(b->labelled);
    free(b->order);
    *b = (tr_batches){0};
}

const int32_t *tr_batches_ids(tr_batches *b, int64_t i, int m, int d)
{
    const tr_batch_shape *s = &b->shape;
    for (int64_t row = 0; row < s->batch; row++)
        memcpy(b->step_ids + row * s->seq, b->data.ids + sample_of(b, first_row(s, i, m, d) + row) * s->seq,
               (size_t)s->seq * sizeof *b->step_ids);
    return b->step_ids;
}

const int32_t *tr_batches_labels(tr_batches *b, int64_t i, int m, int d)
{
    const tr_batch_shape *s = &b->shape;
    for (int64_t row = 0; row < s->batch; row++)
        sample_labels(b, sample_of(b, first_row(s, i, m, d) + row), b->step_labels + row * s->seq);
    return b->step_labels;
}

void tr_batches_write(tr_batches *b, tr_exec *x, int64_t i, int m, int d)
{
    const tr_batch_shape *s = &b->shape;
    const tr_schedule *sched = x->s;
    const int32_t *ids = tr_batches_ids(b, i, m, d);
    tr_exec_write_buf(x, sched->input_ids, ids);
    if (sched->segments >= 0) {
        tr_segments_of(b->step_segments, ids, s->batch, s->seq, s->pad_id, s->eos_id);
        tr_exec_write_buf(x, sched->segments, b->step_segments);
    }
    if (sched->labels >= 0)    /* a summed loss (tpcc --loss sum) has none */
        tr_exec_write_buf(x, sched->labels, tr_batches_labels(b, i, m, d));
}

double tr_batches_divisor(const tr_batches *b, int64_t i)
{
    return (double)b->labelled[i] / (double)b->shape.replicas;
}
