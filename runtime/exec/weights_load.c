/* weights_load.c: see weights_load.h. */
#include "runtime/exec/weights_load.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/io/weights.h"
#include "sched/dp_shard.h"
#include "util/errmsg.h"
#include "util/suffix.h"
#include "util/xalloc.h"

/* The staging buffer: the backend's staging memory, or malloc's. */
typedef struct staging {
    const tp_backend *be;
    void *p;
    size_t bytes;
} staging;

static void staging_free(staging *st)
{
    if (st->p)
        (st->be->release_staging ? st->be->release_staging : free)(st->p);
    st->p = NULL;
    st->bytes = 0;
}

static int staging_reserve(staging *st, size_t bytes, char *err, size_t errlen)
{
    if (bytes <= st->bytes)
        return 0;
    staging_free(st);
    st->p = st->be->alloc_staging ? st->be->alloc_staging(bytes) : malloc(bytes);
    if (!st->p)
        return tp_error(err, errlen, "cannot allocate %zu bytes of host memory to stage the weights through (%s backend)",
                        bytes, st->be->name);
    st->bytes = bytes;
    return 0;
}

/* Rows [row0, row0 + n) of the slice, as host float32. */
static int read_rows(const tr_weight_source *src, const tp_weight_slice *ws, int64_t row0, int64_t n, float *out,
                     char *err, size_t errlen)
{
    if (src->ckpt)
        return tp_checkpoint_read_rows(src->ckpt, ws, row0, n, out, err, errlen);
    if (tp_weight_init_seeded_rows(ws, src->seed, row0, n, out) < 0)
        return tp_error(err, errlen, "weight '%s': inconsistent slice in the schedule", ws->name);
    return 0;
}

/* float32 -> bf16 in place: element i's two bytes land on bytes already
 * read (those of element i / 2). Through memcpy: the buffer is both types. */
static void round_to_bf16(void *buf, int64_t n)
{
    char *b = buf;
    for (int64_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, b + 4 * i, sizeof f);
        uint16_t h = tp_f32_to_bf16(f);
        memcpy(b + 2 * i, &h, sizeof h);
    }
}

/* Where a weight's values go in the region: [first, first + held) of its
 * local elements (all of them, or with FSDP this replica's run), to
 * element `stored` of the region onwards. */
typedef struct kept {
    int64_t first, held, stored;
} kept;

/* Of n values that are the weight's local elements [from, from + n), in
 * host memory at `values` (already in the region's dtype), those kept, to
 * their place in the region. */
static void put_kept(const tr_exec *x, const tr_weights_sink *dst, const kept *k, const char *values, int64_t from,
                     int64_t n)
{
    int64_t lo = from > k->first ? from : k->first, hi = from + n < k->first + k->held ? from + n : k->first + k->held;
    if (lo >= hi)
        return;
    size_t dsize = tp_dtype_size(dst->dtype);
    /* to_device returns once the buffer may be written again */
    x->be->to_device((char *)dst->region + (size_t)(k->stored + lo - k->first) * dsize,
                     values + (size_t)(lo - from) * dsize, (size_t)(hi - lo) * dsize);
}

/* One slice to the region's element `at` onwards (fp32_copy's layout:
 * the whole region's), the kept part of it to the region. */
static int load_slice(const tr_exec *x, const tr_weight_source *src, const tr_weights_sink *dst,
                      const tp_weight_slice *ws, int64_t at, int64_t local0, const kept *k, staging *st, char *err,
                      size_t errlen)
{
    int64_t rows, width;
    if (tp_weight_slice_rows(ws, &rows, &width))
        return tp_error(err, errlen, "weight '%s': inconsistent slice in the schedule", ws->name);
    if (!dst->region)
        return read_rows(src, ws, 0, rows, dst->fp32_copy + at, err, errlen);
    size_t row_bytes = (size_t)width * sizeof(float);
    if (x->be->host_memory && dst->dtype == TP_F32 && !dst->runs) {   /* read in place */
        char *base = (char *)dst->region + (size_t)at * sizeof(float);
        if (read_rows(src, ws, 0, rows, (float *)base, err, errlen))
            return -1;
        if (dst->fp32_copy)
            memcpy(dst->fp32_copy + at, base, (size_t)rows * row_bytes);
        return 0;
    }
    size_t bound = dst->staging_bytes ? dst->staging_bytes : TR_WEIGHTS_STAGING_BYTES;
    if (staging_reserve(st, row_bytes > bound ? row_bytes : bound, err, errlen))
        return -1;
    int64_t step = width ? (int64_t)(st->bytes / row_bytes) : rows;
    for (int64_t r = 0; r < rows; r += step) {
        int64_t n = rows - r < step ? rows - r : step;
        if (read_rows(src, ws, r, n, st->p, err, errlen))
            return -1;
        if (dst->fp32_copy)
            memcpy(dst->fp32_copy + at + r * width, st->p, (size_t)n * row_bytes);
        if (dst->dtype == TP_BF16)
            round_to_bf16(st->p, n * width);
        put_kept(x, dst, k, st->p, local0 + r * width, n * width);
    }
    return 0;
}

