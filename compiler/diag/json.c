/* diag/json.c: machine-readable renderers, built with jansson.
 *
 * JSON is tpcc's own flat format (see tp_diags_render_json). SARIF 2.1.0
 * is the OASIS interchange format read by code-scanning services and
 * editors; the mapping is: a diagnostic is a result, its check a rule, its
 * notes relatedLocations, its fix-its one fix, its help lines
 * result.properties.help. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/diag/diag.h"
#include "util/xalloc.h"

#ifndef TPCC_VERSION
#define TPCC_VERSION "0.0.0"
#endif

#define SARIF_SCHEMA "https://json.schemastore.org/sarif-2.1.0.json"
#define TPCC_URI "https://github.com/tpcc/tpcc"

/* ---- jansson wrappers ----
 * jansson reports allocation failure by returning NULL or -1; like every
 * allocation in tpcc, that aborts (see xalloc.h). */

static json_t *jobj(void)
{
    return tp_xcheck(json_object());
}

static json_t *jarr(void)
{
    return tp_xcheck(json_array());
}

static json_t *jint(long long n)
{
    return tp_xcheck(json_integer(n));
}

static void jset(json_t *obj, const char *key, json_t *value)
{
    if (json_object_set_new(obj, key, value) != 0)
        tp_out_of_memory();
}

static void jpush(json_t *arr, json_t *value)
{
    if (json_array_append_new(arr, value) != 0)
        tp_out_of_memory();
}

/* Length of the valid UTF-8 sequence starting at p, or 0 when it is not
 * one (overlong forms and surrogates included). Stops at a NUL, because a
 * NUL is never a continuation byte. */
static int utf8_sequence(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    int n;
    unsigned min;
    if ((p[0] & 0xE0) == 0xC0) {
        n = 2;
        min = 0x80;
    } else if ((p[0] & 0xF0) == 0xE0) {
        n = 3;
        min = 0x800;
    } else if ((p[0] & 0xF8) == 0xF0) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned cp = p[0] & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* jansson refuses strings that are not UTF-8, and messages quote source
 * text that may not be. Invalid bytes become U+FFFD. */
static json_t *jstr(const char *s)
{
    tp_buf b;
    tp_buf_init(&b);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = utf8_sequence(p);
        if (n == 0) {
            tp_buf_append(&b, "\xEF\xBF\xBD");
            p++;
        } else {
            tp_buf_append_n(&b, (const char *)p, (size_t)n);
            p += n;
        }
    }
    char *valid = tp_buf_take(&b);
    json_t *v = tp_xcheck(json_string(valid));
    free(valid);
    return v;
}

/* {"text": s}: SARIF's message and multiformatMessageString objects. */
static json_t *jtext(const char *s)
{
    json_t *o = jobj();
    jset(o, "text", jstr(s));
    return o;
}

static char *dump(json_t *root)
{
    char *s = tp_xcheck(json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER));
    json_decref(root);
    char *out = tp_xasprintf("%s\n", s);
    free(s);
    return out;
}

static const char *level_name(tp_diag_level level)
{
    switch (level) {
    case TP_ERROR: return "error";
    case TP_WARNING: return "warning";
    default: return "note";
    }
}

static int has_file(const tp_sources *src, tp_span sp)
{
    return sp.file >= 0 && sp.file < src->count;
}

/* ---- tpcc JSON ---- */

/* "file", "line", "column" (and "offset", "length" when with_range); all
 * null for a diagnostic without a location. */
static void json_location(json_t *o, const tp_sources *src, tp_span sp, int with_range)
{
    int known = has_file(src, sp);
    jset(o, "file", known ? jstr(src->files[sp.file].path) : json_null());
    jset(o, "line", known ? jint(sp.line) : json_null());
    jset(o, "column", known ? jint(sp.col) : json_null());
    if (!with_range)
        return;
    jset(o, "offset", known ? jint(sp.offset) : json_null());
    jset(o, "length", known ? jint(sp.length) : json_null());
}

