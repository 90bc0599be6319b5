/* number.c: see number.h. */
#include "util/number.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char digits[] = "0123456789";

int tp_parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    const char *d = s + (*s == '-');
    if (!*d || d[strspn(d, digits)])
        return -1;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int tp_parse_uint(const char *s, uint64_t *out)
{
    if (!*s || s[strspn(s, digits)])
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}

int tp_parse_real(const char *s, double min, double *out)
{
    if (!*s || *s == '+' || s[strspn(s, "0123456789.eE+-")])
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v) || !(v >= min))
        return -1;
    *out = v;
    return 0;
}
