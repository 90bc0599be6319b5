/* config.c: lazily evaluated configuration (see config.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "compiler/front/config.h"
#include "compiler/diag/suggest.h"
#include "util/xalloc.h"

void tp_config_init(tp_config *c, tp_diags *diags)
{
    memset(c, 0, sizeof *c);
    c->diags = diags;
}

void tp_config_free(tp_config *c)
{
    for (int i = 0; i < c->count; i++)
        free(c->items[i].name);
    free(c->items);
    if (c->hf_json)
        json_decref((json_t *)c->hf_json);
    free(c->hf_path);
    memset(c, 0, sizeof *c);
}

static tp_cfg_entry *find(const tp_config *c, const char *name)
{
    for (int i = 0; i < c->count; i++)
        if (strcmp(c->items[i].name, name) == 0)
            return &c->items[i];
    return NULL;
}

bool tp_config_has(const tp_config *c, const char *name) { return find(c, name) != NULL; }

static tp_cfg_entry *bind(tp_config *c, const char *name)
{
    tp_cfg_entry *e = find(c, name);
    if (e)
        return e;
    if (c->count == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 32;
        c->items = tp_xrealloc(c->items, (size_t)c->cap * sizeof *c->items);
    }
    e = &c->items[c->count++];
    memset(e, 0, sizeof *e);
    e->name = tp_xstrdup(name);
    return e;
}

int tp_config_load_hf(tp_config *c, const char *path, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: cannot read Hugging Face config: %s",
                 path, jerr.line, jerr.column, jerr.text);
        return -1;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        snprintf(err, errlen, "%s: a Hugging Face config.json must be a JSON object", path);
        return -1;
    }
    c->hf_json = root;
    c->hf_path = tp_xstrdup(path);
    return 0;
}

void tp_config_bind_block(tp_config *c, const tp_node *block, tp_cfg_origin origin)
{
    for (int i = 0; i < block->nkids; i++) {
        const tp_node *a = block->kids[i];
        if (a->kind != N_ASSIGN || a->nkids < 1)
            continue;
        tp_cfg_entry *e = find(c, a->name);
        if (e && e->origin > origin)
            continue;                   /* a -D flag outranks a file */
        e = bind(c, a->name);
        e->expr = a->kids[0];
        e->span = a->span;
        e->origin = origin;
        e->state = 0;
    }
}

static int parse_value(const char *text, int64_t *v, bool *is_bool)
{
    *is_bool = false;
    if (!strcmp(text, "true") || !strcmp(text, "True")) { *v = 1; *is_bool = true; return 0; }
    if (!strcmp(text, "false") || !strcmp(text, "False")) { *v = 0; *is_bool = true; return 0; }
    char *end;
    errno = 0;
    long long x = strtoll(text, &end, 10);
    if (errno || end == text || *end)
        return -1;
    *v = x;
    return 0;
}

int tp_config_override(tp_config *c, const char *assignment, char *err, size_t errlen)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) {
        snprintf(err, errlen, "-D expects name=value, got '%s'", assignment);
        return -1;
    }
    char *name = tp_xstrdup(assignment);
    name[eq - assignment] = '\0';
    int64_t v;
    bool is_bool;
    int rc = 0;
    if (!find(c, name)) {
        const char *names[512];
        int n = 0;
        for (int i = 0; i < c->count && n < 512; i++)
            names[n++] = c->items[i].name;
        const char *best = tp_suggest(name, names, n);
        snprintf(err, errlen, "-D %s: unknown configuration name '%s'%s%s%s", assignment, name,
                 best ? " (did you mean '" : "", best ? best : "", best ? "'?)" : "");
        rc = -1;
    } else if (parse_value(eq + 1, &v, &is_bool) < 0) {
        snprintf(err, errlen, "-D %s: value must be an integer or true/false", assignment);
        rc = -1;
    } else {
        tp_cfg_entry *e = bind(c, name);
        e->expr = NULL;
        e->value = v;
        e->is_bool = is_bool;
        e->origin = TP_CFG_CMDLINE;
        e->span = TP_NO_SPAN;
        e->state = 2;
    }
    free(name);
    return rc;
}

