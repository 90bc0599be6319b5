/* toml.h: reading the TOML files tpcc's settings live in (.tpcc.toml,
 * pyproject.toml; settings.h).
 *
 * A pyproject.toml holds other tools' tables too, and tpcc must read past
 * them, so the reader takes TOML 1.0's syntax: comments, [table] and
 * [[array.of.tables]] headers, bare, quoted and dotted keys, basic and
 * literal strings (multi-line too), integers (decimal, 0x, 0o, 0b), floats
 * (inf, nan), booleans, arrays and inline tables. It refuses what tpcc's
 * settings never need and TOML files seldom hold (offset date-times, local
 * dates and times) and anything TOML does not allow (a key set twice, a
 * table defined twice, an inline table extended, bytes that are not
 * UTF-8, a NUL), each with its line and column. Nesting deeper than
 * TP_TOML_MAX_DEPTH is refused too, so no input can exhaust the stack. */
#ifndef TPCC_TOML_H
#define TPCC_TOML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TP_TOML_MAX_DEPTH = 64 };

typedef enum tp_toml_kind {
    TP_TOML_STRING, TP_TOML_INTEGER, TP_TOML_FLOAT, TP_TOML_BOOLEAN, TP_TOML_ARRAY, TP_TOML_TABLE
} tp_toml_kind;

struct tp_map;

typedef struct tp_toml tp_toml;
struct tp_toml {
    tp_toml_kind kind;
    int line, col;              /* where the value starts (a table: its header, or the key that made it) */
    int key_line, key_col;      /* a table's member: where its key is */
    char *string;               /* TP_TOML_STRING, UTF-8 without NUL */
    int64_t integer;
    double real;
    bool boolean;
    char **keys;                /* TP_TOML_TABLE: keys[i] names items[i] */
    tp_toml **items;            /* array elements, table members, in the file's order */
    int count, cap;
    struct tp_map *index;       /* a table's keys to their items' indices: no lookup is a scan */
    bool defined;               /* a table made by a header or inline, not only named on the way to one */
    bool sealed;                /* an inline table or an array value: nothing adds to it later */
};

/* The root table of text (size bytes), or NULL with "LINE:COL: what is
 * wrong" in err. */
tp_toml *tp_toml_parse(const char *text, size_t size, char *err, size_t errlen);
void tp_toml_free(tp_toml *t);

/* The member of table t named key, or NULL. */
const tp_toml *tp_toml_get(const tp_toml *t, const char *key);

/* "a string", "an integer", ...: for messages. */
const char *tp_toml_kind_name(tp_toml_kind kind);

#endif /* TPCC_TOML_H */
