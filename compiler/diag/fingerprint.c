/* fingerprint.c: stable finding identities (see fingerprint.h). */
#include "compiler/diag/fingerprint.h"

#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/xalloc.h"

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The message without positions: a run of digits after "line ", or on
 * either side of a ':' between digits, is dropped. */
static char *without_positions(const char *m)
{
    tp_buf b;
    tp_buf_init(&b);
    for (const char *p = m; *p;) {
        if (!is_digit(*p)) {
            tp_buf_append_n(&b, p++, 1);
            continue;
        }
        const char *q = p;
        while (is_digit(*q))
            q++;
        int after_line = p - m >= 5 && strncmp(p - 5, "line ", 5) == 0;
        int before_col = q[0] == ':' && is_digit(q[1]);
        int after_colon = p > m && p[-1] == ':' && p - m >= 2 && is_digit(p[-2]);
        if (!(after_line || before_col || after_colon))
            tp_buf_append_n(&b, p, (size_t)(q - p));
        p = q;
    }
    tp_buf_append(&b, "");
    return tp_buf_take(&b);
}

/* The span's text with every run of blanks one space. */
static uint64_t hash_span_text(uint64_t h, const tp_diag *g, const tp_sources *src)
{
    tp_span sp = g->span;
    if (sp.file < 0 || sp.file >= src->count || sp.offset < 0 || sp.length <= 0 ||
        (size_t)sp.offset + (size_t)sp.length > src->files[sp.file].size)
        return h;
    const char *p = src->files[sp.file].text + sp.offset, *end = p + sp.length;
    int blank = 0;
    for (; p < end; p++) {
        if (is_blank(*p)) {
            blank = 1;
            continue;
        }
        if (blank)
            h = tp_hash(h, " ", 1);
        blank = 0;
        h = tp_hash(h, p, 1);
    }
    return h;
}

uint64_t tp_fingerprint(const tp_diag *g, const tp_sources *src, const char *where, const char *plan)
{
    uint64_t h = tp_hash(TP_HASH_INIT, g->check, strlen(g->check) + 1);
    h = tp_hash(h, where, strlen(where) + 1);
    h = tp_hash(h, plan, strlen(plan) + 1);
    h = hash_span_text(h, g, src);
    h = tp_hash(h, "", 1);
    char *message = without_positions(g->message);
    h = tp_hash(h, message, strlen(message));
    free(message);
    return h;
}
