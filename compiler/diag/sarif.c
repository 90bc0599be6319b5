/* diag/sarif.c: SARIF 2.1.0, the OASIS interchange format code-scanning
 * services and editors read. One document, one run, for all the plans of
 * a command line. The mapping:
 *
 *   check               a rule of tool.driver.rules: every check of
 *                       checks.def, with its descriptions, help and a
 *                       helpUri to its section of docs/checks.md
 *   diagnostic          a result (ruleId and ruleIndex), located in its
 *                       file; one without a file (a -D error) at line 1
 *                       of the plan it came from
 *   notes               relatedLocations; a result outside the plan
 *                       that found it (in its model) one more, at the
 *                       plan's line 1
 *   the plan            result.properties.plan: the URI of the plan
 *                       whose check found it
 *   fix-its             one fix
 *   help lines          result.properties.help
 *   "# tpcc: ignore"    a result with suppressions [{"kind": "inSource"}]
 *   unsupported         level "note" (SARIF has no level for "not
 *                       handled yet"; a note is listed without failing a
 *                       code-scanning check), rule "unsupported"
 *
 * URIs are relative to the root (--sarif-root, else the working
 * directory) with uriBaseId %SRCROOT%, which originalUriBaseIds resolves;
 * a file outside the root gets an absolute file:// URI and no uriBaseId
 * (SARIF: a uriBaseId goes with a relative uri only).
 * partialFingerprints["tpcc/v1"] is fingerprint.c's hash (of the plan's
 * URI too: a model finding is one per plan, in any order of the plans)
 * and, after a ':', how many earlier results of the document have the
 * same hash. */
#include <stdlib.h>
#include <string.h>

#include "compiler/diag/checks.h"
#include "compiler/diag/diag.h"
#include "compiler/diag/fingerprint.h"
#include "compiler/diag/jsonout.h"
#include "util/xalloc.h"

#ifndef TPCC_VERSION
#define TPCC_VERSION "0.0.0"
#endif

#define SARIF_SCHEMA "https://json.schemastore.org/sarif-2.1.0.json"
#define SRCROOT "%SRCROOT%"

typedef struct sarif_ctx {
    const tp_render_opts *opts;
    uint64_t *hashes;           /* fingerprints of the results so far */
    int nhashes;
} sarif_ctx;

/* SARIF's levels are none, note, warning and error: what tpcc cannot
 * handle yet is a note, no problem found in the plan. */
static const char *sarif_level(tp_diag_level level)
{
    return level == TP_UNSUPPORTED ? "note" : tp_diag_level_name(level);
}

/* ---- URIs ---- */

/* Percent-encode everything but unreserved characters and '/'. ':' is
 * encoded too, or "a:b.plan" would read as scheme "a". */
static void append_encoded(tp_buf *b, const char *path)
{
    static const char keep[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-._~/";
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (strchr(keep, *p))
            tp_buf_append_n(b, (const char *)p, 1);
        else
            tp_buf_appendf(b, "%%%02X", *p);
    }
}

/* "file:///dir/" for an absolute directory, with the final slash a base
 * URI needs. */
static char *dir_uri(const char *dir)
{
    tp_buf b;
    tp_buf_init(&b);
    tp_buf_append(&b, "file://");
    append_encoded(&b, dir);
    if (b.len == 0 || b.data[b.len - 1] != '/')
        tp_buf_append(&b, "/");
    return tp_buf_take(&b);
}

/* The file's path below the root, or NULL when it is outside. */
static const char *below_root(const char *abs, const char *root)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/')
        return abs + 1;
    if (strncmp(abs, root, n) == 0 && abs[n] == '/')
        return abs + n + 1;
    return NULL;
}

/* The URI of `path` (as tpcc was given it) and whether it is relative to
 * %SRCROOT%. Malloc'ed. */
