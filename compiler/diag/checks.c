/* checks.c: the table of checks, from checks.def. */
#include "compiler/diag/checks.h"

#include <string.h>

#include "compiler/diag/suggest.h"
#include "util/xalloc.h"

const tp_check_info tp_checks[] = {
#define TP_CHECK(name, level, short_desc, full_desc, help, ...) {name, level, short_desc, full_desc, help},
#include "compiler/diag/checks.def"
#undef TP_CHECK
};

const int tp_ncheck = (int)(sizeof tp_checks / sizeof tp_checks[0]);

int tp_check_index(const char *name)
{
    for (int i = 0; i < tp_ncheck; i++)
        if (strcmp(tp_checks[i].name, name) == 0)
            return i;
    return -1;
}

const char *tp_check_suggest(const char *name)
{
    static const char *names[sizeof tp_checks / sizeof tp_checks[0]];
    for (int i = 0; i < tp_ncheck; i++)
        names[i] = tp_checks[i].name;
    return tp_suggest(name, names, tp_ncheck);
}

char *tp_check_help_uri(const char *name)
{
    return tp_xasprintf("%s#%s", TP_CHECKS_URI, name);
}
