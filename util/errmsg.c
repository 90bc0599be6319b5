/* errmsg.c: error messages for callers (see errmsg.h). */
#include <stdio.h>
#include "util/errmsg.h"

int tp_verror(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err && errlen)
        (void)vsnprintf(err, errlen, fmt, ap);
    return -1;
}

int tp_error(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tp_verror(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
