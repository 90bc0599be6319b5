/* number.h: numbers as people write them on a command line: decimal only
 * and range-checked. strtol alone takes more: leading blanks, a '+', and
 * a value past the type's range that wraps once cast to a smaller one. */
#ifndef TP_UTIL_NUMBER_H
#define TP_UTIL_NUMBER_H

#include <stdint.h>

/* s as an integer from min to max: an optional '-', then decimal digits,
 * nothing else. Returns 0, or -1 (*out untouched). */
int tp_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);

/* s as an unsigned 64-bit integer: decimal digits only (strtoull alone
 * takes blanks, a '+', and wraps "-1" to 2^64 - 1). Returns 0, or -1
 * (*out untouched). */
int tp_parse_uint(const char *s, uint64_t *out);

/* s as a finite real of at least min, written in decimal (digits, a
 * point, an exponent): no blanks, '+', hex, "inf" or "nan", which strtod
 * alone takes. Returns 0, or -1 (*out untouched). */
int tp_parse_real(const char *s, double min, double *out);

#endif /* TP_UTIL_NUMBER_H */
