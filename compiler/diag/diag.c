/* diag.c: collecting, sorting and dispatching diagnostics. The renderers
 * live in diag/text.c and diag/json.c, fix-it application in diag/fixit.c. */
#include "compiler/diag/diag.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/map.h"
#include "util/xalloc.h"

void tp_diags_init(tp_diags *d)
{
    memset(d, 0, sizeof *d);
}

void tp_diag_drop_fixits(tp_diag *g)
{
    for (int i = 0; i < g->nfixits; i++) {
        free(g->fixits[i].replacement);
        free(g->fixits[i].claim);
    }
    free(g->fixits);
    g->fixits = NULL;
    g->nfixits = 0;
}

static void diag_free(tp_diag *g)
{
    free(g->check);
    free(g->message);
    for (int i = 0; i < g->nnotes; i++)
        free(g->notes[i].message);
    free(g->notes);
    for (int i = 0; i < g->nhelps; i++)
        free(g->helps[i]);
    free(g->helps);
    tp_diag_drop_fixits(g);
    free(g->promoted);
}

static void suppression_free(tp_suppression *s)
{
    for (int i = 0; i < s->nchecks; i++)
        free(s->checks[i]);
    free(s->checks);
    free(s->spans);
    free(s->used);
    free(s->justification);
}

void tp_diags_free(tp_diags *d)
{
    for (int i = 0; i < d->count; i++)
        diag_free(&d->items[i]);
    free(d->items);
    for (int i = 0; i < d->nsupps; i++)
        suppression_free(&d->supps[i]);
    free(d->supps);
    tp_diags_init(d);
}

static void count_level(tp_diags *d, const tp_diag *g)
{
    if (g->suppression)
        d->suppressed++;
    else if (g->level == TP_ERROR)
        d->errors++;
    else if (g->level == TP_WARNING)
        d->warnings++;
    else if (g->level == TP_UNSUPPORTED)
        d->unsupported++;
}

static tp_diag *diag_add_v(tp_diags *d, tp_diag_level level, tp_span span, const char *check, const char *fmt,
                           va_list ap)
{
    if (d->count == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 16;
        d->items = tp_xreallocarray(d->items, (size_t)d->cap, sizeof *d->items);
    }
    tp_diag *g = &d->items[d->count++];
    memset(g, 0, sizeof *g);
    g->level = level;
    g->span = span;
    g->check = tp_xstrdup(check ? check : "");
    g->message = tp_xvasprintf(fmt, ap);
    count_level(d, g);
    return g;
}

tp_diag *tp_diag_add(tp_diags *d, tp_diag_level level, tp_span span,
                     const char *check, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tp_diag *g = diag_add_v(d, level, span, check, fmt, ap);
    va_end(ap);
    return g;
}

tp_diag *tp_diag_unsupported(tp_diags *d, tp_span span, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tp_diag *g = diag_add_v(d, TP_UNSUPPORTED, span, "unsupported", fmt, ap);
    va_end(ap);
    return g;
}

void tp_diag_note_at(tp_diag *g, tp_span span, const char *fmt, ...)
{
    g->notes = tp_xreallocarray(g->notes, (size_t)g->nnotes + 1, sizeof *g->notes);
    tp_diag_note *n = &g->notes[g->nnotes++];
    /* a note at the diagnostic's own location would print the same source
     * line twice: keep its message, drop the location */
    bool same = span.file == g->span.file && span.offset == g->span.offset && span.length == g->span.length;
    n->span = same ? TP_NO_SPAN : span;
    va_list ap;
    va_start(ap, fmt);
    n->message = tp_xvasprintf(fmt, ap);
    va_end(ap);
}

void tp_diag_help(tp_diag *g, const char *fmt, ...)
{
    g->helps = tp_xreallocarray(g->helps, (size_t)g->nhelps + 1, sizeof *g->helps);
    va_list ap;
    va_start(ap, fmt);
    g->helps[g->nhelps++] = tp_xvasprintf(fmt, ap);
    va_end(ap);
}

void tp_diag_fixit(tp_diag *g, tp_span span, const char *replacement)
{
    g->fixits = tp_xreallocarray(g->fixits, (size_t)g->nfixits + 1, sizeof *g->fixits);
    tp_fixit *f = &g->fixits[g->nfixits++];
    f->span = span;
    f->replacement = tp_xstrdup(replacement);
    f->claim = NULL;
}

void tp_diag_fixit_claim(tp_diag *g, tp_span span, const char *replacement, const char *claim)
{
    tp_diag_fixit(g, span, replacement);
    g->fixits[g->nfixits - 1].claim = tp_xstrdup(claim);
}

/* qsort is not stable, so each item carries its original position as the
 * last sort key. */
typedef struct keyed_diag {
    tp_diag diag;
    int seq;
} keyed_diag;

static int cmp_int(int a, int b)
{
    return (a > b) - (a < b);
}

static int cmp_keyed(const void *pa, const void *pb)
{
    const keyed_diag *a = pa, *b = pb;
    int c = cmp_int(a->diag.span.file, b->diag.span.file);
    if (c == 0)
        c = cmp_int(a->diag.span.offset, b->diag.span.offset);
    return c ? c : cmp_int(a->seq, b->seq);
}

