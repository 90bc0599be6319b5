/* settings.c: reading tpcc's settings from a TOML file (see settings.h). */
#define _XOPEN_SOURCE 700   /* realpath */

#include "compiler/driver/settings.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/diag/checks.h"
#include "compiler/diag/suggest.h"
#include "compiler/driver/toml.h"
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/input_file.h"
#include "util/xalloc.h"

typedef struct reading {
    tp_settings *s;
    const char *path;           /* the file */
    char *dir;                  /* its directory: relative paths start there */
    const char *table;          /* "[tool.tpcc]" or the file's name, for messages */
    char *err;
    size_t errlen;
} reading;

/* "PATH:LINE:COL: message"; returns -1 */
static int fail(const reading *c, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(const reading *c, int line, int col, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tp_error(c->err, c->errlen, "%s:%d:%d: %s", c->path, line, col, msg);
}

static void append(char ***list, int *n, char *item)
{
    *list = tp_xreallocarray(*list, (size_t)*n + 1, sizeof **list);
    (*list)[(*n)++] = item;
}

/* ---- one reader per key ---- */

/* The strings of an array, as paths relative to the file's directory,
 * resolved (they must exist: a misspelt directory is an error, not a
 * silent no-op). */
static int read_paths(reading *c, const char *key, const tp_toml *v, bool dirs_only, char ***out, int *n)
{
    if (v->kind != TP_TOML_ARRAY)
        return fail(c, v->line, v->col, "%s must be an array of paths ([\"models\"]), not %s", key,
                    tp_toml_kind_name(v->kind));
    for (int i = 0; i < v->count; i++) {
        const tp_toml *e = v->items[i];
        if (e->kind != TP_TOML_STRING || !e->string[0])
            return fail(c, e->line, e->col, "%s takes paths (non-empty strings), not %s", key,
                        e->kind == TP_TOML_STRING ? "an empty string" : tp_toml_kind_name(e->kind));
        char *joined = e->string[0] == '/' ? tp_xstrdup(e->string) : tp_xasprintf("%s/%s", c->dir, e->string);
        char *real = realpath(joined, NULL);
        struct stat st;
        int rc = 0;
        if (!real)
            rc = fail(c, e->line, e->col, "%s: '%s' (%s): %s", key, e->string, joined, strerror(errno));
        else if (dirs_only && (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)))
            rc = fail(c, e->line, e->col, "%s: '%s' (%s) is not a directory", key, e->string, joined);
        free(joined);
        if (rc < 0) {
            free(real);
            return rc;
        }
        append(out, n, real);
    }
    return 0;
}

static int read_model_path(reading *c, const char *key, const tp_toml *v)
{
    return read_paths(c, key, v, true, &c->s->model_path, &c->s->nmodel_path);
}

static int read_allow_outside(reading *c, const char *key, const tp_toml *v)
{
    return read_paths(c, key, v, false, &c->s->allow_outside, &c->s->nallow_outside);
}

static int read_defines(reading *c, const char *key, const tp_toml *v)
{
    if (v->kind != TP_TOML_TABLE)
        return fail(c, v->line, v->col, "%s must be a table of values ({tp = 8, seq = 4096}), not %s", key,
                    tp_toml_kind_name(v->kind));
    for (int i = 0; i < v->count; i++) {
        const tp_toml *e = v->items[i];
        const char *name = v->keys[i];
        char text[TP_REAL_TEXT_MAX];
        const char *value = text;
        if (!name[0] || strchr(name, '='))
            return fail(c, e->key_line, e->key_col, "'%s' is not a configuration name", name);
        if (e->kind == TP_TOML_INTEGER)
            snprintf(text, sizeof text, "%lld", (long long)e->integer);
        else if (e->kind == TP_TOML_FLOAT && isfinite(e->real))
            tp_format_real(e->real, text);
        else if (e->kind == TP_TOML_BOOLEAN)
            value = e->boolean ? "true" : "false";
        else if (e->kind == TP_TOML_STRING)
            value = e->string;
        else
            return fail(c, e->line, e->col, "%s: %s is %s: a value is a number, a string or a boolean", key, name,
                        e->kind == TP_TOML_FLOAT ? "not finite" : tp_toml_kind_name(e->kind));
        append(&c->s->defines, &c->s->ndefines, tp_xasprintf("%s=%s", name, value));
        c->s->define_at = tp_xreallocarray(c->s->define_at, (size_t)c->s->ndefines, sizeof *c->s->define_at);
        c->s->define_at[c->s->ndefines - 1] = tp_xasprintf("%s:%d:%d", c->path, e->key_line, e->key_col);
    }
    return 0;
}

static int read_werror(reading *c, const char *key, const tp_toml *v)
{
    if (v->kind != TP_TOML_BOOLEAN)
        return fail(c, v->line, v->col, "%s must be true or false, not %s", key, tp_toml_kind_name(v->kind));
    append(&c->s->warnings, &c->s->nwarnings, tp_xstrdup(v->boolean ? "error" : "no-error"));
    return 0;
}

