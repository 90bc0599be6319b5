/* suffix.h: whether a string ends in another (file extensions, tensor
 * names). */
#ifndef TP_UTIL_SUFFIX_H
#define TP_UTIL_SUFFIX_H

#include <stdbool.h>

bool tp_ends_with(const char *s, const char *suffix);

#endif /* TP_UTIL_SUFFIX_H */