static json_t *json_diag(const tp_diag *g, const tp_sources *src)
{
    json_t *o = jobj();
    jset(o, "level", jstr(level_name(g->level)));
    jset(o, "check", jstr(g->check));
    jset(o, "message", jstr(g->message));
    json_location(o, src, g->span, 1);

    json_t *notes = jarr();
    for (int i = 0; i < g->nnotes; i++) {
        json_t *n = jobj();
        jset(n, "message", jstr(g->notes[i].message));
        json_location(n, src, g->notes[i].span, 0);
        jpush(notes, n);
    }
    jset(o, "notes", notes);

    json_t *helps = jarr();
    for (int i = 0; i < g->nhelps; i++)
        jpush(helps, jstr(g->helps[i]));
    jset(o, "help", helps);

    json_t *fixits = jarr();
    for (int i = 0; i < g->nfixits; i++) {
        json_t *f = jobj();
        json_location(f, src, g->fixits[i].span, 1);
        jset(f, "replacement", jstr(g->fixits[i].replacement));
        jpush(fixits, f);
    }
    jset(o, "fixits", fixits);
    return o;
}

char *tp_diags_render_json(const tp_diags *d, const tp_sources *src)
{
    json_t *root = jobj();
    jset(root, "version", jint(1));
    json_t *diags = jarr();
    for (int i = 0; i < d->count; i++)
        jpush(diags, json_diag(&d->items[i], src));
    jset(root, "diagnostics", diags);
    jset(root, "errors", jint(d->errors));
    jset(root, "warnings", jint(d->warnings));
    return dump(root);
}

/* ---- SARIF 2.1.0 ---- */

/* artifactLocation.uri must be a URI reference: percent-encode everything
 * but unreserved characters and '/', and turn absolute paths into file://
 * URIs. ':' is encoded too, or "a:b.plan" would read as scheme "a". */
static char *path_to_uri(const char *path)
{
    static const char keep[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789-._~/";
    tp_buf b;
    tp_buf_init(&b);
    if (path[0] == '/')
        tp_buf_append(&b, "file://");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (strchr(keep, *p))
            tp_buf_append_n(&b, (const char *)p, 1);
        else
            tp_buf_appendf(&b, "%%%02X", *p);
    }
    return tp_buf_take(&b);
}

static json_t *sarif_artifact(const tp_sources *src, int file)
{
    char *uri = path_to_uri(src->files[file].path);
    json_t *o = jobj();
    jset(o, "uri", jstr(uri));
    free(uri);
    return o;
}

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
    json_t *r = jobj();
    int line = sp.line < 1 ? 1 : sp.line;
    jset(r, "startLine", jint(line));
    int in_file = sp.offset >= 0 && sp.length >= 0 &&
                  (size_t)sp.offset + (size_t)sp.length <= f->size;
    if (!in_file) {
        jset(r, "startColumn", jint(sp.col < 1 ? 1 : sp.col));
        jset(r, "charLength", jint(sp.length < 0 ? 0 : sp.length));
        return r;
    }
    size_t start = (size_t)sp.offset, end = start + (size_t)sp.length;
    jset(r, "startColumn", jint(code_point_column(f->text, start)));
    jset(r, "endLine", jint(line + count_newlines(f->text + start, end - start)));
    jset(r, "endColumn", jint(code_point_column(f->text, end)));
    jset(r, "byteOffset", jint(sp.offset));
    jset(r, "byteLength", jint(sp.length));
    return r;
}

static json_t *sarif_physical(const tp_sources *src, tp_span sp)
{
    json_t *o = jobj();
    jset(o, "artifactLocation", sarif_artifact(src, sp.file));
    jset(o, "region", sarif_region(src, sp));
    return o;
}

/* Rules are the distinct check names, in order of first use; results
 * point at them by index. */
typedef struct rule_set {
    const char **names;
    int count;
} rule_set;

static int rule_index(const rule_set *rules, const char *check)
{
    for (int i = 0; i < rules->count; i++)
        if (strcmp(rules->names[i], check) == 0)
            return i;
    return -1;
}

static void collect_rules(rule_set *rules, const tp_diags *d)
{
    rules->names = tp_xreallocarray(NULL, (size_t)d->count, sizeof *rules->names);
    rules->count = 0;
    for (int i = 0; i < d->count; i++) {
        const char *check = d->items[i].check;
        if (*check && rule_index(rules, check) < 0)
            rules->names[rules->count++] = check;
    }
}

