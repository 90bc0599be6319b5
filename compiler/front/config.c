/* config.c: lazily evaluated configuration (see config.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>
#include "compiler/front/config.h"
#include "compiler/front/hf_json.h"
#include "compiler/diag/suggest.h"
#include "util/number.h"
#include "util/xalloc.h"
#include "sched/write.h"

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
    tp_map_free(&c->index);
    if (c->hf_json)
        json_decref((json_t *)c->hf_json);
    free(c->hf_path);
    memset(c, 0, sizeof *c);
}

/* By the index: a plan's config block is an input of any size, and each
 * binding looks its name up. */
static tp_cfg_entry *find(const tp_config *c, const char *name)
{
    int64_t i = tp_map_gets(&c->index, name);
    return i >= 0 ? &c->items[i] : NULL;
}

bool tp_config_has(const tp_config *c, const char *name) { return find(c, name) != NULL; }
const tp_cfg_entry *tp_config_entry(const tp_config *c, const char *name) { return find(c, name); }

static tp_cfg_entry *bind(tp_config *c, const char *name)
{
    tp_cfg_entry *e = find(c, name);
    if (e)
        return e;
    c->items = tp_xgrow(c->items, c->count, &c->cap, sizeof *c->items, 32);
    tp_map_puts(&c->index, name, c->count);
    e = &c->items[c->count++];
    memset(e, 0, sizeof *e);
    e->name = tp_xstrdup(name);
    return e;
}

char *tp_config_json_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return tp_xasprintf("%s%sconfig.json", path, path[strlen(path) - 1] == '/' ? "" : "/");
    return tp_xstrdup(path);
}

int tp_config_load_hf(tp_config *c, const char *dir_or_file, tp_sources *src)
{
    char *path = tp_config_json_path(dir_or_file);
    char err[512];
    int line, col;
    json_t *root = tp_hf_json_read(path, &line, &col, err, sizeof err);
    if (!root) {
        tp_hf_json_finding(src, c->diags, path, line, col, TP_ERROR, "io", err);
        free(path);
        return -1;
    }
    c->hf_json = root;
    c->hf_path = path;
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

static tp_cfg_value int_value(int64_t i) { return (tp_cfg_value){false, i, 0, NULL}; }
static tp_cfg_value float_value(double f) { return (tp_cfg_value){true, 0, f, NULL}; }
static tp_cfg_value string_value(const char *s) { return (tp_cfg_value){false, 0, 0, s}; }
static bool truthy(tp_cfg_value v) { return v.is_float ? v.f != 0 : v.i != 0; }

/* A float as -D writes it: the model language's form without digit groups
 * (1e-5, 500000.0, -2.5, .5), and as an integer is written, without a
 * leading '+'. strtod alone would also take hex, inf, nan, blanks and the
 * '+'; a bare integer is not a float. */
static bool is_float_text(const char *t)
{
    t += *t == '-';
    size_t whole = strspn(t, "0123456789"), frac = 0;
    t += whole;
    bool dot = *t == '.';
    if (dot) {
        frac = strspn(++t, "0123456789");
        t += frac;
    }
    if (whole + frac == 0)
        return false;
    if (*t == 'e' || *t == 'E') {
        t++;
        t += *t == '-' || *t == '+';
        size_t exponent = strspn(t, "0123456789");
        if (!exponent)
            return false;
        t += exponent;
    } else if (!dot) {
        return false;
    }
    return *t == '\0';
}

/* Returns NULL, or why text is no -D value. strtod reads '.' as the decimal
 * point: tpcc never calls setlocale, so the C locale applies. */
static const char *parse_value(const char *text, tp_cfg_value *v, bool *is_bool)
{
    *is_bool = false;
    if (!strcmp(text, "true") || !strcmp(text, "True")) { *v = int_value(1); *is_bool = true; return NULL; }
    if (!strcmp(text, "false") || !strcmp(text, "False")) { *v = int_value(0); *is_bool = true; return NULL; }
    errno = 0;
    if (is_float_text(text)) {
        double f = strtod(text, NULL);
        if (errno == ERANGE && (isinf(f) || f == 0.0))
            return "is beyond a double's range (about 2.2e-308 to 1.8e308)";
        *v = float_value(f);
        return NULL;
    }
    /* decimal only: no blanks, '+' or hex, which strtoll alone takes */
    int64_t x;
    if (tp_parse_int(text, INT64_MIN, INT64_MAX, &x)) {
        const char *digits = text + (*text == '-');
        bool integer = *digits && !digits[strspn(digits, "0123456789")];
        return integer ? "is beyond a 64-bit integer's range" : "must be an integer, a float or true/false";
    }
    *v = int_value(x);
    return NULL;
}

static void store(tp_cfg_entry *e, tp_cfg_value v)
{
    e->is_float = v.is_float;
    e->value = v.i;
    e->real = v.f;
    e->str = v.s;
}

static tp_cfg_value stored(const tp_cfg_entry *e)
{
    return e->str ? string_value(e->str) : e->is_float ? float_value(e->real) : int_value(e->value);
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
    tp_cfg_value v;
    bool is_bool;
    const char *why;
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
    } else if ((why = parse_value(eq + 1, &v, &is_bool))) {
        snprintf(err, errlen, "-D %s: value %s", assignment, why);
        rc = -1;
    } else {
        tp_cfg_entry *e = bind(c, name);
        e->expr = NULL;
        store(e, v);
        e->is_bool = is_bool;
        e->origin = TP_CFG_CMDLINE;
        e->span = TP_NO_SPAN;
        e->state = 2;
    }
    free(name);
    return rc;
}

