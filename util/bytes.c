/* bytes.c: see bytes.h. */
#include "util/bytes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t tp_parse_bytes(const char *s)
{
    static const struct { const char *unit; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(end, units[i].unit) && v * units[i].scale < 9.2e18)
            return (int64_t)(v * units[i].scale);
    return -1;
}
