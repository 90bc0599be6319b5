/* toml.c: a TOML 1.0 reader (see toml.h), recursive descent over the
 * text with the line and column of the cursor kept for every message. */
#include "compiler/driver/toml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/map.h"
#include "util/utf8.h"
#include "util/xalloc.h"

typedef struct reader {
    const char *p, *end;
    int line;
    const char *line_start;
    int depth;                  /* arrays and inline tables open around the cursor */
    bool failed;
    char *err;
    size_t errlen;
} reader;

typedef struct pos {
    int line, col;
} pos;

/* ---- the tree ---- */

static tp_toml *new_value(tp_toml_kind kind, pos at)
{
    tp_toml *v = tp_xcalloc(1, sizeof *v);
    v->kind = kind;
    v->line = at.line;
    v->col = at.col;
    return v;
}

static void push(tp_toml *parent, const char *key, tp_toml *v)
{
    if (parent->count == parent->cap) {
        parent->cap = parent->cap ? parent->cap * 2 : 8;
        parent->items = tp_xreallocarray(parent->items, (size_t)parent->cap, sizeof *parent->items);
        if (parent->kind == TP_TOML_TABLE)
            parent->keys = tp_xreallocarray(parent->keys, (size_t)parent->cap, sizeof *parent->keys);
    }
    if (parent->kind == TP_TOML_TABLE)
        parent->keys[parent->count] = tp_xstrdup(key);
    parent->items[parent->count++] = v;
}

static tp_toml *lookup(tp_toml *t, const char *key)
{
    int64_t i = t->index ? tp_map_gets(t->index, key) : -1;
    return i >= 0 ? t->items[i] : NULL;
}

static void add_member(tp_toml *t, const char *key, pos key_at, tp_toml *v)
{
    if (!t->index)
        t->index = tp_xcalloc(1, sizeof *t->index);
    tp_map_puts(t->index, key, t->count);
    v->key_line = key_at.line;
    v->key_col = key_at.col;
    push(t, key, v);
}

void tp_toml_free(tp_toml *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->count; i++) {
        tp_toml_free(t->items[i]);
        if (t->kind == TP_TOML_TABLE)
            free(t->keys[i]);
    }
    if (t->index)
        tp_map_free(t->index);
    free(t->index);
    free(t->string);
    free(t->keys);
    free(t->items);
    free(t);
}

const tp_toml *tp_toml_get(const tp_toml *t, const char *key)
{
    return t && t->kind == TP_TOML_TABLE ? lookup((tp_toml *)t, key) : NULL;
}

const char *tp_toml_kind_name(tp_toml_kind kind)
{
    switch (kind) {
    case TP_TOML_STRING: return "a string";
    case TP_TOML_INTEGER: return "an integer";
    case TP_TOML_FLOAT: return "a float";
    case TP_TOML_BOOLEAN: return "a boolean";
    case TP_TOML_ARRAY: return "an array";
    default: return "a table";
    }
}

/* ---- the cursor ---- */

static pos here(const reader *r)
{
    return (pos){r->line, (int)(r->p - r->line_start) + 1};
}

