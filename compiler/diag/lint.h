/* lint.h: what a user decides about findings: -Werror, -W per check, and
 * "# tpcc: ignore[CHECK]" comments in plan and model files.
 *
 * Only warnings can be silenced or disabled. An error means PyTorch raises
 * or computes something other than the model (a wrong shard, a grown
 * sequence), so no option or comment hides one; -W CHECK=error and -Werror
 * make warnings errors. Unsupported findings (what tpcc cannot handle yet)
 * answer to -W only: -W unsupported=error makes them errors, and
 * -W no-unsupported drops them unless an output was asked for, which
 * cannot be made past them. */
#ifndef TPCC_LINT_H
#define TPCC_LINT_H

#include <stdbool.h>
#include <stddef.h>

#include "compiler/diag/diag.h"

typedef enum tp_lint_action {
    TP_LINT_DEFAULT,        /* as reported (or as -Werror says) */
    TP_LINT_OFF,            /* -W no-CHECK: drop its warnings */
    TP_LINT_WARNING,        /* -W CHECK=warning: keep its warnings warnings, even under -Werror */
    TP_LINT_ERROR,          /* -W CHECK=error: its warnings are errors */
} tp_lint_action;

typedef struct tp_lint {
    bool werror;
    bool output;                /* -o, --report or --export: unsupported findings stop it, so stay shown */
    tp_lint_action *actions;    /* per check of tp_checks, NULL until a -W names one */
} tp_lint;

/* Read one -W argument: "error" (-Werror), "no-error" (undoes it),
 * "no-CHECK", "CHECK=error" (or gcc's "error=CHECK"), "CHECK=warning".
 * Later ones override earlier ones. Returns 0, or -1 with
 * a message (an unknown check with did-you-mean) in err. */
int tp_lint_option(tp_lint *l, const char *arg, char *err, size_t errlen);
void tp_lint_free(tp_lint *l);

/* Called by the lexer for every comment (text starts at '#', len bytes,
 * at its span): records a "# tpcc: ignore[CHECK, ...] reason" in d; a
 * malformed one or an unknown check name is an unused-suppression
 * warning. A comment alone on its line covers the next line, one after
 * code covers its own. */
void tp_lint_comment(tp_diags *d, const tp_sources *src, tp_span at, const char *text, int len);

/* After sorting: mark the warnings that suppressions cover, report the
 * suppressions that cover nothing, then apply -W and -Werror (dropping,
 * promoting) and count again. Once per tp_diags: a second call does
 * nothing. */
void tp_lint_apply(tp_diags *d, const tp_lint *l);

#endif /* TPCC_LINT_H */