bool tp_config_value(tp_config *c, const char *name, tp_span use, tp_cfg_value *out)
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
    if (e->state == 2) { *out = stored(e); return true; }
    if (e->state == 3) return false;
    if (e->state == 1) {
        tp_diag_add(c->diags, TP_ERROR, e->span, "config",
                    "'%s' is defined in terms of itself", name);
        e->state = 3;
        return false;
    }
    e->state = 1;
    tp_cfg_value v = int_value(0);
    bool ok = tp_eval_value(c, e->expr, &v);
    /* the recursive evaluation may have grown the table: look it up again */
    e = find(c, name);
    if (e->state == 3)
        return false;
    e->state = ok ? 2 : 3;
    store(e, v);
    e->is_bool = ok && (e->expr->kind == N_TRUE || e->expr->kind == N_FALSE);
    *out = v;
    return ok;
}

const char *tp_config_hf_key(const tp_node *e)
{
    if (!e || e->kind != N_CALL || e->nkids < 3 || e->kids[0]->kind != N_NAME || strcmp(e->kids[0]->name, "hf") ||
        e->kids[1]->kids[0]->kind != N_STR)
        return NULL;
    return e->kids[1]->kids[0]->str;
}

/* "'x' is 1e-05, a float; a size must be an integer", with a note where x
 * is defined when `what` is a config name defined in a file, naming the
 * config.json key when the float came from there. */
static void report_float(tp_config *c, tp_span at, const char *what, double f, const char *role)
{
    char real[TP_REAL_TEXT_MAX];
    tp_format_real(f, real);
    tp_diag *g = tp_diag_add(c->diags, TP_ERROR, at, "config", "'%s' is %s, a float; %s must be an integer",
                             what, real, role);
    const tp_cfg_entry *e = find(c, what);
    if (!e || e->span.file < 0 || (e->span.file == at.file && e->span.offset == at.offset))
        return;
    const char *key = tp_config_hf_key(e->expr);
    json_t *json = key && c->hf_json ? json_object_get((json_t *)c->hf_json, key) : NULL;
    if (json_is_real(json))
        tp_diag_note_at(g, e->span, "'%s' is defined here, as \"%s\" of %s (a JSON real)", what, key, c->hf_path);
    else
        tp_diag_note_at(g, e->span, "'%s' is defined here", what);
}