/* The first error wins: what follows it is noise. */
static tp_toml *fail_at(reader *r, pos at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tp_toml *fail_at(reader *r, pos at, const char *fmt, ...)
{
    if (r->failed)
        return NULL;
    r->failed = true;
    int n = snprintf(r->err, r->errlen, "%d:%d: ", at.line, at.col);
    if (n >= 0 && (size_t)n < r->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

static char peek(const reader *r)
{
    return r->p < r->end ? *r->p : '\0';
}

static bool starts(const reader *r, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(r->end - r->p) >= n && !memcmp(r->p, s, n);
}

static bool is_control(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7F;
}

static void skip_blanks(reader *r)
{
    while (peek(r) == ' ' || peek(r) == '\t')
        r->p++;
}

/* At '\n' or "\r\n": past it. */
static bool newline(reader *r)
{
    if (starts(r, "\r\n"))
        r->p++;
    if (peek(r) != '\n')
        return false;
    r->p++;
    r->line++;
    r->line_start = r->p;
    return true;
}

static bool at_newline(const reader *r)
{
    return peek(r) == '\n' || starts(r, "\r\n");
}

static void skip_comment(reader *r)
{
    if (peek(r) != '#')
        return;
    for (r->p++; r->p < r->end && !at_newline(r); r->p++)
        if (is_control((unsigned char)*r->p)) {
            fail_at(r, here(r), "a control character (0x%02X) in a comment", (unsigned char)*r->p);
            return;
        }
}

/* Blanks, comments and newlines, as between an array's elements. */
static void skip_space(reader *r)
{
    for (;;) {
        skip_blanks(r);
        skip_comment(r);
        if (r->failed || !newline(r))
            return;
    }
}

/* After a key/value pair or a header: only a comment may follow. */
static void end_of_line(reader *r, const char *after)
{
    skip_blanks(r);
    skip_comment(r);
    if (!r->failed && r->p < r->end && !newline(r))
        fail_at(r, here(r), "expected the end of the line after %s, found '%c'", after, peek(r));
}

/* ---- strings ---- */

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void append_utf8(tp_buf *b, unsigned long cp)
{
    char out[4];
    size_t n;
    if (cp < 0x80) {
        out[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    tp_buf_append_n(b, out, n);
}

/* At the '\\' of an escape in a basic string: its character into b. */
static void escape(reader *r, tp_buf *b)
{
    pos at = here(r);
    r->p++;
    char c = peek(r);
    const char *plain = strchr("btnfr\"\\", c);
    if (c && plain) {
        static const char meaning[] = "\b\t\n\f\r\"\\";
        tp_buf_append_n(b, &meaning[plain - "btnfr\"\\"], 1);
        r->p++;
        return;
    }
    int digits = c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (!digits) {
        fail_at(r, at, "'\\%c' is not an escape (TOML has \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX \\UXXXXXXXX)",
                c ? c : ' ');
        return;
    }
    r->p++;
    unsigned long cp = 0;
    for (int i = 0; i < digits; i++, r->p++) {
        int d = hex_digit(peek(r));
        if (d < 0) {
            fail_at(r, at, "\\%c takes %d hexadecimal digits", c, digits);
            return;
        }
        cp = cp * 16 + (unsigned long)d;
    }
    if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
        fail_at(r, at, "\\%c%0*lX is not a character a setting can hold", c, digits, cp);
        return;
    }
    append_utf8(b, cp);
}

/* A string of one line: "basic" (escapes) or 'literal'. */
static tp_toml *line_string(reader *r, bool basic)
{
    pos at = here(r);
    char quote = basic ? '"' : '\'';
    r->p++;
    tp_buf b;
    tp_buf_init(&b);
    while (!r->failed) {
        char c = peek(r);
        if (c == quote) {
            r->p++;
            break;
        }
        if (r->p >= r->end || at_newline(r))
            fail_at(r, at, "the string is not closed on its line (a string of several lines opens with %c%c%c)",
                    quote, quote, quote);
        else if (basic && c == '\\')
            escape(r, &b);
        else if (is_control((unsigned char)c))
            fail_at(r, here(r), "a control character (0x%02X) in a string: write it as an escape",
                    (unsigned char)c);
        else
            tp_buf_append_n(&b, r->p++, 1);
    }
    tp_toml *v = new_value(TP_TOML_STRING, at);
    v->string = tp_buf_take(&b);
    return v;
}

/* At a '\\' that only blanks follow on its line: past it, the line
 * break, and every blank and line break after it. */
static bool line_ending_backslash(reader *r)
{
    const char *after = r->p + 1;
    while (after < r->end && (*after == ' ' || *after == '\t'))
        after++;
    if (after >= r->end || (*after != '\n' && *after != '\r'))
        return false;
    r->p = after;
    while (newline(r) || peek(r) == ' ' || peek(r) == '\t')
        if (peek(r) == ' ' || peek(r) == '\t')
            r->p++;
    return true;
}

/* """basic""" or '''literal''' over several lines: a newline right after
 * the opening quotes is dropped; in a basic one a '\' at the end of a
 * line drops the line break and the blanks after it. */
static tp_toml *long_string(reader *r, bool basic)
{
    pos at = here(r);
    const char *close = basic ? "\"\"\"" : "'''";
    r->p += 3;
    newline(r);
    tp_buf b;
    tp_buf_init(&b);
    while (!r->failed) {
        if (starts(r, close)) {
            int quotes = 3;
            while (quotes < 6 && r->p + quotes < r->end && r->p[quotes] == close[0])
                quotes++;
            if (quotes > 5) {
                fail_at(r, here(r), "too many quotes in a row at the end of a string");
                break;
            }
            tp_buf_append_n(&b, r->p, (size_t)(quotes - 3));   /* one or two quotes before the closing ones */
            r->p += quotes;
            break;
        }
        if (r->p >= r->end) {
            fail_at(r, at, "the string that opens here is not closed (with %s)", close);
        } else if (newline(r)) {
            tp_buf_append(&b, "\n");
        } else if (basic && peek(r) == '\\' && !line_ending_backslash(r)) {
            escape(r, &b);
        } else if (is_control((unsigned char)peek(r))) {
            fail_at(r, here(r), "a control character (0x%02X) in a string: write it as an escape",
                    (unsigned char)peek(r));
        } else {
            tp_buf_append_n(&b, r->p++, 1);
        }
    }
    tp_toml *v = new_value(TP_TOML_STRING, at);
    v->string = tp_buf_take(&b);
    return v;
}

/* ---- keys ---- */

static bool is_bare_key_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

typedef struct key_path {
    char **parts;
    pos *at;
    int count;
} key_path;

static void key_path_free(key_path *k)
{
    for (int i = 0; i < k->count; i++)
        free(k->parts[i]);
    free(k->parts);
    free(k->at);
}

/* key = simple-key *( '.' simple-key ), blanks around the dots */
static void read_key(reader *r, key_path *k)
{
    memset(k, 0, sizeof *k);
    for (;;) {
        skip_blanks(r);
        pos at = here(r);
        char *part = NULL;
        if ((peek(r) == '"' || peek(r) == '\'') && !starts(r, "\"\"\"") && !starts(r, "'''")) {
            tp_toml *s = line_string(r, peek(r) == '"');
            part = s->string;
            s->string = NULL;
            tp_toml_free(s);
        } else {
            const char *start = r->p;
            while (is_bare_key_char(peek(r)))
                r->p++;
            if (r->p == start) {
                fail_at(r, at, "expected a key (letters, digits, '_', '-', or a quoted string)%s",
                        peek(r) == '=' ? ", found '='" : "");
                return;
            }
            part = tp_xstrndup(start, (size_t)(r->p - start));
        }
        if (k->count == TP_TOML_MAX_DEPTH) {
            free(part);
            fail_at(r, at, "a key of more than %d parts", TP_TOML_MAX_DEPTH);
            return;
        }
        k->parts = tp_xreallocarray(k->parts, (size_t)k->count + 1, sizeof *k->parts);
        k->at = tp_xreallocarray(k->at, (size_t)k->count + 1, sizeof *k->at);
        k->parts[k->count] = part;
        k->at[k->count++] = at;
        if (r->failed)
            return;
        skip_blanks(r);
        if (peek(r) != '.')
            return;
        r->p++;
    }
}

/* The table `key` names inside t, made (not yet defined) when it is not
 * there; through a header, an array of tables stands for its last one. */
static tp_toml *descend(reader *r, tp_toml *t, const char *key, pos at, bool header)
{
    tp_toml *v = lookup(t, key);
    if (!v) {
        v = new_value(TP_TOML_TABLE, at);
        add_member(t, key, at, v);
        return v;
    }
    if (v->kind == TP_TOML_TABLE && !v->sealed)
        return v;
    if (v->kind == TP_TOML_ARRAY && !v->sealed && header)
        return v->items[v->count - 1];
    return fail_at(r, at, "'%s' is %s (line %d), not a table that can be added to", key,
                   v->sealed && v->kind == TP_TOML_TABLE ? "an inline table" : tp_toml_kind_name(v->kind), v->line);
}

/* The table k's parts but the last lead to from t. */
static tp_toml *parent_of(reader *r, tp_toml *t, const key_path *k, bool header)
{
    for (int i = 0; t && i + 1 < k->count; i++)
        t = descend(r, t, k->parts[i], k->at[i], header);
    return t;
}

/* ---- values ---- */

static tp_toml *value(reader *r);

static tp_toml *keyval(reader *r, tp_toml *t)
{
    key_path k;
    read_key(r, &k);
    tp_toml *parent = r->failed ? NULL : parent_of(r, t, &k, false);
    if (parent) {
        const char *last = k.parts[k.count - 1];
        pos at = k.at[k.count - 1];
        tp_toml *before = lookup(parent, last);
        skip_blanks(r);
        if (before)
            fail_at(r, at, "'%s' is set twice (first on line %d)", last, before->key_line ? before->key_line
                                                                                     : before->line);
        else if (peek(r) != '=')
            fail_at(r, here(r), "expected '=' after the key '%s'", last);
        else {
            r->p++;
            skip_blanks(r);
            tp_toml *v = value(r);
            if (v)
                add_member(parent, last, at, v);
        }
    }
    key_path_free(&k);
    return r->failed ? NULL : t;
}

static tp_toml *array(reader *r)
{
    tp_toml *a = new_value(TP_TOML_ARRAY, here(r));
    a->sealed = true;
    r->p++;
    for (;;) {
        skip_space(r);
        if (r->failed || peek(r) == ']')
            break;
        tp_toml *v = value(r);
        if (!v)
            break;
        push(a, NULL, v);
        skip_space(r);
        if (peek(r) == ',')
            r->p++;
        else if (peek(r) != ']') {
            fail_at(r, here(r), "expected ',' or ']' after an element of the array opened on line %d", a->line);
            break;
        }
    }
    if (r->failed) {
        tp_toml_free(a);
        return NULL;
    }
    r->p++;
    return a;
}

static tp_toml *inline_table(reader *r)
{
    tp_toml *t = new_value(TP_TOML_TABLE, here(r));
    t->defined = true;
    r->p++;
    skip_blanks(r);
    bool first = true;
    while (!r->failed && (!first || peek(r) != '}')) {
        first = false;
        keyval(r, t);
        skip_blanks(r);
        if (r->failed)
            break;
        if (peek(r) == '}')
            break;
        if (peek(r) != ',') {
            fail_at(r, here(r), "expected ',' or '}' in the inline table (which is all on one line)");
            break;
        }
        r->p++;
        skip_blanks(r);
        if (peek(r) == '}')
            fail_at(r, here(r), "a ',' before '}': an inline table has no trailing comma");
    }
    if (r->failed) {
        tp_toml_free(t);
        return NULL;
    }
    r->p++;
    t->sealed = true;
    return t;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Digits with single '_' between them, in the given base; the copy
 * without the underscores into b. */
static bool digits(const char **s, const char *end, int base, tp_buf *b)
{
    const char *start = *s;
    for (; *s < end; (*s)++) {
        char c = **s;
        int d = hex_digit(c);
        if (d >= 0 && d < base && !(base <= 10 && !is_digit(c)))
            tp_buf_append_n(b, *s, 1);
        else if (c == '_' && *s > start && (*s)[-1] != '_' && *s + 1 < end && hex_digit((*s)[1]) >= 0)
            continue;
        else
            break;
    }
    return *s > start && (*s)[-1] != '_';
}

/* An integer, a float, inf or nan: the token from `start` to `end`. */
static tp_toml *number(reader *r, const char *start, const char *end, pos at)
{
    const char *s = start;
    bool negative = *s == '-';
    bool sign = *s == '+' || *s == '-';
    s += sign;
    if (end - s == 3 && (!memcmp(s, "inf", 3) || !memcmp(s, "nan", 3))) {
        tp_toml *v = new_value(TP_TOML_FLOAT, at);
        v->real = s[0] == 'i' ? (negative ? -1.0 / 0.0 : 1.0 / 0.0) : 0.0 / 0.0;
        return v;
    }
    int base = 10;
    if (!sign && end - s > 2 && s[0] == '0' && strchr("xob", s[1]))
        base = s[1] == 'x' ? 16 : s[1] == 'o' ? 8 : 2;
    s += base == 10 ? 0 : 2;
    tp_buf b;
    tp_buf_init(&b);
    if (negative)
        tp_buf_append(&b, "-");
    const char *int_start = s;
    bool ok = digits(&s, end, base, &b);
    bool real = false;
    if (ok && base == 10 && int_start[0] == '0' && s - int_start > 1)
        ok = false;                         /* no leading zeros */
    if (ok && base == 10 && s < end && *s == '.') {
        tp_buf_append(&b, ".");
        s++;
        ok = digits(&s, end, 10, &b);
        real = true;
    }
    if (ok && base == 10 && s < end && (*s == 'e' || *s == 'E')) {
        tp_buf_append(&b, "e");
        s++;
        if (s < end && (*s == '+' || *s == '-'))
            tp_buf_append_n(&b, s++, 1);
        ok = digits(&s, end, 10, &b);
        real = true;
    }
    tp_toml *v = NULL;
    if (!ok || s != end) {
        fail_at(r, at, "'%.*s' is not a value (a string is quoted: \"...\")", (int)(end - start), start);
    } else if (real) {
        v = new_value(TP_TOML_FLOAT, at);
        v->real = strtod(b.data, NULL);
    } else {
        errno = 0;
        long long n = strtoll(b.data, NULL, base);
        if (errno == ERANGE)
            fail_at(r, at, "%.*s does not fit in 64 bits", (int)(end - start), start);
        else {
            v = new_value(TP_TOML_INTEGER, at);
            v->integer = n;
        }
    }
    tp_buf_free(&b);
    return v;
}

/* 1979-05-27 or 07:32:00 */
static bool looks_like_date(const char *s, const char *end)
{
    int n = 0;
    while (s + n < end && is_digit(s[n]))
        n++;
    return (n == 4 && s + n < end && s[n] == '-') || (n == 2 && s + n < end && s[n] == ':');
}

static tp_toml *value(reader *r)
{
    pos at = here(r);
    if (r->depth >= TP_TOML_MAX_DEPTH)
        return fail_at(r, at, "arrays and inline tables nested more than %d deep", TP_TOML_MAX_DEPTH);
    char c = peek(r);
    tp_toml *v = NULL;
    r->depth++;
    if (c == '"' || c == '\'')
        v = starts(r, c == '"' ? "\"\"\"" : "'''") ? long_string(r, c == '"') : line_string(r, c == '"');
    else if (c == '[')
        v = array(r);
    else if (c == '{')
        v = inline_table(r);
    else if (starts(r, "true") || starts(r, "false")) {
        v = new_value(TP_TOML_BOOLEAN, at);
        v->boolean = c == 't';
        r->p += v->boolean ? 4 : 5;
    } else {
        const char *start = r->p;
        while (is_bare_key_char(peek(r)) || peek(r) == '+' || peek(r) == '.' || peek(r) == ':')
            r->p++;
        if (r->p == start)
            fail_at(r, at, "expected a value (a string, a number, true, false, [array] or {table})");
        else if (looks_like_date(start, r->p))
            fail_at(r, at, "dates and times are not values tpcc reads: quote it to make it a string");
        else
            v = number(r, start, r->p, at);
    }
    r->depth--;
    if (r->failed) {
        tp_toml_free(v);
        return NULL;
    }
    return v;
}

/* ---- headers and the file ---- */

/* [a.b] or [[a.b]]: the table the lines below it fill */
static tp_toml *header(reader *r, tp_toml *root)
{
    pos at = here(r);
    bool array_of_tables = starts(r, "[[");
    r->p += array_of_tables ? 2 : 1;
    key_path k;
    read_key(r, &k);
    tp_toml *parent = r->failed ? NULL : parent_of(r, root, &k, true);
    tp_toml *t = NULL;
    skip_blanks(r);
    if (parent && !starts(r, array_of_tables ? "]]" : "]")) {
        fail_at(r, here(r), "expected '%s' to close the header", array_of_tables ? "]]" : "]");
    } else if (parent) {
        r->p += array_of_tables ? 2 : 1;
        const char *last = k.parts[k.count - 1];
        tp_toml *before = lookup(parent, last);
        if (array_of_tables && (!before || (before->kind == TP_TOML_ARRAY && !before->sealed))) {
            if (!before) {
                before = new_value(TP_TOML_ARRAY, at);
                add_member(parent, last, k.at[k.count - 1], before);
            }
            t = new_value(TP_TOML_TABLE, at);
            t->defined = true;
            push(before, NULL, t);
        } else if (!array_of_tables && !before) {
            t = new_value(TP_TOML_TABLE, at);
            t->defined = true;
            add_member(parent, last, k.at[k.count - 1], t);
        } else if (!array_of_tables && before->kind == TP_TOML_TABLE && !before->defined && !before->sealed) {
            t = before;
            t->defined = true;
        } else if (before->kind == TP_TOML_TABLE || (before->kind == TP_TOML_ARRAY && !before->sealed)) {
            fail_at(r, at, "'%s' is defined already (line %d)", last, before->line);
        } else {
            fail_at(r, at, "'%s' is %s (line %d), not a table", last, tp_toml_kind_name(before->kind), before->line);
        }
    }
    key_path_free(&k);
    return t;
}

/* Every byte is UTF-8, and none is a NUL. */
static bool check_text(reader *r)
{
    for (const char *s = r->p; s < r->end;) {
        int n = *s ? tp_utf8_sequence((const unsigned char *)s) : 0;
        if (n == 0) {
            const char *p = r->p;
            int line = 1;
            const char *line_start = p;
            for (; p < s; p++)
                if (*p == '\n') {
                    line++;
                    line_start = p + 1;
                }
            fail_at(r, (pos){line, (int)(s - line_start) + 1}, "%s", *s ? "a byte that is not UTF-8" : "a NUL byte");
            return false;
        }
        s += n;
    }
    return true;
}

tp_toml *tp_toml_parse(const char *text, size_t size, char *err, size_t errlen)
{
    /* a copy that ends in a NUL: tp_utf8_sequence stops at one */
    char *copy = tp_xmalloc(size + 1);
    memcpy(copy, text, size);
    copy[size] = '\0';
    reader r = {copy, copy + size, 1, copy, 0, false, err, errlen};
    tp_toml *root = new_value(TP_TOML_TABLE, here(&r));
    root->defined = true;
    tp_toml *table = check_text(&r) ? root : NULL;
    while (table && !r.failed) {
        skip_blanks(&r);
        if (r.p >= r.end)
            break;
        if (peek(&r) == '#' || at_newline(&r)) {
            skip_comment(&r);
            newline(&r);
            continue;
        }
        if (peek(&r) == '[') {
            table = header(&r, root);
            end_of_line(&r, "the header");
        } else {
            keyval(&r, table);
            end_of_line(&r, "the value");
        }
    }
    free(copy);
    if (r.failed) {
        tp_toml_free(root);
        return NULL;
    }
    return root;
}