bool tp_config_get(tp_config *c, const char *name, tp_span use, int64_t *out)
{
    tp_cfg_entry *e = find(c, name);
    if (!e) {
        if (use.file >= 0) {
            const char *names[512];
            int n = 0;
            for (int i = 0; i < c->count && n < 512; i++)
                names[n++] = c->items[i].name;
            const char *best = tp_suggest(name, names, n);
            tp_diag *g = tp_diag_add(c->diags, TP_ERROR, use, "config", "unknown name '%s'", name);
            if (best)
                tp_diag_help(g, "did you mean '%s'?", best);
        }
        return false;
    }
    if (e->state == 2) { *out = e->value; return true; }
    if (e->state == 3) return false;
    if (e->state == 1) {
        tp_diag_add(c->diags, TP_ERROR, e->span, "config",
                    "'%s' is defined in terms of itself", name);
        e->state = 3;
        return false;
    }
    e->state = 1;
    int64_t v;
    bool ok = tp_eval_int(c, e->expr, &v);
    /* the recursive evaluation may have grown the table: look it up again */
    e = find(c, name);
    if (e->state == 3)
        return false;
    e->state = ok ? 2 : 3;
    e->value = v;
    e->is_bool = ok && (e->expr->kind == N_TRUE || e->expr->kind == N_FALSE);
    *out = v;
    return ok;
}

static bool err_at(tp_config *c, const tp_node *e, const char *msg)
{
    tp_diag_add(c->diags, TP_ERROR, e->span, "config", "%s", msg);
    return false;
}

/* hf("key", default): the value of key in --hf-config, else default. */
static bool eval_hf(tp_config *c, const tp_node *call, int64_t *out)
{
    if (call->nkids != 3 || call->kids[1]->name || call->kids[2]->name ||
        call->kids[1]->kids[0]->kind != N_STR)
        return err_at(c, call, "hf() takes a key string and a default: hf(\"hidden_size\", 4096)");
    const char *key = call->kids[1]->kids[0]->str;
    json_t *v = c->hf_json ? json_object_get((json_t *)c->hf_json, key) : NULL;
    if (!v || json_is_null(v))
        return tp_eval_int(c, call->kids[2]->kids[0], out);
    if (json_is_integer(v)) { *out = json_integer_value(v); return true; }
    if (json_is_boolean(v)) { *out = json_is_true(v); return true; }
    tp_diag_add(c->diags, TP_ERROR, call->span, "config",
                "%s: \"%s\" must be an integer or a boolean", c->hf_path, key);
    return false;
}

static bool eval_call(tp_config *c, const tp_node *e, int64_t *out)
{
    const tp_node *callee = e->kids[0];
    if (callee->kind != N_NAME)
        return err_at(c, e, "only hf(), round_up(), min() and max() can be called here");
    if (!strcmp(callee->name, "hf"))
        return eval_hf(c, e, out);
    int64_t a[2];
    if (e->nkids != 3)
        return err_at(c, e, "expected two arguments");
    for (int i = 0; i < 2; i++)
        if (!tp_eval_int(c, e->kids[i + 1]->kids[0], &a[i]))
            return false;
    if (!strcmp(callee->name, "min")) { *out = a[0] < a[1] ? a[0] : a[1]; return true; }
    if (!strcmp(callee->name, "max")) { *out = a[0] > a[1] ? a[0] : a[1]; return true; }
    if (!strcmp(callee->name, "round_up")) {
        if (a[1] <= 0)
            return err_at(c, e, "round_up() needs a positive multiple");
        int64_t r;
        if (__builtin_add_overflow(a[0], a[1] - 1, &r))
            return err_at(c, e, "integer overflow");
        *out = r / a[1] * a[1];
        return true;
    }
    return err_at(c, e, "only hf(), round_up(), min() and max() can be called here");
}