/* "'kind' is "llama", a string ("model_type" of config.json); <need>",
 * naming the config.json key when the string came from one. */
static bool report_string(tp_config *c, tp_span at, const char *what, const char *s, const char *need)
{
    const tp_cfg_entry *e = find(c, what);
    const char *key = e ? tp_config_hf_key(e->expr) : NULL;
    if (key && c->hf_json)
        tp_diag_add(c->diags, TP_ERROR, at, "config", "'%s' is \"%s\", a string (\"%s\" of %s); %s", what, s, key,
                    c->hf_path, need);
    else
        tp_diag_add(c->diags, TP_ERROR, at, "config", "'%s' is \"%s\", a string; %s", what, s, need);
    return false;
}

/* Expression e evaluated to the float f where `role` needs an integer. */
static bool reject_float(tp_config *c, const tp_node *e, double f, const char *role)
{
    char *text = tp_expr_text(e);
    report_float(c, e->span, text, f, role);
    free(text);
    return false;
}

bool tp_config_get(tp_config *c, const char *name, tp_span use, int64_t *out)
{
    tp_cfg_value v;
    if (!tp_config_value(c, name, use, &v))
        return false;
    if (v.s)
        return report_string(c, use.file >= 0 ? use : find(c, name)->span, name, v.s, "it must be an integer");
    if (v.is_float) {
        report_float(c, use.file >= 0 ? use : find(c, name)->span, name, v.f, "it");
        return false;
    }
    *out = v.i;
    return true;
}

static bool err_at(tp_config *c, const tp_node *e, const char *msg)
{
    tp_diag_add(c->diags, TP_ERROR, e->span, "config", "%s", msg);
    return false;
}

/* A number or boolean: a string takes part in no arithmetic. */
static bool eval_number(tp_config *c, const tp_node *e, tp_cfg_value *out)
{
    if (!tp_eval_value(c, e, out))
        return false;
    if (!out->s)
        return true;
    char *text = tp_expr_text(e);
    report_string(c, e->span, text, out->s, "a number is needed here");
    free(text);
    return false;
}

/* An integer where `role` ("a size", "it") must be one. */
static bool eval_integer(tp_config *c, const tp_node *e, const char *role, int64_t *out)
{
    tp_cfg_value v;
    if (!eval_number(c, e, &v))
        return false;
    if (v.is_float)
        return reject_float(c, e, v.f, role);
    *out = v.i;
    return true;
}

bool tp_eval_int(tp_config *c, const tp_node *e, int64_t *out)
{
    return eval_integer(c, e, "it", out);
}

bool tp_eval_size(tp_config *c, const tp_node *e, int64_t *out)
{
    if (!eval_integer(c, e, "a size", out))
        return false;
    if (*out <= 0) {
        char *t = tp_expr_text(e);
        tp_diag_add(c->diags, TP_ERROR, e->span, "config", "size '%s' is %lld; it must be positive",
                    t, (long long)*out);
        free(t);
        return false;
    }
    return true;
}

/* A JSON null comes back as it is: hf() decides what it means. */
void *tp_config_hf_lookup(const tp_config *c, const char *key)
{
    json_t *v = (json_t *)c->hf_json;
    char *path = tp_xstrdup(key), *rest = path;
    for (char *step = strsep(&rest, "."); v && step; step = strsep(&rest, "."))
        v = json_is_object(v) ? json_object_get(v, step) : NULL;
    free(path);
    return v;
}

/* The keyword argument `name` (standalone= or null=) of an hf() call, or NULL. */
static const tp_node *hf_keyword(const tp_node *call, const char *name)
{
    for (int i = 3; i < call->nkids; i++)
        if (call->kids[i]->name && !strcmp(call->kids[i]->name, name))
            return call->kids[i]->kids[0];
    return NULL;
}

