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
    return !b->streams[TR_STREAM_LABELS].file && b->shape.label_shift == 0;
}

/* The flag that names stream k of these batches: training's or evaluation's. */
static const char *flag_of(const tr_batches *b, tr_stream_kind k)
{
    return b->shape.evaluation ? tr_streams[k].eval_flag : tr_streams[k].flag;
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

/* Epoch r / (the rows an epoch's steps take), the sample at that place of
 * its order. */
int64_t tr_batches_sample(tr_batches *b, int64_t r)
{
    const int64_t per_epoch = b->steps_per_epoch * rows_per_step(&b->shape), e = r / per_epoch, j = r % per_epoch;
    order_epoch(b, e);
    return b->order ? b->order[j] : j;
}

/* The first row of step i's micro-batch m of replica d. */
static int64_t first_row(const tr_batch_shape *s, int64_t i, int m, int d)
{
    return ((i * s->micro_batches + m) * s->replicas + d) * s->batch;
}

/* Every stream beside --data holds one value per token. */
static int check_lengths(const tr_batches *b, char *err, size_t errlen)
{
    const tr_tokens *data = &b->streams[TR_STREAM_DATA];
    for (int k = 0; k < TR_STREAM_KINDS; k++) {
        const tr_tokens *t = &b->streams[k];
        if (t->file && t->count != data->count)
            return tp_error(err, errlen, "%s %s holds %" PRId64 " %s and %s %s %" PRId64 " tokens: the %s are a "
                            "stream beside the tokens, one per token", flag_of(b, k), t->path, t->count,
                            tr_streams[k].values, flag_of(b, TR_STREAM_DATA), data->path, data->count,
                            tr_streams[k].values);
    }
    return 0;
}

/* The samples the stream holds, the steps an epoch takes (whole steps:
 * the rest of an epoch's samples go unread, as DistributedSampler's
 * drop_last), and the steps of the run: --steps, or every step of the
 * epochs; -1 with a message when the epochs hold fewer. */
static int count_samples(tr_batches *b, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    const tr_tokens *data = &b->streams[TR_STREAM_DATA];
    const char *flag = flag_of(b, TR_STREAM_DATA);
    const int64_t extra = next_in_stream(b) ? 1 : 0;
    b->samples = data->count > extra ? (data->count - extra) / s->seq : 0;
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
        return tp_error(err, errlen, "%s %s: %" PRId64 " epochs of %" PRId64 " steps are more steps than tprun "
                        "counts; train fewer epochs", flag, data->path, s->epochs, b->steps_per_epoch);
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
        return tp_error(err, errlen, "%s %s: its %" PRId64 " tokens hold no step of %" PRId64 " (%s)%s; pass more "
                        "data or a smaller batch", flag, data->path, data->count, rows_per_step(s) * s->seq, step_is,
                        more);
    return tp_error(err, errlen, "%s %s: its %" PRId64 " tokens hold %" PRId64 " step%s of %" PRId64 " (%s)%s%s, "
                    "--steps asks for %" PRId64 "; pass more data or fewer steps", flag, data->path, data->count,
                    holds, holds == 1 ? "" : "s", rows_per_step(s) * s->seq, step_is, more, over, s->steps);
}

int tr_batches_open(tr_batches *b, const tr_batch_shape *shape, const char *const paths[TR_STREAM_KINDS],
                    char *err, size_t errlen)
{
    *b = (tr_batches){.shape = *shape, .steps = shape->steps, .order_epoch = -1,
                      .rules = {.vocab = shape->vocab, .ignore_index = shape->ignore_index, .seq = shape->seq,
                                .pad_id = shape->pad_id}};
    const tr_batch_shape *s = &b->shape;
    b->step_ids = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_ids + 1);
    b->step_labels = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_labels + 1);
    b->step_segments = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_segments + 1);
    b->step_mask = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_mask + 1);
    b->step_positions = tp_xmalloc((size_t)per_replica(s) * sizeof *b->step_positions + 1);
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        if (paths[k] && tr_tokens_open(&b->streams[k], paths[k], err, errlen))
            return -1;
    if (check_lengths(b, err, errlen) || count_samples(b, err, errlen))
        return -1;
    if (s->shuffle)
        b->order = tp_xmalloc((size_t)b->samples * sizeof *b->order + 1);
    return 0;
}

void tr_batches_free(tr_batches *b)
{
    for (int k = 0; k < TR_STREAM_KINDS; k++) {
        tr_tokens_close(&b->streams[k]);
        free(b->rows.v[k]);
    }
    free(b->step_ids);
    free(b->step_labels);
    free(b->step_segments);
    free(b->step_mask);
    free(b->step_positions);
    free(b->labelled);
    free(b->order);
    *b = (tr_batches){0};
}

