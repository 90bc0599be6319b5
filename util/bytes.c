/* bytes.c: see bytes.h. */
#include "util/bytes.h"

#include <ctype.h>
#include <string.h>
#include "util/number.h"

int64_t tp_parse_bytes(const char *s)
{
    static const struct { const char *unit; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    /* the number before the unit (its trailing letters), read as every
     * real on a command line is: decimal, no blank, '+', hex or inf */
    size_t len = strlen(s), unit = len;
    while (unit > 0 && isalpha((unsigned char)s[unit - 1]))
        unit--;
    char number[64];
    double v;
    if (unit >= sizeof number)
        return -1;
    memcpy(number, s, unit);
    number[unit] = '\0';
    if (tp_parse_real(number, 0, &v))
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(s + unit, units[i].unit) && v * units[i].scale < 9.2e18)
            return (int64_t)(v * units[i].scale);
    return -1;
}