int tr_weights_load(const tr_exec *x, const tr_weight_source *src, const tr_weights_sink *dst, char *err,
                    size_t errlen)
{
    const tr_schedule *s = x->s;
    staging st = {.be = x->be};
    int rc = 0;
    for (int i = 0; i < s->nweights && !rc; i++) {
        const tr_weight *w = &s->weights[i];
        char *name = src->suffix ? tp_xasprintf("%s%s", w->name, src->suffix) : NULL;
        int64_t at = w->region_offset, dp = s->data_parallel;
        kept keep = {0, w->local_elems, w->region_offset};
        if (dst->runs)
            keep = (kept){s->dp_rank * tp_dp_shard_elems(w->local_elems, dp),
                          tp_dp_shard_held(w->local_elems, dp, s->dp_rank), w->stored_offset};
        /* a packed weight's segments are row ranges (dim 0), held one after another */
        for (int k = 0; k < (w->nsegments ? w->nsegments : 1) && !rc; k++) {
            tp_weight_slice ws = tr_weight_slice(w, s->rank, k);
            if (name)
                ws.name = name;
            rc = load_slice(x, src, dst, &ws, at, at - w->region_offset, &keep, &st, err, errlen);
            at += tp_weight_slice_numel(&ws);
        }
        free(name);
        if (!rc && dst->progress)
            dst->progress(dst->ctx, i + 1, s->nweights);
    }
    staging_free(&st);
    return rc;
}

static bool is_weight_of(const tr_schedule *s, const char *name)
{
    for (int i = 0; i < s->nweights; i++)
        if (!strcmp(s->weights[i].name, name))
            return true;
    return false;
}

/* Whether checkpoint tensors a and b hold the same values: the same dtype
 * and shape, compared as float32, the first row alone (two layers' weights
 * of one shape differ there: a checkpoint of more layers costs a row per
 * pair), then in pieces of about a million values. A read that fails
 * compares unequal. */
static bool same_values(tp_checkpoint *c, const char *a, const char *b)
{
    const char *dtype[2];
    int ndim[2];
    int64_t shape[2][8];
    if (tp_checkpoint_tensor_info(c, a, &dtype[0], &ndim[0], shape[0]) ||
        tp_checkpoint_tensor_info(c, b, &dtype[1], &ndim[1], shape[1]) || strcmp(dtype[0], dtype[1]) ||
        ndim[0] != ndim[1] || ndim[0] < 1 || ndim[0] > 2 || memcmp(shape[0], shape[1], (size_t)ndim[0] * 8))
        return false;
    tp_weight_slice slice = {.rank = -1, .shape = {shape[0][0], ndim[0] == 2 ? shape[0][1] : 0}, .dim = -1,
                             .ndim = ndim[0]};
    int64_t rows, width;
    if (tp_weight_slice_rows(&slice, &rows, &width) || width <= 0)
        return false;
    const int64_t piece = width >= (1 << 20) ? 1 : (1 << 20) / width;
    float *x = tp_xmalloc((size_t)(piece * width) * sizeof *x), *y = tp_xmalloc((size_t)(piece * width) * sizeof *y);
    char err[300];
    bool same = true;
    for (int64_t row = 0, n = 1; same && row < rows; row += n, n = rows - row < piece ? rows - row : piece) {
        tp_weight_slice sa = slice, sb = slice;
        sa.name = a;
        sb.name = b;
        same = !tp_checkpoint_read_rows(c, &sa, row, n, x, err, sizeof err) &&
               !tp_checkpoint_read_rows(c, &sb, row, n, y, err, sizeof err) &&
               !memcmp(x, y, (size_t)(n * width) * sizeof *x);
    }
    free(x);
    free(y);
    return same;
}

/* Whether checkpoint tensor `name` is a second copy of a weight the
 * schedule takes (tied). */
static bool tied_copy(const tr_schedule *s, tp_checkpoint *c, const char *name)
{
    for (int i = 0; i < s->nweights; i++)
        if (same_values(c, name, s->weights[i].name))
            return true;
    return false;
}

size_t tr_weights_unused(const tr_schedule *s, tp_checkpoint *c, const char **first)
{
    size_t unused = 0;
    *first = NULL;
    for (size_t i = 0; i < tp_checkpoint_num_tensors(c); i++) {
        const char *name = tp_checkpoint_tensor_name(c, i);
        bool buffer = tp_ends_with(name, ".inv_freq") || tp_ends_with(name, ".attn.bias") ||
                      tp_ends_with(name, ".attn.masked_bias");
        if (buffer || is_weight_of(s, name) || tied_copy(s, c, name))
            continue;
        if (!unused++)
            *first = name;
    }
    return unused;
}