int tr_batches_read_rows(tr_batches *b, int64_t row, int64_t n, char *err, size_t errlen)
{
    const int64_t count = b->streams[TR_STREAM_DATA].count, first = row * b->shape.seq;
    int64_t end = (row + n) * b->shape.seq + (next_in_stream(b) ? 1 : 0);
    if (end > count)
        end = count;
    if (end - first > b->rows_room) {
        b->rows_room = end - first;
        for (int k = 0; k < TR_STREAM_KINDS; k++)
            if (b->streams[k].file)
                b->rows.v[k] = tp_xrealloc(b->rows.v[k], (size_t)b->rows_room * sizeof *b->rows.v[k]);
    }
    b->rows.first = first;
    b->rows.n = end - first;
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        if (b->streams[k].file && tr_tokens_read(&b->streams[k], first, end - first, b->rows.v[k], err, errlen))
            return -1;
    return 0;
}

void tr_batches_sample_labels(const tr_batches *b, int64_t k, int32_t *out)
{
    const tr_batch_shape *s = &b->shape;
    const bool beside = b->streams[TR_STREAM_LABELS].file != NULL;
    const int64_t *from = b->rows.v[beside ? TR_STREAM_LABELS : TR_STREAM_DATA] + (k * s->seq - b->rows.first) +
                          (next_in_stream(b) ? 1 : 0);
    for (int64_t t = 0; t < s->seq; t++)     /* checked: in [0, vocab) or the ignore index */
        out[t] = (int32_t)from[t];
    tr_labels_map_ignored(out, s->seq, s->ignore_index);
}

void tr_batches_first_bad(const tr_batches *b, int64_t first[TR_STREAM_KINDS])
{
    for (int k = 0; k < TR_STREAM_KINDS; k++) {
        int64_t p = b->streams[k].file ? tr_stream_first_bad((tr_stream_kind)k, &b->rows, &b->rules) : -1;
        if (p >= 0 && p < first[k])
            first[k] = p;
    }
}

int tr_batches_bad(tr_batches *b, const int64_t first[TR_STREAM_KINDS], char *err, size_t errlen)
{
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        if (first[k] != INT64_MAX) {
            const int64_t p = first[k];
            if (tr_batches_read_rows(b, p / b->shape.seq, 1, err, errlen))
                return -1;
            return tr_stream_bad((tr_stream_kind)k, &b->rows, p, &b->rules, flag_of(b, k), b->streams[k].path,
                                 err, errlen);
        }
    return 0;
}

/* The rows read keep every stream's rule (checked before step 1, so a
 * value that breaks one now was written since). */
static int check_rows(tr_batches *b, char *err, size_t errlen)
{
    int64_t first[TR_STREAM_KINDS];
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        first[k] = INT64_MAX;
    tr_batches_first_bad(b, first);
    return tr_batches_bad(b, first, err, errlen);
}

/* A row's first S values of stream k, which its rule keeps within int32. */
static void narrow(int32_t *out, const tr_batches *b, tr_stream_kind k)
{
    for (int64_t t = 0; t < b->shape.seq; t++)
        out[t] = (int32_t)b->rows.v[k][t];
}

int tr_batches_read(tr_batches *b, int64_t i, int m, int d, char *err, size_t errlen)
{
    const tr_batch_shape *s = &b->shape;
    const bool mask = b->streams[TR_STREAM_ATTENTION_MASK].file, positions = b->streams[TR_STREAM_POSITION_IDS].file;
    for (int64_t row = 0; row < s->batch; row++) {
        const int64_t k = tr_batches_sample(b, first_row(s, i, m, d) + row), at = row * s->seq;
        if (tr_batches_read_rows(b, k, 1, err, errlen) || check_rows(b, err, errlen))
            return -1;
        narrow(b->step_ids + at, b, TR_STREAM_DATA);
        if (mask)
            narrow(b->step_mask + at, b, TR_STREAM_ATTENTION_MASK);
        if (positions)
            narrow(b->step_positions + at, b, TR_STREAM_POSITION_IDS);
        if (s->scored)
            tr_batches_sample_labels(b, k, b->step_labels + at);
    }
    const tr_segment_marks marks = {.ids = b->step_ids, .attention_mask = mask ? b->step_mask : NULL,
                                    .position_ids = positions ? b->step_positions : NULL, .pad_id = s->pad_id,
                                    .eos_id = s->eos_id};
    tr_segments_of(b->step_segments, &marks, s->batch, s->seq);
    return 0;
}

int tr_batches_write(tr_batches *b, tr_exec *x, int64_t i, int m, int d, char *err, size_t errlen)
{
    const tr_schedule *sched = x->s;
    if (tr_batches_read(b, i, m, d, err, errlen))
        return -1;
    tr_exec_write_buf(x, sched->input_ids, b->step_ids);
    if (sched->segments >= 0)
        tr_exec_write_buf(x, sched->segments, b->step_segments);
    if (sched->labels >= 0)    /* a summed loss (tpcc --loss sum) has none */
        tr_exec_write_buf(x, sched->labels, b->step_labels);
    return 0;
}

double tr_batches_divisor(const tr_batches *b, int64_t i)
{
    return (double)b->labelled[i] / (double)b->shape.replicas;
}

uint64_t tr_batches_bytes_read(const tr_batches *b)
{
    uint64_t n = 0;
    for (int k = 0; k < TR_STREAM_KINDS; k++)
        n += b->streams[k].bytes_read;
    return n;
}
