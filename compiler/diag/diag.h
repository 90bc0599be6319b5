/* diag.h: diagnostics, collected for a whole run and rendered at the end.
 *
 * Format follows clang: file:line:col: error: message [check], the source
 * line, a caret under the span, then notes at the other locations, then
 * "fix:" help lines. Fix-its are machine-applicable edits of a source file
 * (replace a span with text; an empty span inserts). */
#ifndef TPCC_DIAG_H
#define TPCC_DIAG_H

#include <stdbool.h>
#include <stdio.h>
#include "compiler/diag/source.h"

/* An error is a plan bug (PyTorch raises or computes something other than
 * the model); a warning works but costs; unsupported is what tpcc cannot
 * handle yet, whatever PyTorch does (check "unsupported": the plan may be
 * right, and no schedule can be made of it); a note only informs. */
typedef enum tp_diag_level { TP_ERROR, TP_WARNING, TP_NOTE, TP_UNSUPPORTED } tp_diag_level;

/* "error", "warning", "note", "unsupported": the text and JSON name
 * (diag/level.c). */
const char *tp_diag_level_name(tp_diag_level level);

typedef struct tp_fixit {
    tp_span span;       /* the text to replace (length 0: insert at offset) */
    char *replacement;
    /* What the edit creates that must stay unique, or NULL: a renamed plan
     * key's absolute pattern. Two different edits with one claim (two keys
     * renamed to the same new key) are both skipped. */
    char *claim;
} tp_fixit;

typedef struct tp_diag_note {
    tp_span span;       /* may be TP_NO_SPAN */
    char *message;
} tp_diag_note;

typedef struct tp_diag {
    tp_diag_level level;
    char *check;            /* check name, e.g. "relabel"; "syntax" for parse errors */
    char *message;
    tp_span span;
    tp_diag_note *notes; int nnotes;
    char **helps; int nhelps;        /* "fix: ..." lines, human readable */
    tp_fixit *fixits; int nfixits;   /* machine-applicable edits */
    int suppression;        /* 1 + index of the "# tpcc: ignore" that silences it; 0: none */
    char *promoted;         /* the -W option that made this finding an error, or NULL */
} tp_diag;

/* A "# tpcc: ignore[CHECK, ...]" comment (diag/lint.c). */
typedef struct tp_suppression {
    tp_span at;             /* the comment */
    int line;               /* the line whose warnings it silences */
    char **checks; tp_span *spans; int nchecks;   /* the known check names it lists */
    unsigned char *used;    /* per name: TP_SUPPRESSION_USED, _ERROR_ONLY, or 0 */
    char *justification;    /* the text after ']', or "" */
} tp_suppression;

enum { TP_SUPPRESSION_USED = 1, TP_SUPPRESSION_ERROR_ONLY = 2, TP_SUPPRESSION_UNSUPPORTED_ONLY = 3 };

typedef struct tp_diags {
    tp_diag *items; int count, cap;
    int errors, warnings, unsupported;   /* suppressed diagnostics are not counted */
    int suppressed;
    tp_suppression *supps; int nsupps, capsupps;
    bool linted;            /* tp_lint_apply has run */
} tp_diags;

void tp_diags_init(tp_diags *d);
void tp_diags_free(tp_diags *d);

