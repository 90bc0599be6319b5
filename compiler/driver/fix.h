/* fix.h: --fix for one plan: apply the fix-its that are safe together,
 * say what was fixed and what was left, and check the plan again. */
#ifndef TPCC_FIX_H
#define TPCC_FIX_H

#include <stdio.h>
#include "compiler/diag/lint.h"
#include "compiler/driver/compile.h"

/* Apply u's safe fix-its (after lint: a suppressed or disabled warning's
 * fix-its are not applied) to the plan file only (never the model or
 * config.json), writing one line per fixable diagnostic to log; when any
 * edit was made, compile `path` again into u, so u holds what is left.
 * Returns the number of edits applied, or -1 (err says why; no file was
 * changed). */
int tp_fix_plan(tp_unit *u, const char *path, const tp_compile_opts *opts, const tp_lint *lint,
                FILE *log, char *err, size_t errlen);

#endif /* TPCC_FIX_H */