static char *path_uri(const sarif_ctx *c, const char *path, int *relative)
{
    char *joined = path[0] == '/' ? tp_xstrdup(path) : tp_xasprintf("%s/%s", c->opts->cwd, path);
    char *abs = tp_path_tidy(joined);
    free(joined);
    const char *rel = below_root(abs, c->opts->root);
    tp_buf b;
    tp_buf_init(&b);
    if (!rel)
        tp_buf_append(&b, "file://");
    append_encoded(&b, rel ? rel : abs);
    free(abs);
    *relative = rel != NULL;
    return tp_buf_take(&b);
}

static json_t *artifact_at(const sarif_ctx *c, const char *path)
{
    int relative;
    char *uri = path_uri(c, path, &relative);
    json_t *o = tp_json_obj();
    tp_json_set(o, "uri", tp_json_str(uri));
    if (relative)
        tp_json_set(o, "uriBaseId", tp_json_str(SRCROOT));
    free(uri);
    return o;
}

/* ---- regions ---- */

/* Columns are counted in code points (run.columnKind): the start of the
 * line is found from the byte offset, then UTF-8 lead bytes are counted. */
static int code_point_column(const char *text, size_t offset)
{
    size_t start = offset;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    int col = 1;
    for (size_t i = start; i < offset; i++)
        col += ((unsigned char)text[i] & 0xC0) != 0x80;
    return col;
}

static int count_newlines(const char *p, size_t n)
{
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += p[i] == '\n';
    return lines;
}

/* A text region from the span's offsets, with the byte range alongside so
 * consumers applying fixes need not convert columns back. A span whose
 * offsets do not fit the file falls back to its line and column. */
static json_t *sarif_region(const tp_sources *src, tp_span sp)
{
    const tp_source_file *f = &src->files[sp.file];
    json_t *r = tp_json_obj();
    int line = sp.line < 1 ? 1 : sp.line;
    tp_json_set(r, "startLine", tp_json_int(line));
    int in_file = sp.offset >= 0 && sp.length >= 0 &&
                  (size_t)sp.offset + (size_t)sp.length <= f->size;
    if (!in_file) {
        tp_json_set(r, "startColumn", tp_json_int(sp.col < 1 ? 1 : sp.col));
        tp_json_set(r, "charLength", tp_json_int(sp.length < 0 ? 0 : sp.length));
        return r;
    }
    size_t start = (size_t)sp.offset, end = start + (size_t)sp.length;
    tp_json_set(r, "startColumn", tp_json_int(code_point_column(f->text, start)));
    tp_json_set(r, "endLine", tp_json_int(line + count_newlines(f->text + start, end - start)));
    tp_json_set(r, "endColumn", tp_json_int(code_point_column(f->text, end)));
    tp_json_set(r, "byteOffset", tp_json_int(sp.offset));
    tp_json_set(r, "byteLength", tp_json_int(sp.length));
    return r;
}

static json_t *sarif_physical(const sarif_ctx *c, const tp_sources *src, tp_span sp)
{
    json_t *o = tp_json_obj();
    tp_json_set(o, "artifactLocation", artifact_at(c, src->files[sp.file].path));
    tp_json_set(o, "region", sarif_region(src, sp));
    return o;
}

/* ---- rules ---- */

/* "layout-mismatch" -> "LayoutMismatch": SARIF's rule name is an
 * identifier. */
static char *rule_name(const char *id)
{
    char *name = tp_xstrdup(id);
    size_t n = 0;
    int upper = 1;
    for (const char *p = id; *p; p++) {
        if (*p == '-') {
            upper = 1;
            continue;
        }
        name[n++] = upper && *p >= 'a' && *p <= 'z' ? (char)(*p - 'a' + 'A') : *p;
        upper = 0;
    }
    name[n] = '\0';
    return name;
}

