/* fixit_plan.c: machine-applicable edits of a plan, for --fix. */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

static tp_span at_offset(tp_span s, int offset)
{
    s.col += offset - s.offset;      /* same line: callers insert inside one line */
    s.offset = offset;
    s.length = 0;
    return s;
}

void tp_fix_set_kwarg(tp_diag *g, const tp_node *call, const char *kw, const char *text)
{
    if (call->kind != N_CALL)   /* a Hugging Face string style takes no arguments */
        return;
    const tp_node *val = tp_call_kw(call, kw);
    if (val) {
        tp_diag_fixit(g, val->span, text);
        return;
    }
    char *ins;
    tp_span at;
    if (call->nkids > 1) {
        const tp_node *last = call->kids[call->nkids - 1];
        at = at_offset(last->span, last->span.offset + last->span.length);
        ins = tp_xasprintf(", %s=%s", kw, text);
    } else {
        /* the call's span ends with its ')' */
        at = at_offset(call->span, call->span.offset + call->span.length - 1);
        ins = tp_xasprintf("%s=%s", kw, text);
    }
    tp_diag_fixit(g, at, ins);
    free(ins);
}

/* Add "fqn": style to the plan's root dict (parallelize ""), creating one
 * at the end of the file when there is none. */
void tp_fix_add_root_entry(tp_diag *g, const tp_plan *p, const char *fqn, const char *style_text)
{
    for (int i = 0; i < p->file->nkids; i++) {
        const tp_node *it = p->file->kids[i];
        if (it->kind != N_PARALLELIZE || it->str[0])
            continue;
        const tp_node *dict = it->kids[0];
        char *ins = tp_xasprintf("\n    \"%s\": %s,", fqn, style_text);
        tp_span at = dict->span;
        at.length = 0;
        at.offset += 1;
        at.col += 1;
        tp_diag_fixit(g, at, ins);
        free(ins);
        return;
    }
    char *item = tp_xasprintf("parallelize \"\" {\n    \"%s\": %s,\n}", fqn, style_text);
    tp_fix_append_item(g, p, item);
    free(item);
}

/* Insert after the last item of the plan (its comments stay where they are). */
void tp_fix_append_item(tp_diag *g, const tp_plan *p, const char *text)
{
    const tp_node *last = p->file->nkids ? p->file->kids[p->file->nkids - 1] : NULL;
    tp_span at = last ? last->span : (tp_span){p->file_id, 1, 1, 0, 0};
    at.offset += at.length;
    at.col += at.length;
    at.length = 0;
    char *ins = tp_xasprintf("\n\n%s", text);
    tp_diag_fixit(g, at, ins);
    free(ins);
}

void tp_fix_rename_style(tp_diag *g, const tp_style *s, const char *new_name)
{
    if (s->call->kind != N_CALL) {   /* "packed_colwise" -> RowwiseParallel() */
        char *text = tp_xasprintf("%s()", new_name);
        tp_diag_fixit(g, s->call->span, text);
        free(text);
        return;
    }
    tp_diag_fixit(g, s->call->kids[0]->span, new_name);
}