/* hf("key", default) with only standalone= and null= as keywords, each once. */
static bool hf_call_well_formed(const tp_node *call)
{
    if (call->nkids < 3 || call->kids[1]->name || call->kids[2]->name || call->kids[1]->kids[0]->kind != N_STR)
        return false;
    for (int i = 3; i < call->nkids; i++) {
        const char *kw = call->kids[i]->name;
        if (!kw || (strcmp(kw, "standalone") && strcmp(kw, "null")) || hf_keyword(call, kw) != call->kids[i]->kids[0])
            return false;
    }
    return true;
}

/* hf("key", default[, standalone=value][, null=value]): the value of key in
 * --hf-config ("a.b" reads member b of object a), else default, which is
 * Hugging Face's own default for an absent key, and for a null one unless
 * null= says what HF makes of null (Mistral's sliding_window defaults to
 * 4096, and null turns it off). Without --hf-config, standalone= (when
 * given) is the model file's value instead: a small config that needs no
 * config.json.
 * A JSON integer stays an integer and a real is a float: a float context
 * takes either (rope_theta 10000 is 10000.0), an integer context rejects
 * the float where it is used. A string stays a string, for the arguments
 * that name a choice (rope's scaling). */
static bool eval_hf(tp_config *c, const tp_node *call, tp_cfg_value *out)
{
    if (!hf_call_well_formed(call))
        return err_at(c, call, "hf() takes a key string, Hugging Face's default and optionally the value "
                               "without a config.json and the value of a JSON null: "
                               "hf(\"num_key_value_heads\", 8, standalone=8, null=heads)");
    if (!c->hf_json)
        return tp_eval_value(c, hf_keyword(call, "standalone") ? hf_keyword(call, "standalone")
                                                                : call->kids[2]->kids[0], out);
    const char *key = call->kids[1]->kids[0]->str;
    json_t *v = tp_config_hf_lookup(c, key);
    if (json_is_null(v) && hf_keyword(call, "null"))
        return tp_eval_value(c, hf_keyword(call, "null"), out);
    if (!v || json_is_null(v))
        return tp_eval_value(c, call->kids[2]->kids[0], out);
    if (json_is_integer(v)) { *out = int_value(json_integer_value(v)); return true; }
    if (json_is_real(v)) { *out = float_value(json_real_value(v)); return true; }
    if (json_is_boolean(v)) { *out = int_value(json_is_true(v)); return true; }
    if (json_is_string(v)) { *out = string_value(json_string_value(v)); return true; }
    tp_diag_add(c->diags, TP_ERROR, call->span, "config",
                "%s: \"%s\" must be a number, a boolean or a string", c->hf_path, key);
    return false;
}

/* min() and max() compare integers exactly and anything else as doubles,
 * and give the chosen operand as it is, as Python does. */
static tp_cfg_value min_max(tp_cfg_value a, tp_cfg_value b, bool want_max)
{
    bool a_less = a.is_float || b.is_float ? tp_cfg_real(a) < tp_cfg_real(b) : a.i < b.i;
    return a_less == want_max ? b : a;
}

static bool eval_round_up(tp_config *c, const tp_node *e, const tp_cfg_value *a, tp_cfg_value *out)
{
    for (int i = 0; i < 2; i++)
        if (a[i].is_float)
            return reject_float(c, e->kids[i + 1]->kids[0], a[i].f, "an argument of round_up()");
    if (a[1].i <= 0)
        return err_at(c, e, "round_up() needs a positive multiple");
    int64_t r;
    if (__builtin_add_overflow(a[0].i, a[1].i - 1, &r))
        return err_at(c, e, "integer overflow");
    *out = int_value(r / a[1].i * a[1].i);
    return true;
}