static json_t *sarif_rule(const tp_check_info *check)
{
    json_t *rule = tp_json_obj();
    tp_json_set(rule, "id", tp_json_str(check->name));
    char *name = rule_name(check->name);
    tp_json_set(rule, "name", tp_json_str(name));
    free(name);
    tp_json_set(rule, "shortDescription", tp_json_text(check->short_desc));
    tp_json_set(rule, "fullDescription", tp_json_text(check->full_desc));
    char *uri = tp_check_help_uri(check->name);
    json_t *help = tp_json_text(check->help);
    char *markdown = tp_xasprintf("%s\n\nSee [`%s` in tpcc's checks](%s).", check->help, check->name, uri);
    tp_json_set(help, "markdown", tp_json_str(markdown));
    free(markdown);
    tp_json_set(rule, "help", help);
    tp_json_set(rule, "helpUri", tp_json_str(uri));
    free(uri);
    json_t *config = tp_json_obj();
    tp_json_set(config, "level", tp_json_str(sarif_level(check->level)));
    tp_json_set(rule, "defaultConfiguration", config);
    return rule;
}

static json_t *sarif_driver(void)
{
    json_t *driver = tp_json_obj();
    tp_json_set(driver, "name", tp_json_str("tpcc"));
    tp_json_set(driver, "version", tp_json_str(TPCC_VERSION));
    tp_json_set(driver, "informationUri", tp_json_str(TP_PROJECT_URI));
    json_t *rules = tp_json_arr();
    for (int i = 0; i < tp_ncheck; i++)
        tp_json_push(rules, sarif_rule(&tp_checks[i]));
    tp_json_set(driver, "rules", rules);
    return driver;
}

/* ---- results ---- */

/* Notes become related locations; ids number them within the result. A
 * note without a location keeps its message only. */
static json_t *sarif_related(const sarif_ctx *c, const tp_diag *g, const tp_sources *src)
{
    json_t *arr = tp_json_arr();
    for (int i = 0; i < g->nnotes; i++) {
        json_t *loc = tp_json_obj();
        tp_json_set(loc, "id", tp_json_int(i));
        if (tp_json_has_file(src, g->notes[i].span))
            tp_json_set(loc, "physicalLocation", sarif_physical(c, src, g->notes[i].span));
        tp_json_set(loc, "message", tp_json_text(g->notes[i].message));
        tp_json_push(arr, loc);
    }
    return arr;
}

static json_t *sarif_replacement(const tp_sources *src, const tp_fixit *f)
{
    json_t *r = tp_json_obj();
    tp_json_set(r, "deletedRegion", sarif_region(src, f->span));
    if (f->replacement[0])
        tp_json_set(r, "insertedContent", tp_json_text(f->replacement));
    return r;
}

/* Whether fix-it i is the first of g's fix-its to edit its file. */
static int first_for_file(const tp_diag *g, int i)
{
    for (int j = 0; j < i; j++)
        if (g->fixits[j].span.file == g->fixits[i].span.file)
            return 0;
    return 1;
}

/* All fix-its of a diagnostic form one fix: SARIF wants one
 * artifactChange per file, holding that file's replacements. */
static json_t *sarif_fix(const sarif_ctx *c, const tp_diag *g, const tp_sources *src)
{
    json_t *changes = tp_json_arr();
    for (int i = 0; i < g->nfixits; i++) {
        int file = g->fixits[i].span.file;
        if (!tp_json_has_file(src, g->fixits[i].span) || !first_for_file(g, i))
            continue;
        json_t *repl = tp_json_arr();
        for (int j = i; j < g->nfixits; j++)
            if (g->fixits[j].span.file == file)
                tp_json_push(repl, sarif_replacement(src, &g->fixits[j]));
        json_t *change = tp_json_obj();
        tp_json_set(change, "artifactLocation", artifact_at(c, src->files[file].path));
        tp_json_set(change, "replacements", repl);
        tp_json_push(changes, change);
    }
    if (json_array_size(changes) == 0) {
        json_decref(changes);
        return NULL;
    }
    json_t *fix = tp_json_obj();
    tp_json_set(fix, "artifactChanges", changes);
    return fix;
}