/* Add a diagnostic; the returned pointer is valid until the next add. */
tp_diag *tp_diag_add(tp_diags *d, tp_diag_level level, tp_span span,
                     const char *check, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* What tpcc cannot handle yet, at span: level TP_UNSUPPORTED, check
 * "unsupported". The message says what tpcc would need. */
tp_diag *tp_diag_unsupported(tp_diags *d, tp_span span, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tp_diag_note_at(tp_diag *g, tp_span span, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tp_diag_help(tp_diag *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tp_diag_fixit(tp_diag *g, tp_span span, const char *replacement);
/* Remove g's fix-its (a suppressed finding's are never applied). */
void tp_diag_drop_fixits(tp_diag *g);
/* A fix-it with a claim (see tp_fixit). */
void tp_diag_fixit_claim(tp_diag *g, tp_span span, const char *replacement, const char *claim);

/* Sort by file, then offset, keeping insertion order for ties; drop exact
 * duplicates (same level, check, span, message). */
void tp_diags_sort(tp_diags *d);

/* Keep the first `limit` diagnostics of each check (0: all), as clang's
 * -ferror-limit: a large input with one mistake repeated must not pour
 * megabytes of the same finding into a log. The last one kept says in a
 * note how many more there were; suppressed ones (SARIF only) are kept
 * and not counted; errors and warnings still count them all. */
void tp_diags_limit(tp_diags *d, int limit);

/* Remove the diagnostics whose drop[i] is set and count the rest again. */
void tp_diags_drop(tp_diags *d, const unsigned char *drop);

typedef enum tp_diag_format { TP_FMT_TEXT, TP_FMT_JSON, TP_FMT_SARIF, TP_FMT_GITHUB } tp_diag_format;

/* One plan's findings. JSON and SARIF render any number of these as one
 * document; text renders each in turn. */
typedef struct tp_diag_unit {
    const char *plan;           /* the plan path as given */
    const tp_diags *diags;
    const tp_sources *src;
    int status;                 /* the plan's exit status (0, 1, 2, 3) */
} tp_diag_unit;

typedef struct tp_render_opts {
    int color;                  /* ANSI colours (text only) */
    const char *cwd;            /* absolute: relative paths are relative to it (SARIF, GitHub) */
    const char *root;           /* absolute: SARIF URIs are relative to it (%SRCROOT%) */
} tp_render_opts;

/* Render the units' diagnostics to out. Returns 0, or -1 when writing to
 * out fails. Suppressed diagnostics appear in SARIF only. */
int tp_diags_render(const tp_diag_unit *units, int n, tp_diag_format fmt,
                    const tp_render_opts *opts, FILE *out);

/* The renderings as malloc'ed strings (tp_diags_render writes these).
 * Never NULL. */
char *tp_diags_render_text(const tp_diags *d, const tp_sources *src, int color);
char *tp_diags_render_json(const tp_diag_unit *units, int n);
char *tp_diags_render_sarif(const tp_diag_unit *units, int n, const tp_render_opts *opts);
/* GitHub Actions' workflow commands (diag/github.c), paths below cwd
 * relative to it. */
char *tp_diags_render_github(const tp_diag_unit *u, const char *cwd);

/* What became of one fix-it (--fix). */
typedef enum tp_fix_status {
    TP_FIX_APPLIED,
    TP_FIX_REPEATED,      /* the same edit as another fix-it: applied once, with it */
    TP_FIX_OVERLAP,       /* its range overlaps another edit's: neither is applied */
    TP_FIX_CLAIMED,       /* another edit creates the same thing (tp_fixit.claim): neither */
    TP_FIX_WITH_OTHER,    /* another edit of the same diagnostic was skipped: half a fix is none */
    TP_FIX_NOT_WRITABLE,  /* it edits a file other than the one that may be written */
    TP_FIX_DEFERRED,      /* set by the caller: not in this round (never applied, no conflicts) */
} tp_fix_status;

/* Apply the fix-its of every diagnostic that are safe together, writing
 * each edited file atomically (temp file + rename; every new content is
 * written before any file is replaced). Only file `writable` is edited
 * (-1: any). status (when not NULL) holds one entry per fix-it, in
 * diagnostic then fix-it order: on entry TP_FIX_DEFERRED for the fix-its
 * to leave out and TP_FIX_APPLIED for the others; on return what became of
 * each. Returns the number of edits applied, or -1
 * on an I/O error (message in err; no file changed). */
int tp_diags_apply_safe_fixits(const tp_diags *d, const tp_sources *src, int writable,
                               tp_fix_status *status, char *err, size_t errlen);
const char *tp_fix_status_reason(tp_fix_status s);

/* Apply every fix-it of every diagnostic to the files they edit, writing
 * each file atomically (temp file + rename). Overlapping edits in the same
 * file are all skipped and counted. Returns the number of edits applied, or
 * -1 on an I/O error (message in err). */
int tp_diags_apply_fixits(const tp_diags *d, const tp_sources *src,
                          char *err, size_t errlen);

/* tp_diags_apply_fixits, also storing in *skipped (when not NULL) how many
 * edits were skipped (overlapping or claiming what another creates). An
 * edit proposed twice is applied once and not counted as skipped. */
int tp_diags_apply_fixits_counted(const tp_diags *d, const tp_sources *src,
                                  int *skipped, char *err, size_t errlen);

#endif /* TPCC_DIAG_H */
