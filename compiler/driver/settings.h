/* settings.h: tpcc's settings in a file, so that pre-commit, CI and a
 * developer's shell check plans alike without repeating the options: the
 * [tool.tpcc] table of a pyproject.toml, or a whole .tpcc.toml (as ruff
 * reads [tool.ruff] and ruff.toml). Which file a plan uses is
 * settings_find.h's business. The keys (settings.c's table; docs/lint.md
 * documents each):
 *
 *   model-path    = ["models"]                 directories a plan finds its model in by name
 *   allow-outside = ["/srv/models"]            what --allow-outside allows
 *   defines       = {tp = 8, seq = 4096}       default -D values
 *   werror        = true                       -Werror
 *   warnings      = {repeated-gather = "error"}   -W per check: "error", "warning" or "ignore"
 *
 * Paths are relative to the file's directory. The command line goes on
 * top: its -D, -W and -Werror come after the file's (the last word
 * wins), its --allow-outside adds to allow-outside. */
#ifndef TPCC_SETTINGS_H
#define TPCC_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tp_settings {
    char *path;                                 /* the file they were read from */
    char **model_path; int nmodel_path;         /* resolved directories */
    char **allow_outside; int nallow_outside;   /* resolved */
    char **defines; int ndefines;               /* "name=value", as -D takes them */
    char **define_at;                           /* "FILE:LINE:COL" of each define's key */
    char **warnings; int nwarnings;             /* -W arguments: "error", "no-CHECK", "CHECK=error" */
} tp_settings;

/* Read the settings in the file at path: a pyproject.toml's [tool.tpcc]
 * table when `pyproject`, else the whole file. Returns 1 with *s filled,
 * 0 when a pyproject.toml has no [tool.tpcc] table (it holds no settings
 * of tpcc's), -1 with "PATH:LINE:COL: what is wrong" in err (an unknown
 * key names the nearest known one). */
int tp_settings_read(tp_settings *s, const char *path, bool pyproject, char *err, size_t errlen);
void tp_settings_free(tp_settings *s);

/* The keys, in the table's order (for the test that docs/lint.md
 * documents each). */
extern const char *const tp_settings_keys[];
extern const int tp_nsettings_keys;

#endif /* TPCC_SETTINGS_H */