/* The result's location: its span, or line 1 of the plan when it has none
 * (code scanning refuses results without a location). */
static json_t *sarif_locations(const sarif_ctx *c, const tp_diag *g, const tp_diag_unit *u)
{
    json_t *loc = tp_json_obj();
    if (tp_json_has_file(u->src, g->span)) {
        tp_json_set(loc, "physicalLocation", sarif_physical(c, u->src, g->span));
    } else {
        json_t *phys = tp_json_obj(), *region = tp_json_obj();
        tp_json_set(phys, "artifactLocation", artifact_at(c, u->plan));
        tp_json_set(region, "startLine", tp_json_int(1));
        tp_json_set(phys, "region", region);
        tp_json_set(loc, "physicalLocation", phys);
    }
    json_t *locs = tp_json_arr();
    tp_json_push(locs, loc);
    return locs;
}

static json_t *sarif_fingerprints(sarif_ctx *c, const tp_diag *g, const tp_diag_unit *u, const char *plan_uri)
{
    const char *path = tp_json_has_file(u->src, g->span) ? u->src->files[g->span.file].path : u->plan;
    int relative;
    char *uri = path_uri(c, path, &relative);
    uint64_t h = tp_fingerprint(g, u->src, uri, plan_uri);
    free(uri);
    int seen = 0;
    for (int i = 0; i < c->nhashes; i++)
        seen += c->hashes[i] == h;
    c->hashes = tp_xreallocarray(c->hashes, (size_t)c->nhashes + 1, sizeof *c->hashes);
    c->hashes[c->nhashes++] = h;
    char *value = tp_xasprintf("%016llx:%d", (unsigned long long)h, seen);
    json_t *o = tp_json_obj();
    tp_json_set(o, "tpcc/v1", tp_json_str(value));
    free(value);
    return o;
}

/* Whether the result lies outside the plan that found it (in its model,
 * its config.json). */
static int outside_plan(const sarif_ctx *c, const tp_diag *g, const tp_diag_unit *u, const char *plan_uri)
{
    if (!tp_json_has_file(u->src, g->span))
        return 0;                       /* located in the plan itself */
    int relative;
    char *uri = path_uri(c, u->src->files[g->span.file].path, &relative);
    int outside = strcmp(uri, plan_uri) != 0;
    free(uri);
    return outside;
}

/* A result outside its plan says which plan found it: a related location
 * at the plan's line 1, after the notes' (ids go on from theirs). */
static json_t *sarif_plan_location(const sarif_ctx *c, const tp_diag *g, const tp_diag_unit *u)
{
    json_t *loc = tp_json_obj(), *phys = tp_json_obj(), *region = tp_json_obj();
    tp_json_set(loc, "id", tp_json_int(g->nnotes));
    tp_json_set(phys, "artifactLocation", artifact_at(c, u->plan));
    tp_json_set(region, "startLine", tp_json_int(1));
    tp_json_set(phys, "region", region);
    tp_json_set(loc, "physicalLocation", phys);
    tp_json_set(loc, "message", tp_json_text("found checking this plan"));
    return loc;
}

static json_t *sarif_suppressions(const sarif_ctx *c, const tp_diag *g, const tp_diag_unit *u)
{
    const tp_suppression *s = &u->diags->supps[g->suppression - 1];
    json_t *o = tp_json_obj();
    tp_json_set(o, "kind", tp_json_str("inSource"));
    if (s->justification[0])
        tp_json_set(o, "justification", tp_json_str(s->justification));
    json_t *loc = tp_json_obj();
    tp_json_set(loc, "physicalLocation", sarif_physical(c, u->src, s->at));
    tp_json_set(o, "location", loc);
    json_t *arr = tp_json_arr();
    tp_json_push(arr, o);
    return arr;
}

