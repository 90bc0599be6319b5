/* diag/fixit.c: applying fix-its to the files on disk.
 *
 * Edits are made against the text tpcc loaded (the spans point into it),
 * per file: conflicting edits are all dropped, the rest spliced in, and the
 * result written atomically. All new contents are written to temporary
 * files before any original is replaced, so an error while writing (full
 * disk, read-only directory) leaves every file as it was; only a rename
 * failing after that can leave the files renamed before it edited. */
#define _XOPEN_SOURCE 700   /* realpath */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/diag/diag.h"
#include "util/atomic_write.h"
#include "util/xalloc.h"
#include "util/errmsg.h"

typedef struct edit {
    int offset, length;
    const char *text;
} edit;

/* One file's prepared change: its new contents wait in tmp_path until
 * every file is ready, then replace real_path. */
typedef struct pending {
    const char *path;   /* as the user named it, for messages */
    char *real_path;
    char *tmp_path;
} pending;

/* Every fix-it of a run, in diagnostic then fix-it order. */
typedef struct flat_fixit {
    int diag;
    const tp_fixit *f;
    int original;       /* TP_FIX_REPEATED: the index of the same edit proposed first */
} flat_fixit;

/* ---- choosing the edits ---- */

/* Two edits conflict when their ranges overlap, or when one inserts at
 * the offset where the other starts: the order of the two texts would be
 * a guess. */
static int conflicts(const tp_fixit *a, const tp_fixit *b)
{
    tp_span x = a->span, y = b->span;
    if (x.file != y.file)
        return 0;
    if (x.offset == y.offset && (x.length == 0 || y.length == 0))
        return 1;
    return x.offset < y.offset + y.length && y.offset < x.offset + x.length;
}

static int same_edit(const tp_fixit *a, const tp_fixit *b)
{
    return a->span.file == b->span.file && a->span.offset == b->span.offset &&
           a->span.length == b->span.length && strcmp(a->replacement, b->replacement) == 0;
}

static int same_claim(const tp_fixit *a, const tp_fixit *b)
{
    return a->claim && b->claim && strcmp(a->claim, b->claim) == 0;
}

static int skipped_status(tp_fix_status s)
{
    return s != TP_FIX_APPLIED && s != TP_FIX_REPEATED;
}

static int count_fixits(const tp_diags *d)
{
    int n = 0;
    for (int i = 0; i < d->count; i++)
        n += d->items[i].nfixits;
    return n;
}

static flat_fixit *flatten(const tp_diags *d, int n)
{
    flat_fixit *x = tp_xreallocarray(NULL, (size_t)n, sizeof *x);
    int k = 0;
    for (int i = 0; i < d->count; i++)
        for (int j = 0; j < d->items[i].nfixits; j++)
            x[k++] = (flat_fixit){i, &d->items[i].fixits[j], -1};
    return x;
}

/* A diagnostic's fix is all its edits or none: skip the rest of a
 * diagnostic one of whose edits is skipped, and a repeated edit with the
 * edit it repeats. Returns whether anything changed. */
static int spread_skips(flat_fixit *x, tp_fix_status *st, int n)
{
    int changed = 0;
    for (int k = 0; k < n; k++) {
        if (st[k] == TP_FIX_REPEATED && skipped_status(st[x[k].original])) {
            st[k] = st[x[k].original];
            changed = 1;
        }
        if (!skipped_status(st[k]))
            continue;
        for (int l = 0; l < n; l++)
            if (x[l].diag == x[k].diag && st[l] == TP_FIX_APPLIED) {
                st[l] = TP_FIX_WITH_OTHER;
                changed = 1;
            }
    }
    return changed;
}

/* Decide every fix-it's fate: edits proposed twice are made once; edits
 * that overlap, or that create the same thing, are all skipped (which one
 * is right would be a guess); edits outside `writable` are skipped; a
 * diagnostic whose fix is not whole is skipped entirely. */
