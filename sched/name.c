/* name.c: schedule file names for hints (see name.h). */
#include <string.h>
#include "sched/name.h"
#include "util/xalloc.h"

char *tp_sched_name_for(const char *input)
{
    const char *base = strrchr(input, '/');
    base = base ? base + 1 : input;
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (stem == 0)
        return tp_xstrdup("out.sched");
    return tp_xasprintf("%.*s.sched", (int)stem, base);
}

bool tp_is_sched_name(const char *path)
{
    size_t n = strlen(path);
    return n >= 6 && strcmp(path + n - 6, ".sched") == 0;
}