static bool eval_binop(tp_config *c, const tp_node *e, int64_t *out)
{
    int64_t a, b;
    if (!tp_eval_int(c, e->kids[0], &a))
        return false;
    if (e->op == 'A' && !a) { *out = 0; return true; }   /* short-circuit and/or */
    if (e->op == 'O' && a) { *out = 1; return true; }
    if (!tp_eval_int(c, e->kids[1], &b))
        return false;
    switch (e->op) {
    case '+': if (__builtin_add_overflow(a, b, out)) return err_at(c, e, "integer overflow"); return true;
    case '-': if (__builtin_sub_overflow(a, b, out)) return err_at(c, e, "integer overflow"); return true;
    case '*': if (__builtin_mul_overflow(a, b, out)) return err_at(c, e, "integer overflow"); return true;
    case 'A': case 'O': *out = b != 0; return true;
    case '/': case 'f': case '%':
        if (b == 0)
            return err_at(c, e, "division by zero");
        if (a == INT64_MIN && b == -1)
            return err_at(c, e, "integer overflow");
        if (e->op == '%') {          /* Python: the remainder takes the divisor's sign */
            *out = a % b;
            if (*out && ((*out < 0) != (b < 0)))
                *out += b;
            return true;
        }
        if (e->op == '/' && a % b) {
            tp_diag_add(c->diags, TP_ERROR, e->span, "config",
                        "%lld / %lld is not an integer; write // to round down",
                        (long long)a, (long long)b);
            return false;
        }
        *out = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));   /* floor, as Python's // */
        return true;
    }
    return err_at(c, e, "unsupported operator");
}

bool tp_eval_int(tp_config *c, const tp_node *e, int64_t *out)
{
    switch (e->kind) {
    case N_INT: *out = e->ival; return true;
    case N_TRUE: *out = 1; return true;
    case N_FALSE: *out = 0; return true;
    case N_NAME: return tp_config_get(c, e->name, e->span, out);
    case N_NEG:
        if (!tp_eval_int(c, e->kids[0], out)) return false;
        if (*out == INT64_MIN) return err_at(c, e, "integer overflow");
        *out = -*out;
        return true;
    case N_NOT:
        if (!tp_eval_int(c, e->kids[0], out)) return false;
        *out = !*out;
        return true;
    case N_COND: {
        int64_t cond;
        if (!tp_eval_int(c, e->kids[1], &cond)) return false;
        return tp_eval_int(c, e->kids[cond ? 0 : 2], out);
    }
    case N_BINOP: return eval_binop(c, e, out);
    case N_CALL: return eval_call(c, e, out);
    default: return err_at(c, e, "expected an integer or boolean expression");
    }
}

char *tp_expr_text(const tp_node *e)
{
    switch (e->kind) {
    case N_INT: return tp_xasprintf("%lld", (long long)e->ival);
    case N_NAME: return tp_xstrdup(e->name);
    case N_TRUE: return tp_xstrdup("True");
    case N_FALSE: return tp_xstrdup("False");
    case N_NONE: return tp_xstrdup("None");
    case N_STR: return tp_xasprintf("\"%s\"", e->str);
    case N_NEG: { char *a = tp_expr_text(e->kids[0]); char *r = tp_xasprintf("-%s", a); free(a); return r; }
    case N_BINOP: {
        char *a = tp_expr_text(e->kids[0]), *b = tp_expr_text(e->kids[1]);
        const char *op = e->op == 'f' ? "//" : e->op == 'A' ? "and" : e->op == 'O' ? "or" : NULL;
        char *r = op ? tp_xasprintf("%s %s %s", a, op, b) : tp_xasprintf("%s %c %s", a, e->op, b);
        free(a); free(b);
        return r;
    }
    default: return tp_xstrdup("<expr>");
    }
}
