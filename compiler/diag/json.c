/* diag/json.c: tpcc's own machine-readable format, one document for all
 * the plans of a run:
 *
 *   {"version": 1, "diagnostics": [{"level", "check", "message", "file",
 *    "line", "column", "offset", "length", "notes", "help", "fixits",
 *    "plan"}], "errors", "warnings", "unsupported", "suppressed",
 *    "plans": [{"plan", "status", "errors", "warnings", "unsupported",
 *    "suppressed"}]}
 *
 * "file" is where the finding is (a plan, its model, a config.json),
 * "plan" the plan whose check found it. Suppressed findings are left out
 * and counted. SARIF is diag/sarif.c. */
#include <stdlib.h>

#include "compiler/diag/diag.h"
#include "compiler/diag/jsonout.h"

/* "file", "line", "column" (and "offset", "length" when with_range); all
 * null for a diagnostic without a location. */
static void json_location(json_t *o, const tp_sources *src, tp_span sp, int with_range)
{
    int known = tp_json_has_file(src, sp);
    tp_json_set(o, "file", known ? tp_json_str(src->files[sp.file].path) : json_null());
    tp_json_set(o, "line", known ? tp_json_int(sp.line) : json_null());
    tp_json_set(o, "column", known ? tp_json_int(sp.col) : json_null());
    if (!with_range)
        return;
    tp_json_set(o, "offset", known ? tp_json_int(sp.offset) : json_null());
    tp_json_set(o, "length", known ? tp_json_int(sp.length) : json_null());
}

static json_t *json_diag(const tp_diag *g, const tp_sources *src)
{
    json_t *o = tp_json_obj();
    tp_json_set(o, "level", tp_json_str(tp_diag_level_name(g->level)));
    tp_json_set(o, "check", tp_json_str(g->check));
    tp_json_set(o, "message", tp_json_str(g->message));
    json_location(o, src, g->span, 1);

    json_t *notes = tp_json_arr();
    for (int i = 0; i < g->nnotes; i++) {
        json_t *n = tp_json_obj();
        tp_json_set(n, "message", tp_json_str(g->notes[i].message));
        json_location(n, src, g->notes[i].span, 0);
        tp_json_push(notes, n);
    }
    tp_json_set(o, "notes", notes);

    json_t *helps = tp_json_arr();
    for (int i = 0; i < g->nhelps; i++)
        tp_json_push(helps, tp_json_str(g->helps[i]));
    tp_json_set(o, "help", helps);

    json_t *fixits = tp_json_arr();
    for (int i = 0; i < g->nfixits; i++) {
        json_t *f = tp_json_obj();
        json_location(f, src, g->fixits[i].span, 1);
        tp_json_set(f, "replacement", tp_json_str(g->fixits[i].replacement));
        tp_json_push(fixits, f);
    }
    tp_json_set(o, "fixits", fixits);
    return o;
}

/* Per plan: its path, exit status and counts. */
static json_t *json_plan(const tp_diag_unit *u)
{
    json_t *o = tp_json_obj();
    tp_json_set(o, "plan", tp_json_str(u->plan));
    tp_json_set(o, "status", tp_json_int(u->status));
    tp_json_set(o, "errors", tp_json_int(u->diags->errors));
    tp_json_set(o, "warnings", tp_json_int(u->diags->warnings));
    tp_json_set(o, "unsupported", tp_json_int(u->diags->unsupported));
    tp_json_set(o, "suppressed", tp_json_int(u->diags->suppressed));
    return o;
}

char *tp_diags_render_json(const tp_diag_unit *units, int n)
{
    json_t *root = tp_json_obj();
    tp_json_set(root, "version", tp_json_int(1));
    json_t *diags = tp_json_arr(), *plans = tp_json_arr();
    long long errors = 0, warnings = 0, unsupported = 0, suppressed = 0;
    for (int u = 0; u < n; u++) {
        const tp_diags *d = units[u].diags;
        for (int i = 0; i < d->count; i++) {
            if (d->items[i].suppression)
                continue;          /* silenced in the source: SARIF only */
            json_t *g = json_diag(&d->items[i], units[u].src);
            tp_json_set(g, "plan", tp_json_str(units[u].plan));
            tp_json_push(diags, g);
        }
        errors += d->errors;
        warnings += d->warnings;
        unsupported += d->unsupported;
        suppressed += d->suppressed;
        tp_json_push(plans, json_plan(&units[u]));
    }
    tp_json_set(root, "diagnostics", diags);
    tp_json_set(root, "errors", tp_json_int(errors));
    tp_json_set(root, "warnings", tp_json_int(warnings));
    tp_json_set(root, "unsupported", tp_json_int(unsupported));
    tp_json_set(root, "suppressed", tp_json_int(suppressed));
    tp_json_set(root, "plans", plans);
    return tp_json_dump(root);
}