static bool eval_call(tp_config *c, const tp_node *e, tp_cfg_value *out)
{
    const tp_node *callee = e->kids[0];
    if (callee->kind != N_NAME)
        return err_at(c, e, "only hf(), round_up(), min() and max() can be called here");
    if (!strcmp(callee->name, "hf"))
        return eval_hf(c, e, out);
    tp_cfg_value a[2];
    if (e->nkids != 3)
        return err_at(c, e, "expected two arguments");
    for (int i = 0; i < 2; i++)
        if (!eval_number(c, e->kids[i + 1]->kids[0], &a[i]))
            return false;
    if (!strcmp(callee->name, "min")) { *out = min_max(a[0], a[1], false); return true; }
    if (!strcmp(callee->name, "max")) { *out = min_max(a[0], a[1], true); return true; }
    if (!strcmp(callee->name, "round_up"))
        return eval_round_up(c, e, a, out);
    return err_at(c, e, "only hf(), round_up(), min() and max() can be called here");
}

static bool int_binop(tp_config *c, const tp_node *e, int64_t a, int64_t b, int64_t *out)
{
    switch (e->op) {
    case '+': if (__builtin_add_overflow(a, b, out)) return err_at(c, e, "integer overflow"); return true;
    case '-': if (__builtin_sub_overflow(a, b, out)) return err_at(c, e, "integer overflow"); return true;
    case '*': if (__builtin_mul_overflow(a, b, out)) return err_at(c, e, "integer overflow"); return true;
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

/* + - * / with a float operand, as in Python. */
static bool float_binop(tp_config *c, const tp_node *e, double a, double b, double *out)
{
    switch (e->op) {
    case '+': *out = a + b; break;
    case '-': *out = a - b; break;
    case '*': *out = a * b; break;
    case '/':
        if (b == 0)
            return err_at(c, e, "division by zero");
        *out = a / b;
        break;
    default: return err_at(c, e, "unsupported operator");
    }
    if (!isfinite(*out))
        return err_at(c, e, "float overflow");
    return true;
}

/* a == b, a != b: strings by their text, numbers by value (1 == 1.0, as
 * in Python); a string never equals a number. */
static bool eval_equality(tp_config *c, const tp_node *e, tp_cfg_value *out)
{
    tp_cfg_value a, b;
    if (!tp_eval_value(c, e->kids[0], &a) || !tp_eval_value(c, e->kids[1], &b))
        return false;
    bool eq;
    if (a.s || b.s)
        eq = a.s && b.s && !strcmp(a.s, b.s);
    else if (!a.is_float && !b.is_float)
        eq = a.i == b.i;
    else
        eq = tp_cfg_real(a) == tp_cfg_real(b);
    *out = int_value(eq == (e->op == 'E'));
    return true;
}

/* a ** b: an integer for integers and b >= 0, else a float, as in Python. */
static bool eval_power(tp_config *c, const tp_node *e, tp_cfg_value a, tp_cfg_value b, tp_cfg_value *out)
{
    if (!a.is_float && !b.is_float && b.i >= 0) {
        /* |a| >= 2 overflows within 63 steps; 0, 1 and -1 are settled at once */
        int64_t r = a.i == -1 && b.i % 2 ? -1 : 1;
        for (int64_t k = 0; k < b.i && a.i != 1 && a.i != -1 && r != 0; k++)
            if (__builtin_mul_overflow(r, a.i, &r))
                return err_at(c, e, "integer overflow");
        *out = int_value(r);
        return true;
    }
    double x = tp_cfg_real(a), y = tp_cfg_real(b);
    if (x == 0 && y < 0)
        return err_at(c, e, "division by zero");
    if (x < 0 && y != floor(y))
        return err_at(c, e, "a negative number to a fractional power is not a real number");
    *out = float_value(pow(x, y));
    if (!isfinite(out->f))
        return err_at(c, e, "float overflow");
    return true;
}

static bool eval_binop(tp_config *c, const tp_node *e, tp_cfg_value *out)
{
    tp_cfg_value a, b;
    if (e->op == 'E' || e->op == 'N')
        return eval_equality(c, e, out);
    if (!eval_number(c, e->kids[0], &a))
        return false;
    if (e->op == 'A' && !truthy(a)) { *out = int_value(0); return true; }   /* short-circuit and/or */
    if (e->op == 'O' && truthy(a)) { *out = int_value(1); return true; }
    if (!eval_number(c, e->kids[1], &b))
        return false;
    if (e->op == 'A' || e->op == 'O') { *out = int_value(truthy(b)); return true; }
    if (e->op == 'P')
        return eval_power(c, e, a, b, out);
    /* // and % compute sizes and padding, where a float is a mistake */
    if ((e->op == 'f' || e->op == '%') && (a.is_float || b.is_float))
        return reject_float(c, e->kids[a.is_float ? 0 : 1], a.is_float ? a.f : b.f,
                            e->op == 'f' ? "an operand of //" : "an operand of %");
    if (a.is_float || b.is_float) {
        *out = float_value(0);
        return float_binop(c, e, tp_cfg_real(a), tp_cfg_real(b), &out->f);
    }
    *out = int_value(0);
    return int_binop(c, e, a.i, b.i, &out->i);
}

static bool eval_neg(tp_config *c, const tp_node *e, tp_cfg_value *out)
{
    if (!eval_number(c, e->kids[0], out))
        return false;
    if (out->is_float) {
        out->f = -out->f;
        return true;
    }
    if (out->i == INT64_MIN)
        return err_at(c, e, "integer overflow");
    out->i = -out->i;
    return true;
}

bool tp_eval_value(tp_config *c, const tp_node *e, tp_cfg_value *out)
{
    switch (e->kind) {
    case N_INT: *out = int_value(e->ival); return true;
    case N_FLOAT: *out = float_value(e->fval); return true;
    case N_TRUE: *out = int_value(1); return true;
    case N_FALSE: *out = int_value(0); return true;
    case N_STR: *out = string_value(e->str); return true;
    case N_NAME: return tp_config_value(c, e->name, e->span, out);
    case N_NEG: return eval_neg(c, e, out);
    case N_NOT:
        if (!eval_number(c, e->kids[0], out)) return false;
        *out = int_value(!truthy(*out));
        return true;
    case N_COND: {
        tp_cfg_value cond;
        if (!eval_number(c, e->kids[1], &cond)) return false;
        return tp_eval_value(c, e->kids[truthy(cond) ? 0 : 2], out);
    }
    case N_BINOP: return eval_binop(c, e, out);
    case N_CALL: return eval_call(c, e, out);
    default: return err_at(c, e, "expected a number, boolean or string expression");
    }
}

char *tp_expr_text(const tp_node *e)
{
    switch (e->kind) {
    case N_INT: return tp_xasprintf("%lld", (long long)e->ival);
    case N_FLOAT: {
        char real[TP_REAL_TEXT_MAX];
        tp_format_real(e->fval, real);
        return tp_xstrdup(real);
    }
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

tp_setting *tp_config_settings(const tp_config *c, int *n)
{
    /* bind() keeps one entry per name: its first place, its last value */
    tp_setting *out = tp_xcalloc((size_t)c->count + 1, sizeof *out);
    *n = c->count;
    for (int i = 0; i < c->count; i++) {
        const tp_cfg_entry *v = &c->items[i];
        tp_setting *o = &out[i];
        o->name = v->name;
        if (v->state != 2)
            o->kind = TP_SETTING_NULL;
        else if (v->is_bool)
            o->kind = TP_SETTING_BOOL, o->i = v->value;
        else if (v->str)
            o->kind = TP_SETTING_STR, o->str = v->str;
        else if (v->is_float)
            o->kind = TP_SETTING_REAL, o->real = v->real;
        else
            o->kind = TP_SETTING_INT, o->i = v->value;
    }
    return out;
}
