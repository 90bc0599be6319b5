/* findings.c: diagnostics with per-entry dedupe. The same check at the
 * same plan entry, met again in another layer, adds to a count instead of
 * a new diagnostic; the walk's end turns the counts into notes. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

tp_diag *tp_finding(interp *I, tp_diag_level lvl, tp_span span, const char *check,
                    const tp_val *a, const tp_val *b, const char *fmt, ...)
{
    if ((a && a->poisoned) || (b && b->poisoned))
        return NULL;
    for (int i = 0; i < I->nseen; i++) {
        seen_diag *s = &I->seen[i];
        if (!strcmp(s->check, check) && s->file == span.file && s->offset == span.offset) {
            if (!s->repeats++)
                s->first_fqn = tp_xstrdup(tp_cur_fqn(I));
            free(s->last_fqn);
            s->last_fqn = tp_xstrdup(tp_cur_fqn(I));
            return NULL;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    char *msg = tp_xvasprintf(fmt, ap);
    va_end(ap);
    tp_diag *g = tp_diag_add(I->d, lvl, span, check, "%s", msg);
    free(msg);
    I->seen = tp_xgrow(I->seen, I->nseen, &I->capseen, sizeof *I->seen, 32);
    I->seen[I->nseen++] = (seen_diag){check, span.file, span.offset, I->d->count - 1, 0, NULL, NULL};
    return g;
}

void tp_findings_finish(interp *I)
{
    for (int i = 0; i < I->nseen; i++) {
        seen_diag *s = &I->seen[i];
        if (s->repeats)
            tp_diag_note_at(&I->d->items[s->index], TP_NO_SPAN,
                            s->repeats == 1 ? "the same happens in %d more module (%s)"
                                            : "the same happens in %d more modules (%s ... %s)",
                            s->repeats, s->first_fqn, s->last_fqn);
        free(s->first_fqn);
        free(s->last_fqn);
    }
    free(I->seen);
    I->seen = NULL;
    I->nseen = 0;
}