static json_t *sarif_driver(const rule_set *rules)
{
    json_t *driver = jobj();
    jset(driver, "name", jstr("tpcc"));
    jset(driver, "version", jstr(TPCC_VERSION));
    jset(driver, "informationUri", jstr(TPCC_URI));
    json_t *arr = jarr();
    for (int i = 0; i < rules->count; i++) {
        json_t *rule = jobj();
        jset(rule, "id", jstr(rules->names[i]));
        char *desc = tp_xasprintf("tpcc '%s' check", rules->names[i]);
        jset(rule, "shortDescription", jtext(desc));
        free(desc);
        jpush(arr, rule);
    }
    jset(driver, "rules", arr);
    return driver;
}

/* Notes become related locations; ids number them within the result. A
 * note without a location keeps its message only. */
static json_t *sarif_related(const tp_diag *g, const tp_sources *src)
{
    json_t *arr = jarr();
    for (int i = 0; i < g->nnotes; i++) {
        json_t *loc = jobj();
        jset(loc, "id", jint(i));
        if (has_file(src, g->notes[i].span))
            jset(loc, "physicalLocation", sarif_physical(src, g->notes[i].span));
        jset(loc, "message", jtext(g->notes[i].message));
        jpush(arr, loc);
    }
    return arr;
}

static json_t *sarif_replacement(const tp_sources *src, const tp_fixit *f)
{
    json_t *r = jobj();
    jset(r, "deletedRegion", sarif_region(src, f->span));
    if (f->replacement[0])
        jset(r, "insertedContent", jtext(f->replacement));
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
static json_t *sarif_fix(const tp_diag *g, const tp_sources *src)
{
    json_t *changes = jarr();
    for (int i = 0; i < g->nfixits; i++) {
        int file = g->fixits[i].span.file;
        if (!has_file(src, g->fixits[i].span) || !first_for_file(g, i))
            continue;
        json_t *repl = jarr();
        for (int j = i; j < g->nfixits; j++)
            if (g->fixits[j].span.file == file)
                jpush(repl, sarif_replacement(src, &g->fixits[j]));
        json_t *change = jobj();
        jset(change, "artifactLocation", sarif_artifact(src, file));
        jset(change, "replacements", repl);
        jpush(changes, change);
    }
    if (json_array_size(changes) == 0) {
        json_decref(changes);
        return NULL;
    }
    json_t *fix = jobj();
    jset(fix, "artifactChanges", changes);
    return fix;
}

static json_t *sarif_result(const tp_diag *g, const tp_sources *src, const rule_set *rules)
{
    json_t *res = jobj();
    int rule = rule_index(rules, g->check);
    if (rule >= 0) {
        jset(res, "ruleId", jstr(g->check));
        jset(res, "ruleIndex", jint(rule));
    }
    jset(res, "level", jstr(level_name(g->level)));
    jset(res, "message", jtext(g->message));
    if (has_file(src, g->span)) {
        json_t *loc = jobj();
        jset(loc, "physicalLocation", sarif_physical(src, g->span));
        json_t *locs = jarr();
        jpush(locs, loc);
        jset(res, "locations", locs);
    }
    if (g->nnotes > 0)
        jset(res, "relatedLocations", sarif_related(g, src));
    json_t *fix = sarif_fix(g, src);
    if (fix) {
        json_t *fixes = jarr();
        jpush(fixes, fix);
        jset(res, "fixes", fixes);
    }
    if (g->nhelps > 0) {
        json_t *helps = jarr();
        for (int i = 0; i < g->nhelps; i++)
            jpush(helps, jstr(g->helps[i]));
        json_t *props = jobj();
        jset(props, "help", helps);
        jset(res, "properties", props);
    }
    return res;
}

char *tp_diags_render_sarif(const tp_diags *d, const tp_sources *src)
{
    rule_set rules;
    collect_rules(&rules, d);

    json_t *tool = jobj();
    jset(tool, "driver", sarif_driver(&rules));
    json_t *results = jarr();
    for (int i = 0; i < d->count; i++)
        jpush(results, sarif_result(&d->items[i], src, &rules));
    json_t *run = jobj();
    jset(run, "tool", tool);
    jset(run, "columnKind", jstr("unicodeCodePoints"));
    jset(run, "results", results);
    json_t *runs = jarr();
    jpush(runs, run);

    json_t *root = jobj();
    jset(root, "$schema", jstr(SARIF_SCHEMA));
    jset(root, "version", jstr("2.1.0"));
    jset(root, "runs", runs);
    free(rules.names);
    return dump(root);
}