static void decide(flat_fixit *x, int n, int writable, tp_fix_status *st)
{
    for (int k = 0; k < n; k++) {
        if (st[k] == TP_FIX_DEFERRED)
            continue;
        st[k] = TP_FIX_APPLIED;
        for (int l = 0; l < k && st[k] == TP_FIX_APPLIED; l++)
            if (st[l] != TP_FIX_REPEATED && st[l] != TP_FIX_DEFERRED && same_edit(x[l].f, x[k].f)) {
                st[k] = TP_FIX_REPEATED;
                x[k].original = l;
            }
        if (st[k] == TP_FIX_APPLIED && writable >= 0 && x[k].f->span.file != writable)
            st[k] = TP_FIX_NOT_WRITABLE;
    }
    for (int k = 0; k < n; k++) {
        for (int l = k + 1; l < n; l++) {
            if (st[k] == TP_FIX_REPEATED || st[l] == TP_FIX_REPEATED || st[k] == TP_FIX_DEFERRED ||
                st[l] == TP_FIX_DEFERRED)
                continue;
            tp_fix_status why = conflicts(x[k].f, x[l].f)    ? TP_FIX_OVERLAP
                                : same_claim(x[k].f, x[l].f) ? TP_FIX_CLAIMED
                                                             : TP_FIX_APPLIED;
            if (why == TP_FIX_APPLIED)
                continue;
            if (st[k] == TP_FIX_APPLIED) st[k] = why;
            if (st[l] == TP_FIX_APPLIED) st[l] = why;
        }
    }
    while (spread_skips(x, st, n))
        ;
}

/* The edits of `file` that are applied. */
static int select_edits(const flat_fixit *x, const tp_fix_status *st, int n, int file, edit *kept)
{
    int m = 0;
    for (int k = 0; k < n; k++)
        if (st[k] == TP_FIX_APPLIED && x[k].f->span.file == file)
            kept[m++] = (edit){x[k].f->span.offset, x[k].f->span.length, x[k].f->replacement};
    return m;
}

const char *tp_fix_status_reason(tp_fix_status s)
{
    switch (s) {
    case TP_FIX_APPLIED: return "applied";
    case TP_FIX_REPEATED: return "applied (the same edit as another fix)";
    case TP_FIX_OVERLAP: return "its edit overlaps another fix's: neither is applied";
    case TP_FIX_CLAIMED: return "another fix makes the same key: neither is applied";
    case TP_FIX_WITH_OTHER: return "part of its edit could not be applied, so none of it is";
    case TP_FIX_NOT_WRITABLE: return "it edits a file --fix does not write (only plans are edited)";
    case TP_FIX_DEFERRED: return "it was found with plan entries that are not right yet; run --fix again once they are";
    }
    return "?";
}

static int cmp_edit(const void *pa, const void *pb)
{
    const edit *a = pa, *b = pb;
    if (a->offset != b->offset)
        return (a->offset > b->offset) - (a->offset < b->offset);
    return (a->length > b->length) - (a->length < b->length);
}

/* The file's text with the (non-conflicting) edits spliced in. */
static char *apply_edits(const tp_source_file *f, edit *edits, int n, size_t *len)
{
    qsort(edits, (size_t)n, sizeof *edits, cmp_edit);
    tp_buf b;
    tp_buf_init(&b);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        tp_buf_append_n(&b, f->text + pos, (size_t)edits[i].offset - pos);
        tp_buf_append(&b, edits[i].text);
        pos = (size_t)edits[i].offset + (size_t)edits[i].length;
    }
    tp_buf_append_n(&b, f->text + pos, f->size - pos);
    *len = b.len;
    return tp_buf_take(&b);
}

/* A fix-it outside its file is a bug in the check that made it; refuse
 * to write rather than guess. */
static int check_spans(const tp_diags *d, const tp_sources *src, char *err, size_t errlen)
{
    for (int i = 0; i < d->count; i++) {
        for (int j = 0; j < d->items[i].nfixits; j++) {
            tp_span sp = d->items[i].fixits[j].span;
            if (sp.file < 0 || sp.file >= src->count || sp.offset < 0 || sp.length < 0 ||
                (size_t)sp.offset + (size_t)sp.length > src->files[sp.file].size) {
                tp_error(err, errlen, "fix-it of '%s' [%s] edits outside its file",
                        d->items[i].message, d->items[i].check);
                return -1;
            }
        }
    }
    return 0;
}

/* ---- writing ---- */

/* Resolve symlinks so the link's target is edited, not replaced by a
 * regular file, and keep the target's permissions. */
