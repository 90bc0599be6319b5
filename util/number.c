/* number.c: see number.h. */
#include "util/number.h"

#include <errno.h>
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
