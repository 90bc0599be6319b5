/* lint.c: -Werror, -W and suppression comments (see lint.h). */
#include "compiler/diag/lint.h"

#include <stdlib.h>
#include <string.h>

#include "compiler/diag/checks.h"
#include "util/errmsg.h"
#include "util/map.h"
#include "util/xalloc.h"

/* ---- -W ---- */

int tp_lint_option(tp_lint *l, const char *arg, char *err, size_t errlen)
{
    if (strcmp(arg, "error") == 0 || strcmp(arg, "no-error") == 0) {
        l->werror = arg[0] == 'e';
        return 0;
    }
    tp_lint_action action;
    size_t n;
    if (strncmp(arg, "no-", 3) == 0) {
        action = TP_LINT_OFF;
        arg += 3;
        n = strlen(arg);
    } else if (strncmp(arg, "error=", 6) == 0) {    /* gcc's -Werror=CHECK */
        action = TP_LINT_ERROR;
        arg += 6;
        n = strlen(arg);
    } else {
        const char *eq = strchr(arg, '=');
        if (!eq || (strcmp(eq, "=error") && strcmp(eq, "=warning")))
            return tp_error(err, errlen, "-W takes error, no-error, no-CHECK, CHECK=error (or error=CHECK) or "
                            "CHECK=warning, not '%s'", arg);
        action = strcmp(eq, "=error") == 0 ? TP_LINT_ERROR : TP_LINT_WARNING;
        n = (size_t)(eq - arg);
    }
    char *name = tp_xstrndup(arg, n);
    int check = tp_check_index(name);
    if (check < 0) {
        const char *near = tp_check_suggest(name);
        tp_error(err, errlen, "-W: unknown check '%s'%s%s%s", name, near ? "; did you mean '" : "",
                 near ? near : "", near ? "'?" : " (docs/checks.md lists them)");
        free(name);
        return -1;
    }
    free(name);
    if (!l->actions)
        l->actions = tp_xcalloc((size_t)tp_ncheck, sizeof *l->actions);
    l->actions[check] = action;
    return 0;
}

void tp_lint_free(tp_lint *l)
{
    free(l->actions);
    l->actions = NULL;
}

/* ---- suppression comments ---- */

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           (c >= 'A' && c <= 'Z');
}

/* Whether only blanks precede the comment on its line. */
static int alone_on_line(const tp_sources *src, tp_span at)
{
    const char *text = src->files[at.file].text;
    for (int i = at.offset - 1; i >= 0 && text[i] != '\n'; i--)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r' && text[i] != '\f')
            return 0;
    return 1;
}

static tp_span sub_span(tp_span at, const char *text, const char *p, size_t len)
{
    int skip = (int)(p - text);
    return (tp_span){at.file, at.line, at.col + skip, at.offset + skip, (int)len};
}

static void add_name(tp_suppression *s, const char *name, size_t len, tp_span sp)
{
    s->checks = tp_xreallocarray(s->checks, (size_t)s->nchecks + 1, sizeof *s->checks);
    s->spans = tp_xreallocarray(s->spans, (size_t)s->nchecks + 1, sizeof *s->spans);
    s->checks[s->nchecks] = tp_xstrndup(name, len);
    s->spans[s->nchecks++] = sp;
}

static void unknown_name(tp_diags *d, const char *name, size_t len, tp_span sp)
{
    char *word = tp_xstrndup(name, len);
    const char *near = tp_check_suggest(word);
    tp_diag *g = tp_diag_add(d, TP_WARNING, sp, "unused-suppression",
                             "'%s' is not a check: this suppression silences nothing", word);
    if (near)
        tp_diag_help(g, "did you mean '%s'?", near);
    else
        tp_diag_help(g, "docs/checks.md lists the check names");
    free(word);
}

/* The names between '[' and ']' (p just after '['); returns the ']' or
 * NULL when the list is malformed. Known names go into s. */