static int prepare_file(const tp_source_file *f, const char *data, size_t len,
                        pending *p, char *err, size_t errlen)
{
    p->path = f->path;
    p->real_path = realpath(f->path, NULL);
    if (!p->real_path) {
        tp_error(err, errlen, "cannot write '%s': %s", f->path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(p->real_path, &st) != 0) {
        tp_error(err, errlen, "cannot write '%s': %s", f->path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        tp_error(err, errlen, "cannot write '%s': not a regular file", f->path);
        return -1;
    }
    tp_bytes piece = {data, len};
    p->tmp_path = tp_write_temp(p->real_path, (int)(st.st_mode & 07777), &piece, 1, err, errlen);
    return p->tmp_path ? 0 : -1;
}

/* Remove the temporary files not yet renamed and free all paths. */
static void discard_pending(pending *p, int n)
{
    for (int i = 0; i < n; i++) {
        if (p[i].tmp_path)
            (void)unlink(p[i].tmp_path);   /* best effort, already failing */
        free(p[i].tmp_path);
        free(p[i].real_path);
    }
    free(p);
}

/* Two loaded names for one file (a symlink and its target) would each be
 * rewritten from their own copy, and the second rename would silently
 * drop the first one's edits. */
static int check_distinct(const pending *p, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n - 1; i++) {
        if (strcmp(p[i].real_path, p[n - 1].real_path) == 0) {
            tp_error(err, errlen, "cannot edit '%s' and '%s': they are the same file",
                    p[i].path, p[n - 1].path);
            return -1;
        }
    }
    return 0;
}

/* Build and write the new contents of every edited file to temporary
 * files. Returns the number of edits they contain, or -1. */
static int prepare_all(const flat_fixit *x, const tp_fix_status *st, int nfix, const tp_sources *src,
                       pending *p, int *npending, char *err, size_t errlen)
{
    edit *edits = tp_xreallocarray(NULL, (size_t)nfix, sizeof *edits);
    int applied = 0;
    for (int file = 0; file < src->count; file++) {
        int n = select_edits(x, st, nfix, file, edits);
        if (n == 0)
            continue;
        size_t len;
        char *data = apply_edits(&src->files[file], edits, n, &len);
        pending *slot = &p[(*npending)++];
        int rc = prepare_file(&src->files[file], data, len, slot, err, errlen);
        if (rc == 0)
            rc = check_distinct(p, *npending, err, errlen);
        free(data);
        if (rc != 0) {
            free(edits);
            return -1;
        }
        applied += n;
    }
    free(edits);
    return applied;
}

int tp_diags_apply_safe_fixits(const tp_diags *d, const tp_sources *src, int writable,
                               tp_fix_status *status, char *err, size_t errlen)
{
    int nfix = count_fixits(d);
    if (nfix == 0)
        return 0;
    if (check_spans(d, src, err, errlen) != 0)
        return -1;
    flat_fixit *x = flatten(d, nfix);
    tp_fix_status *st = status;
    if (!st) {
        st = tp_xreallocarray(NULL, (size_t)nfix, sizeof *st);
        for (int k = 0; k < nfix; k++)
            st[k] = TP_FIX_APPLIED;
    }
    decide(x, nfix, writable, st);

    pending *p = tp_xcalloc((size_t)src->count, sizeof *p);
    int npending = 0;
    int applied = prepare_all(x, st, nfix, src, p, &npending, err, errlen);
    for (int i = 0; i < npending && applied >= 0; i++) {
        if (rename(p[i].tmp_path, p[i].real_path) != 0) {
            tp_error(err, errlen, "cannot replace '%s': %s", p[i].path, strerror(errno));
            applied = -1;
            break;
        }
        free(p[i].tmp_path);
        p[i].tmp_path = NULL;
    }
    discard_pending(p, npending);
    free(x);
    if (st != status)
        free(st);
    return applied;
}

int tp_diags_apply_fixits_counted(const tp_diags *d, const tp_sources *src,
                                  int *skipped, char *err, size_t errlen)
{
    int nfix = count_fixits(d);
    tp_fix_status *st = tp_xreallocarray(NULL, (size_t)nfix + 1, sizeof *st);
    for (int k = 0; k < nfix; k++)
        st[k] = TP_FIX_APPLIED;
    int applied = tp_diags_apply_safe_fixits(d, src, -1, st, err, errlen);
    if (skipped) {
        *skipped = 0;
        for (int k = 0; applied >= 0 && k < nfix; k++)
            *skipped += skipped_status(st[k]);
    }
    free(st);
    return applied;
}

int tp_diags_apply_fixits(const tp_diags *d, const tp_sources *src, char *err, size_t errlen)
{
    return tp_diags_apply_fixits_counted(d, src, NULL, err, errlen);
}