static int read_warnings(reading *c, const char *key, const tp_toml *v)
{
    if (v->kind != TP_TOML_TABLE)
        return fail(c, v->line, v->col, "%s must be a table of checks ({repeated-gather = \"error\"}), not %s", key,
                    tp_toml_kind_name(v->kind));
    for (int i = 0; i < v->count; i++) {
        const tp_toml *e = v->items[i];
        const char *check = v->keys[i];
        if (tp_check_index(check) < 0) {
            const char *near = tp_check_suggest(check);
            return fail(c, e->key_line, e->key_col, "%s: unknown check '%s'%s%s%s", key, check,
                        near ? "; did you mean '" : "", near ? near : "", near ? "'?" : " (docs/checks.md lists them)");
        }
        const char *level = e->kind == TP_TOML_STRING ? e->string : "";
        char *arg = !strcmp(level, "error") ? tp_xasprintf("%s=error", check)
                  : !strcmp(level, "warning") ? tp_xasprintf("%s=warning", check)
                  : !strcmp(level, "ignore") ? tp_xasprintf("no-%s", check)
                                             : NULL;
        if (!arg)
            return fail(c, e->line, e->col, "%s: %s takes \"error\", \"warning\" or \"ignore\"", key, check);
        append(&c->s->warnings, &c->s->nwarnings, arg);
    }
    return 0;
}

/* ---- the keys ---- */

/* ORDER: as docs/lint.md lists them */
#define SETTINGS_KEYS(X)                        \
    X("model-path", read_model_path)            \
    X("allow-outside", read_allow_outside)      \
    X("defines", read_defines)                  \
    X("werror", read_werror)                    \
    X("warnings", read_warnings)

typedef int (*key_reader)(reading *c, const char *key, const tp_toml *v);

static const struct settings_key {
    const char *name;
    key_reader read;
} keys[] = {
#define ROW(name, reader) {name, reader},
    SETTINGS_KEYS(ROW)
#undef ROW
};

const char *const tp_settings_keys[] = {
#define NAME(name, reader) name,
    SETTINGS_KEYS(NAME)
#undef NAME
};
const int tp_nsettings_keys = (int)(sizeof tp_settings_keys / sizeof *tp_settings_keys);

static int read_table(reading *c, const tp_toml *t)
{
    for (int i = 0; i < t->count; i++) {
        const char *name = t->keys[i];
        int k = 0;
        while (k < tp_nsettings_keys && strcmp(keys[k].name, name))
            k++;
        if (k == tp_nsettings_keys) {
            const char *near = tp_suggest(name, tp_settings_keys, tp_nsettings_keys);
            return fail(c, t->items[i]->key_line, t->items[i]->key_col,
                        "unknown setting '%s' in %s%s%s%s (docs/lint.md lists the settings)", name, c->table,
                        near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
        }
        if (keys[k].read(c, name, t->items[i]) < 0)
            return -1;
    }
    return 0;
}

/* ---- the file ---- */

static char *read_file(const char *path, size_t *size, char *err, size_t errlen)
{
    FILE *f = tp_input_fopen(path, err, errlen);
    if (!f)
        return NULL;
    tp_buf b;
    tp_buf_init(&b);
    char chunk[1 << 14];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        tp_buf_append_n(&b, chunk, n);
    int bad = ferror(f) ? errno : 0;
    fclose(f);
    if (bad) {
        tp_buf_free(&b);
        tp_error(err, errlen, "%s: cannot read: %s", path, strerror(bad));
        return NULL;
    }
    *size = b.len;
    return tp_buf_take(&b);
}

int tp_settings_read(tp_settings *s, const char *path, bool pyproject, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    size_t size = 0;
    char *text = read_file(path, &size, err, errlen);
    if (!text)
        return -1;
    char why[512];
    tp_toml *root = tp_toml_parse(text, size, why, sizeof why);
    free(text);
    if (!root)
        return tp_error(err, errlen, "%s:%s", path, why);
    reading c = {s, path, tp_path_parent(path), pyproject ? "[tool.tpcc]" : path, err, errlen};
    const tp_toml *tool = pyproject ? tp_toml_get(root, "tool") : NULL;
    const tp_toml *table = pyproject ? tp_toml_get(tool, "tpcc") : root;
    int rc = 1;
    if (pyproject && tool && tool->kind != TP_TOML_TABLE)
        rc = fail(&c, tool->line, tool->col, "'tool' is %s, not a table", tp_toml_kind_name(tool->kind));
    else if (table && table->kind != TP_TOML_TABLE)
        rc = fail(&c, table->line, table->col, "tool.tpcc is %s, not a table", tp_toml_kind_name(table->kind));
    else if (!table)
        rc = 0;
    else if (read_table(&c, table) < 0)
        rc = -1;
    free(c.dir);
    tp_toml_free(root);
    if (rc == 1)
        s->path = tp_xstrdup(path);
    else
        tp_settings_free(s);
    return rc;
}

static void free_list(char **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void tp_settings_free(tp_settings *s)
{
    free(s->path);
    free_list(s->model_path, s->nmodel_path);
    free_list(s->allow_outside, s->nallow_outside);
    free_list(s->defines, s->ndefines);
    free_list(s->define_at, s->ndefines);
    free_list(s->warnings, s->nwarnings);
    memset(s, 0, sizeof *s);
}
