/* suffix.c: see suffix.h. */
#include "util/suffix.h"
#include <string.h>

bool tp_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}
