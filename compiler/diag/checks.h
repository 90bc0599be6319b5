/* checks.h: the table of checks (checks.def): names, levels and the
 * descriptions SARIF's rules carry. */
#ifndef TPCC_CHECKS_H
#define TPCC_CHECKS_H

#include "compiler/diag/diag.h"

/* Where the project lives, and the page of its checks (docs/checks.md,
 * generated from checks.def) as the repository serves it: each check's
 * section is anchored by the check's name. */
#define TP_PROJECT_URI "https://github.com/tpcc/tpcc"
#define TP_CHECKS_URI TP_PROJECT_URI "/blob/main/docs/checks.md"

typedef struct tp_check_info {
    const char *name;
    tp_diag_level level;
    const char *short_desc, *full_desc, *help;
} tp_check_info;

/* The table, in checks.def's order, and its length. */
extern const tp_check_info tp_checks[];
extern const int tp_ncheck;

/* The index of check `name` in tp_checks, or -1. */
int tp_check_index(const char *name);

/* The closest check name to an unknown `name`, or NULL. */
const char *tp_check_suggest(const char *name);

/* Where docs/checks.md describes check `name`: TP_CHECKS_URI with the
 * anchor #NAME. Malloc'ed. */
char *tp_check_help_uri(const char *name);

#endif /* TPCC_CHECKS_H */
