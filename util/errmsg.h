/* errmsg.h: the one way a function reports an error to its caller: -1 and
 * a message in the caller's buffer (what is wrong, where, how to fix it).
 * Only main prints and exits. */
#ifndef TP_UTIL_ERRMSG_H
#define TP_UTIL_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>

/* Format the message into err (at most errlen bytes, truncated: it is for
 * a human; nothing when err is NULL or errlen 0). Returns -1. */
int tp_error(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int tp_verror(char *err, size_t errlen, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

#endif /* TP_UTIL_ERRMSG_H */