/* What makes two diagnostics the same: level, span, check and message. */
static void identity(tp_buf *id, const tp_diag *g)
{
    int numbers[] = {(int)g->level, g->span.file, g->span.line, g->span.col, g->span.offset, g->span.length};
    id->len = 0;
    tp_buf_append_n(id, (const char *)numbers, sizeof numbers);
    tp_buf_append_n(id, g->check, strlen(g->check) + 1);
    tp_buf_append(id, g->message);
}

void tp_diags_sort(tp_diags *d)
{
    if (d->count == 0)
        return;
    keyed_diag *k = tp_xreallocarray(NULL, (size_t)d->count, sizeof *k);
    for (int i = 0; i < d->count; i++) {
        k[i].diag = d->items[i];
        k[i].seq = i;
    }
    qsort(k, (size_t)d->count, sizeof *k, cmp_keyed);

    /* Duplicates share file and offset, so they sit together in runs once
     * sorted; within a run of several, their identities go in a map
     * (comparing each with the others made many findings at one place, all
     * without a location say, quadratic). */
    tp_buf id;
    tp_buf_init(&id);
    int n = 0;
    d->errors = d->warnings = d->unsupported = d->suppressed = 0;
    for (int start = 0, end; start < d->count; start = end) {
        for (end = start + 1; end < d->count && k[end].diag.span.file == k[start].diag.span.file &&
                              k[end].diag.span.offset == k[start].diag.span.offset;
             end++)
            ;
        tp_map seen;
        tp_map_init(&seen);
        for (int i = start; i < end; i++) {
            tp_diag *g = &k[i].diag;
            if (end - start > 1) {
                identity(&id, g);
                if (tp_map_put(&seen, id.data, id.len, i) != i) {
                    diag_free(g);
                    continue;
                }
            }
            d->items[n++] = *g;
            count_level(d, g);
        }
        tp_map_free(&seen);
    }
    d->count = n;
    tp_buf_free(&id);
    free(k);
}

void tp_diags_limit(tp_diags *d, int limit)
{
    if (limit <= 0)
        return;
    /* each check's diagnostics, counted first so that the last one shown
     * can say how many more there are */
    tp_map checks;
    tp_map_init(&checks);
    int *total = tp_xcalloc((size_t)d->count + 1, sizeof *total);
    int *shown = tp_xcalloc((size_t)d->count + 1, sizeof *shown);
    int nchecks = 0;
    for (int i = 0; i < d->count; i++)
        if (!d->items[i].suppression) {
            int64_t c = tp_map_puts(&checks, d->items[i].check, nchecks);
            nchecks += c == nchecks;
            total[c]++;
        }
    int n = 0;
    for (int i = 0; i < d->count; i++) {
        tp_diag *g = &d->items[i];
        int64_t c = g->suppression ? -1 : tp_map_gets(&checks, g->check);
        if (c >= 0 && ++shown[c] > limit) {
            diag_free(g);
            continue;
        }
        if (c >= 0 && shown[c] == limit && total[c] > limit)
            tp_diag_note_at(g, TP_NO_SPAN, "%d more [%s] diagnostic%s not shown (--diagnostics-limit=0 shows all)",
                            total[c] - limit, g->check, total[c] - limit == 1 ? "" : "s");
        d->items[n++] = *g;
    }
    d->count = n;
    free(shown);
    free(total);
    tp_map_free(&checks);
}

void tp_diags_drop(tp_diags *d, const unsigned char *drop)
{
    int n = 0;
    d->errors = d->warnings = d->unsupported = d->suppressed = 0;
    for (int i = 0; i < d->count; i++) {
        if (drop[i]) {
            diag_free(&d->items[i]);
            continue;
        }
        d->items[n] = d->items[i];
        count_level(d, &d->items[n++]);
    }
    d->count = n;
}

int tp_diags_render(const tp_diag_unit *units, int n, tp_diag_format fmt,
                    const tp_render_opts *opts, FILE *out)
{
    tp_buf b;
    tp_buf_init(&b);
    if (fmt == TP_FMT_JSON) {
        char *s = tp_diags_render_json(units, n);
        tp_buf_append(&b, s);
        free(s);
    } else if (fmt == TP_FMT_SARIF) {
        char *s = tp_diags_render_sarif(units, n, opts);
        tp_buf_append(&b, s);
        free(s);
    } else {
        for (int i = 0; i < n; i++) {
            char *s = fmt == TP_FMT_GITHUB ? tp_diags_render_github(&units[i], opts->cwd)
                                           : tp_diags_render_text(units[i].diags, units[i].src, opts->color);
            tp_buf_append(&b, s);
            free(s);
        }
    }
    /* One write, then a flush, so a full disk or closed pipe is noticed
     * here rather than lost at exit. */
    int ok = fwrite(b.data ? b.data : "", 1, b.len, out) == b.len && fflush(out) == 0;
    tp_buf_free(&b);
    return ok ? 0 : -1;
}