static json_t *sarif_result(sarif_ctx *c, const tp_diag *g, const tp_diag_unit *u)
{
    json_t *res = tp_json_obj();
    tp_json_set(res, "ruleId", tp_json_str(g->check));
    int rule = tp_check_index(g->check);
    if (rule >= 0)
        tp_json_set(res, "ruleIndex", tp_json_int(rule));
    tp_json_set(res, "level", tp_json_str(sarif_level(g->level)));
    tp_json_set(res, "message", tp_json_text(g->message));
    tp_json_set(res, "locations", sarif_locations(c, g, u));
    int relative;
    char *plan_uri = path_uri(c, u->plan, &relative);
    json_t *related = sarif_related(c, g, u->src);
    if (outside_plan(c, g, u, plan_uri))
        tp_json_push(related, sarif_plan_location(c, g, u));
    if (json_array_size(related) > 0)
        tp_json_set(res, "relatedLocations", related);
    else
        json_decref(related);
    tp_json_set(res, "partialFingerprints", sarif_fingerprints(c, g, u, plan_uri));
    if (g->suppression)
        tp_json_set(res, "suppressions", sarif_suppressions(c, g, u));
    json_t *fix = sarif_fix(c, g, u->src);
    if (fix) {
        json_t *fixes = tp_json_arr();
        tp_json_push(fixes, fix);
        tp_json_set(res, "fixes", fixes);
    }
    json_t *props = tp_json_obj();
    tp_json_set(props, "plan", tp_json_str(plan_uri));
    free(plan_uri);
    if (g->nhelps > 0) {
        json_t *helps = tp_json_arr();
        for (int i = 0; i < g->nhelps; i++)
            tp_json_push(helps, tp_json_str(g->helps[i]));
        tp_json_set(props, "help", helps);
    }
    tp_json_set(res, "properties", props);
    return res;
}

/* ---- the document ---- */

static json_t *sarif_invocations(const tp_diag_unit *units, int n)
{
    int ok = 1;
    for (int i = 0; i < n; i++)
        ok &= units[i].status != 2;     /* 2: a file could not be read, or a usage error */
    json_t *inv = tp_json_obj();
    tp_json_set(inv, "executionSuccessful", json_boolean(ok));
    json_t *arr = tp_json_arr();
    tp_json_push(arr, inv);
    return arr;
}

char *tp_diags_render_sarif(const tp_diag_unit *units, int n, const tp_render_opts *opts)
{
    sarif_ctx c = {opts, NULL, 0};
    json_t *tool = tp_json_obj();
    tp_json_set(tool, "driver", sarif_driver());
    json_t *results = tp_json_arr();
    for (int u = 0; u < n; u++)
        for (int i = 0; i < units[u].diags->count; i++)
            tp_json_push(results, sarif_result(&c, &units[u].diags->items[i], &units[u]));
    free(c.hashes);

    json_t *base = tp_json_obj(), *root_loc = tp_json_obj();
    char *root_uri = dir_uri(opts->root);
    tp_json_set(root_loc, "uri", tp_json_str(root_uri));
    free(root_uri);
    tp_json_set(base, SRCROOT, root_loc);

    json_t *run = tp_json_obj();
    tp_json_set(run, "tool", tool);
    tp_json_set(run, "invocations", sarif_invocations(units, n));
    tp_json_set(run, "originalUriBaseIds", base);
    tp_json_set(run, "columnKind", tp_json_str("unicodeCodePoints"));
    tp_json_set(run, "results", results);
    json_t *runs = tp_json_arr();
    tp_json_push(runs, run);

    json_t *root = tp_json_obj();
    tp_json_set(root, "$schema", tp_json_str(SARIF_SCHEMA));
    tp_json_set(root, "version", tp_json_str("2.1.0"));
    tp_json_set(root, "runs", runs);
    return tp_json_dump(root);
}
