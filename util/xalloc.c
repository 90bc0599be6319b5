/* xalloc.c: see xalloc.h for why running out of memory aborts. */
#define _POSIX_C_SOURCE 200809L   /* strnlen */

#include "util/xalloc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char *program_name = "tpcc";

void tp_set_program_name(const char *name)
{
    program_name = name;
}

/* The single exit point of the process outside main(): "<program>: <why>"
 * on stderr, then abort. fputs may fail too, but there is nothing left to
 * do about it: we abort either way. */
static _Noreturn void die(const char *why)
{
    fputs(program_name, stderr);
    fputs(": ", stderr);
    fputs(why, stderr);
    fputs("\n", stderr);
    abort();
}

void tp_out_of_memory(void)
{
    die("out of memory");
}

void *tp_xcheck(void *p)
{
    if (!p)
        tp_out_of_memory();
    return p;
}

/* malloc(0) may legally return NULL; asking for one byte keeps "NULL means
 * failure" true for every size. */
void *tp_xmalloc(size_t size)
{
    return tp_xcheck(malloc(size ? size : 1));
}

void *tp_xcalloc(size_t count, size_t size)
{
    if (count == 0 || size == 0)
        count = size = 1;
    return tp_xcheck(calloc(count, size));
}

void *tp_xrealloc(void *p, size_t size)
{
    return tp_xcheck(realloc(p, size ? size : 1));
}

void *tp_xreallocarray(void *p, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        tp_out_of_memory();
    return tp_xrealloc(p, count * size);
}

void *tp_xgrow(void *p, int count, int *cap, size_t size, int first)
{
    if (count < *cap)
        return p;
    if (*cap > INT_MAX / 2)
        tp_out_of_memory();
    *cap = *cap ? 2 * *cap : first;
    return tp_xreallocarray(p, (size_t)*cap, size);
}

char *tp_xstrdup(const char *s)
{
    return tp_xstrndup(s, strlen(s));
}

char *tp_xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *copy = tp_xmalloc(len + 1);
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

char *tp_xvasprintf(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) {
        /* Only an invalid format or a result over INT_MAX bytes gets
         * here: a programming error, as unrecoverable as no memory. */
        va_end(again);
        die("cannot format message");
    }
    char *s = tp_xmalloc((size_t)n + 1);
    int m = vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    if (m != n)
        die("cannot format message");
    return s;
}

char *tp_xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = tp_xvasprintf(fmt, ap);
    va_end(ap);
    return s;
}

void tp_buf_init(tp_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

/* Make room for `extra` more bytes plus the terminating NUL. Doubling keeps
 * appends amortised O(1). */
static void buf_reserve(tp_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        tp_out_of_memory();
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = tp_xrealloc(b->data, cap);
    b->cap = cap;
}

void tp_buf_append_n(tp_buf *b, const char *s, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void tp_buf_append(tp_buf *b, const char *s)
{
    tp_buf_append_n(b, s, strlen(s));
}

void tp_buf_append_char(tp_buf *b, char c, size_t count)
{
    buf_reserve(b, count);
    memset(b->data + b->len, c, count);
    b->len += count;
    b->data[b->len] = '\0';
}

void tp_buf_appendf(tp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = tp_xvasprintf(fmt, ap);
    va_end(ap);
    tp_buf_append(b, s);
    free(s);
}

void tp_buf_free(tp_buf *b)
{
    free(b->data);
    tp_buf_init(b);
}

char *tp_buf_take(tp_buf *b)
{
    char *s = b->data ? b->data : tp_xstrdup("");
    tp_buf_init(b);
    return s;
}

size_t tp_format_real(double x, char *text)
{
    if (x == floor(x) && fabs(x) < 1e15) {   /* 500000.0, not 5e+05 */
        snprintf(text, 40, "%.1f", x);
        for (char *c = text; *c; c++)
            if (*c == ',')
                *c = '.';
        return strlen(text);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, 40, "%.*g", prec, x);
        for (char *c = text; *c; c++)
            if (*c == ',')
                *c = '.';   /* a locale with a decimal comma */
        if (strtod(text, NULL) == x)
            break;
    }
    if (!strpbrk(text, ".e"))
        strcat(text, ".0");
    return strlen(text);
}
