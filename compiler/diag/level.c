/* level.c: the names of the levels (diag.h), which the renderers print
 * and diag.c, which calls the renderers, does not. */
#include "compiler/diag/diag.h"

const char *tp_diag_level_name(tp_diag_level level)
{
    switch (level) {
    case TP_ERROR: return "error";
    case TP_WARNING: return "warning";
    case TP_UNSUPPORTED: return "unsupported";
    default: return "note";
    }
}
