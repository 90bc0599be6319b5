/* fix.c: --fix for one plan (see fix.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/driver/fix.h"
#include "util/xalloc.h"

/* text on one line: newlines written as \n */
static void put_one_line(tp_buf *b, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n')
            tp_buf_append(b, "\\n");
        else
            tp_buf_append_n(b, &text[i], 1);
    }
}

/* "'old' -> 'new'" for a replacement, "inserted 'new'" for an insertion */
static void describe_edit(tp_buf *b, const tp_sources *src, const tp_fixit *f)
{
    if (f->span.length == 0) {
        tp_buf_append(b, "inserted '");
    } else {
        tp_buf_append(b, "'");
        put_one_line(b, src->files[f->span.file].text + f->span.offset, (size_t)f->span.length);
        tp_buf_append(b, "' -> '");
    }
    put_one_line(b, f->replacement, strlen(f->replacement));
    tp_buf_append(b, "'");
}

static bool applied_status(tp_fix_status s)
{
    return s == TP_FIX_APPLIED || s == TP_FIX_REPEATED;
}

/* One line per diagnostic with a fix: fixed (with its edits), or, when
 * `skipped` is set, not fixed (with the reason of its first skipped
 * edit). */
static void log_outcomes(FILE *log, const tp_diags *d, const tp_sources *src, const tp_fix_status *st,
                         bool skipped_too)
{
    int k = 0;
    for (int i = 0; i < d->count; i++) {
        const tp_diag *g = &d->items[i];
        if (!g->nfixits)
            continue;
        const tp_fix_status *mine = &st[k];
        k += g->nfixits;
        int skipped = -1;
        for (int j = 0; j < g->nfixits && skipped < 0; j++)
            if (!applied_status(mine[j]))
                skipped = j;
        if (skipped >= 0 && !skipped_too)
            continue;
        tp_buf b;
        tp_buf_init(&b);
        if (g->span.file >= 0)
            tp_buf_appendf(&b, "tpcc: --fix: %s:%d:%d: ", src->files[g->span.file].path, g->span.line, g->span.col);
        else
            tp_buf_append(&b, "tpcc: --fix: ");
        tp_buf_appendf(&b, "%s [%s]: ", skipped < 0 ? "fixed" : "not fixed", g->check);
        if (skipped >= 0)
            tp_buf_append(&b, tp_fix_status_reason(mine[skipped]));
        for (int j = 0; j < g->nfixits && skipped < 0; j++) {
            if (j)
                tp_buf_append(&b, "; ");
            describe_edit(&b, src, &g->fixits[j]);
        }
        fprintf(log, "%s\n", b.data);
        tp_buf_free(&b);
    }
}

/* Diagnostics about the plan's entries themselves: a style or a key that
 * does not read (the entry is dropped), a key that matches nothing. */
static bool entry_check(const tp_diag *g)
{
    return !strcmp(g->check, "syntax") || !strcmp(g->check, "plan") || !strcmp(g->check, "unmatched-entry");
}

/* The fix-its for this round. The checks ran on the plan's entries as
 * they read: while an entry is dropped (an error in it) or about to be
 * renamed, the other checks' fixes are computed for a different plan than
 * the one --fix makes, so they wait for the next round. Returns the count. */
static int plan_round(const tp_diags *d, tp_fix_status *st)
{
    bool entries_change = false;
    for (int i = 0; i < d->count; i++) {
        const tp_diag *g = &d->items[i];
        if (entry_check(g) && (g->nfixits || (g->level == TP_ERROR && strcmp(g->check, "unmatched-entry"))))
            entries_change = true;
    }
    int k = 0;
    for (int i = 0; i < d->count; i++)
        for (int j = 0; j < d->items[i].nfixits; j++)
            st[k++] = entries_change && !entry_check(&d->items[i]) ? TP_FIX_DEFERRED : TP_FIX_APPLIED;
    return k;
}

/* Rounds of fixes: a renamed entry changes what the other checks find,
 * so after each round that edits the plan it is checked again. Bounded,
 * so fixes that undo each other cannot loop. */
enum { MAX_ROUNDS = 4 };

int tp_fix_plan(tp_unit *u, const char *path, const tp_compile_opts *opts, const tp_lint *lint,
                FILE *log, char *err, size_t errlen)
{
    int total = 0;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        tp_diags_sort(&u->diags);
        tp_lint_apply(&u->diags, lint);
        int nfix = 0;
        for (int i = 0; i < u->diags.count; i++)
            nfix += u->diags.items[i].nfixits;
        if (nfix == 0 || u->plan_file < 0)
            break;
        tp_diags_sort(&u->diags);
        tp_fix_status *st = tp_xreallocarray(NULL, (size_t)nfix, sizeof *st);
        plan_round(&u->diags, st);
        int applied = tp_diags_apply_safe_fixits(&u->diags, &u->src, u->plan_file, st, err, errlen);
        if (applied >= 0)
            log_outcomes(log, &u->diags, &u->src, st, applied == 0 || round == MAX_ROUNDS - 1);
        free(st);
        if (applied < 0)
            return -1;
        if (applied == 0)
            break;
        total += applied;
        tp_unit_free(u);
        tp_compile(u, path, opts);
    }
    if (total > 0) {
        fprintf(log, "tpcc: --fix: applied %d edit%s to %s; ", total, total == 1 ? "" : "s", path);
        if (u->diags.errors)
            fprintf(log, "checked again, %d error%s left\n", u->diags.errors, u->diags.errors == 1 ? "" : "s");
        else
            fprintf(log, "checked again, no errors left\n");
    }
    return total;
}