static const char *read_names(tp_diags *d, tp_suppression *s, tp_span at, const char *text,
                              const char *p, const char *end)
{
    for (;;) {
        p = skip_blanks(p, end);
        const char *name = p;
        while (p < end && is_name_char(*p))
            p++;
        size_t len = (size_t)(p - name);
        if (len == 0)
            return NULL;
        char *word = tp_xstrndup(name, len);
        if (tp_check_index(word) >= 0)
            add_name(s, name, len, sub_span(at, text, name, len));
        else
            unknown_name(d, name, len, sub_span(at, text, name, len));
        free(word);
        p = skip_blanks(p, end);
        if (p < end && *p == ']')
            return p;
        if (p >= end || *p != ',')
            return NULL;
        p++;
    }
}

void tp_lint_comment(tp_diags *d, const tp_sources *src, tp_span at, const char *text, int len)
{
    const char *end = text + len, *p = skip_blanks(text + 1, end);
    if ((size_t)(end - p) < 5 || strncmp(p, "tpcc:", 5) != 0)
        return;                          /* an ordinary comment */
    p = skip_blanks(p + 5, end);
    if ((size_t)(end - p) < 6 || strncmp(p, "ignore", 6) != 0 || (p + 6 < end && is_name_char(p[6])))
        return;                          /* "# tpcc: " followed by prose */
    p = skip_blanks(p + 6, end);
    tp_suppression s = {0};
    s.at = at;
    s.line = alone_on_line(src, at) ? at.line + 1 : at.line;
    const char *close = p < end && *p == '[' ? read_names(d, &s, at, text, p + 1, end) : NULL;
    if (!close) {
        tp_diag *g = tp_diag_add(d, TP_WARNING, at, "unused-suppression",
                                 "malformed suppression comment: it silences nothing");
        tp_diag_help(g, "write '# tpcc: ignore[CHECK]', or '# tpcc: ignore[CHECK1, CHECK2] reason'");
    }
    if (!close || s.nchecks == 0) {
        for (int i = 0; i < s.nchecks; i++)
            free(s.checks[i]);
        free(s.checks);
        free(s.spans);
        return;
    }
    const char *why = skip_blanks(close + 1, end), *why_end = end;
    while (why_end > why && (why_end[-1] == ' ' || why_end[-1] == '\t' || why_end[-1] == '\r'))
        why_end--;
    s.justification = tp_xstrndup(why, (size_t)(why_end - why));
    s.used = tp_xcalloc((size_t)s.nchecks, 1);
    d->supps = tp_xgrow(d->supps, d->nsupps, &d->capsupps, sizeof *d->supps, 16);
    d->supps[d->nsupps++] = s;
}

/* ---- applying them ---- */

/* The suppressions by the line they silence: a map from (file, line) to
 * the first, next[] chaining the others (a line can have its own comment
 * and one alone on the line above). A scan of every suppression per
 * diagnostic made a plan with many of both quadratic. */
typedef struct supp_index {
    tp_map first;
    int *next;
} supp_index;

static void index_suppressions(supp_index *x, const tp_diags *d)
{
    tp_map_init(&x->first);
    x->next = tp_xcalloc((size_t)d->nsupps + 1, sizeof *x->next);
    for (int si = 0; si < d->nsupps; si++) {
        int at[2] = {d->supps[si].at.file, d->supps[si].line};
        int last = (int)tp_map_put(&x->first, at, sizeof at, si);
        x->next[si] = -1;
        if (last == si)
            continue;
        while (x->next[last] >= 0)     /* two at most: see above */
            last = x->next[last];
        x->next[last] = si;
    }
}

/* Mark g suppressed when a comment covering its line names its check. */
static void match_suppressions(tp_diags *d, const supp_index *x, int index)
{
    tp_diag *g = &d->items[index];
    int at[2] = {g->span.file, g->span.line};
    for (int si = (int)tp_map_get(&x->first, at, sizeof at); si >= 0; si = x->next[si]) {
        tp_suppression *s = &d->supps[si];
        for (int k = 0; k < s->nchecks; k++) {
            if (strcmp(s->checks[k], g->check) != 0)
                continue;
            if (g->level == TP_WARNING) {
                if (!g->suppression)
                    g->suppression = si + 1;
                s->used[k] = TP_SUPPRESSION_USED;
            } else if (g->level == TP_ERROR && !s->used[k]) {
                s->used[k] = TP_SUPPRESSION_ERROR_ONLY;
            } else if (g->level == TP_UNSUPPORTED && !s->used[k]) {
                s->used[k] = TP_SUPPRESSION_UNSUPPORTED_ONLY;
            }
        }
    }
}

