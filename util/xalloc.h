/* xalloc.h: allocation that cannot fail, and a growable string buffer.
 *
 * tpcc has no useful way to continue when memory runs out: every caller
 * would have to unwind and report, and the report itself needs memory. So
 * these wrappers print "<program>: out of memory" and abort() instead. This
 * is the one place in tpcc that terminates the process; everything else
 * reports errors to its caller. */
#ifndef TPCC_XALLOC_H
#define TPCC_XALLOC_H

#include <stdarg.h>
#include <stddef.h>

/* The program named by these messages: "tpcc" unless set (tprun sets
 * "tprun"). `name` must outlive every later message: a string literal. */
void tp_set_program_name(const char *name);

void *tp_xmalloc(size_t size);
void *tp_xcalloc(size_t count, size_t size);
void *tp_xrealloc(void *p, size_t size);
/* realloc for arrays: checks count * size for overflow. */
void *tp_xreallocarray(void *p, size_t count, size_t size);
/* A growable array of `count` elements of `size` bytes with capacity
 * *cap: room for one more, doubling the capacity (from `first`) when it is
 * full. Returns the array, moved if it grew. */
void *tp_xgrow(void *p, int count, int *cap, size_t size, int first);
char *tp_xstrdup(const char *s);
/* A NUL-terminated copy of at most the first n bytes of s (stops early
 * at a NUL in s). */
char *tp_xstrndup(const char *s, size_t n);
char *tp_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *tp_xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* For libraries that report allocation failure themselves (jansson):
 * tp_xcheck returns p, or reports out-of-memory and aborts when p is NULL;
 * tp_out_of_memory reports and aborts unconditionally. */
void *tp_xcheck(void *p);
void tp_out_of_memory(void) __attribute__((noreturn));

/* The shortest decimal that reads back as exactly x (1e-06, not
 * 9.9999999999999995e-07), always with a '.' or an exponent so that it
 * reads as a float, in JSON as in the model language (500000.0, not
 * 5e+05). x must be finite. Writes at most TP_REAL_TEXT_MAX bytes, the
 * NUL included, and returns the length. */
#define TP_REAL_TEXT_MAX 48
size_t tp_format_real(double x, char *text);

/* A NUL-terminated string that grows as text is appended. A zeroed
 * tp_buf is valid and empty; data stays NULL until the first append. */
typedef struct tp_buf {
    char *data;
    size_t len, cap;
} tp_buf;

void tp_buf_init(tp_buf *b);
void tp_buf_append(tp_buf *b, const char *s);
void tp_buf_append_n(tp_buf *b, const char *s, size_t n);
void tp_buf_append_char(tp_buf *b, char c, size_t count);  /* c repeated count times */
void tp_buf_appendf(tp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tp_buf_free(tp_buf *b);
/* Hands the string to the caller (never NULL, "" when empty) and resets b. */
char *tp_buf_take(tp_buf *b);

#endif /* TPCC_XALLOC_H */