/* An error can end the check before it reaches a suppressed line (a
 * config.json that cannot be read, a model that does not build): a
 * suppression silences nothing only in a plan checked without one. That
 * it names an error is said either way. */
static void report_unused(tp_diags *d)
{
    const bool complete = d->errors == 0;
    for (int si = 0; si < d->nsupps; si++) {
        const tp_suppression *s = &d->supps[si];
        for (int k = 0; k < s->nchecks; k++) {
            if (s->used[k] == TP_SUPPRESSION_USED || (!complete && s->used[k] != TP_SUPPRESSION_ERROR_ONLY))
                continue;
            tp_span sp = s->spans[k];
            if (s->used[k] == TP_SUPPRESSION_ERROR_ONLY) {
                tp_diag *g = tp_diag_add(d, TP_WARNING, sp, "unused-suppression",
                                         "the '%s' finding on line %d is an error, which cannot be suppressed",
                                         s->checks[k], s->line);
                tp_diag_help(g, "an error is something PyTorch raises or computes wrongly: fix the plan");
            } else if (s->used[k] == TP_SUPPRESSION_UNSUPPORTED_ONLY) {
                tp_diag *g = tp_diag_add(d, TP_WARNING, sp, "unused-suppression",
                                         "the finding on line %d is unsupported (what tpcc cannot handle yet), "
                                         "which a comment cannot silence", s->line);
                tp_diag_help(g, "-W no-unsupported leaves unsupported findings out of --check");
            } else {
                tp_diag *g = tp_diag_add(d, TP_WARNING, sp, "unused-suppression",
                                         "no '%s' warning on line %d: this suppression silences nothing",
                                         s->checks[k], s->line);
                tp_diag_help(g, "remove '%s' from the comment", s->checks[k]);
            }
        }
    }
}

/* A suppressed finding is accepted as it is: --fix leaves it alone. */
static tp_lint_action action_for(const tp_lint *l, const char *check)
{
    int i = l->actions ? tp_check_index(check) : -1;
    return i >= 0 ? l->actions[i] : TP_LINT_DEFAULT;
}

/* -W unsupported=error makes g an error; -W no-unsupported drops it
 * (returns true) unless an output was asked for: that output cannot be
 * made, and it must say why. -Werror is for warnings only. */
static bool apply_to_unsupported(const tp_lint *l, tp_diag *g)
{
    tp_lint_action a = action_for(l, g->check);
    if (a == TP_LINT_ERROR) {
        g->level = TP_ERROR;
        g->promoted = tp_xasprintf("-W %s=error", g->check);
    } else if (a == TP_LINT_OFF && l->output) {
        tp_diag_note_at(g, TP_NO_SPAN, "-W no-%s does not hide it here: the output asked for cannot be made "
                                       "without what it needs", g->check);
    }
    return a == TP_LINT_OFF && !l->output;
}

void tp_lint_apply(tp_diags *d, const tp_lint *l)
{
    if (d->linted)
        return;
    d->linted = true;
    supp_index x;
    index_suppressions(&x, d);
    for (int i = 0; i < d->count; i++)
        if (d->items[i].span.file >= 0)
            match_suppressions(d, &x, i);
    tp_map_free(&x.first);
    free(x.next);
    report_unused(d);
    tp_diags_sort(d);

    unsigned char *drop = tp_xcalloc((size_t)d->count + 1, 1);
    for (int i = 0; i < d->count; i++) {
        tp_diag *g = &d->items[i];
        if (g->suppression) {
            tp_diag_drop_fixits(g);
            continue;
        }
        if (g->level == TP_UNSUPPORTED) {
            drop[i] = apply_to_unsupported(l, g);
            continue;
        }
        if (g->level != TP_WARNING)
            continue;
        tp_lint_action a = action_for(l, g->check);
        if (a == TP_LINT_OFF) {
            drop[i] = 1;
        } else if (a == TP_LINT_ERROR || (a == TP_LINT_DEFAULT && l->werror)) {
            g->level = TP_ERROR;
            g->promoted = a == TP_LINT_ERROR ? tp_xasprintf("-W %s=error", g->check) : tp_xstrdup("-Werror");
        }
    }
    tp_diags_drop(d, drop);
    free(drop);
}
