/* input_roots.h: the directories a plan may make tpcc read from.
 *
 * A plan comes from anywhere (a pull request in CI), and its
 * `model "..."` line names a file tpcc opens and whose lines its
 * diagnostics print. So the file must resolve (symlinks followed) to a
 * regular file under the plan's own directory, a directory its model is
 * looked for in by name (model_path.h: TPCC_MODEL_PATH, the settings'
 * model-path, the models/ directories beside the plan and above it,
 * tpcc's own), or a path the settings or the command line allow
 * (allow-outside, --allow-outside); anything else is refused before it is
 * opened. */
#ifndef TPCC_INPUT_ROOTS_H
#define TPCC_INPUT_ROOTS_H

#include <stddef.h>

#include "compiler/driver/model_path.h"

typedef struct tp_roots {
    char **dirs;     /* resolved (realpath) directories, or single files */
    int count;
} tp_roots;

/* The roots of the plan at plan_path: its directory, the directories
 * of `models` (those that exist) and `allowed` (allow-outside and
 * --allow-outside, already resolved by tp_roots_resolve). */
void tp_roots_for_plan(tp_roots *r, const char *plan_path, const tp_model_dirs *models, char *const *allowed,
                       int nallowed);
void tp_roots_free(tp_roots *r);

/* realpath(path), or NULL with the reason in err (--allow-outside names
 * something that does not exist). malloc'ed. */
char *tp_roots_resolve(const char *path, char *err, size_t errlen);

/* 0 when path resolves to a regular file under one of the roots; else -1,
 * the problem in err and how to fix it in help (both for a diagnostic at
 * the line that names the file). Nothing is opened: a FIFO or a device
 * is recognised by stat(), which never blocks. */
int tp_roots_check(const tp_roots *r, const char *path, char *err, size_t errlen, char *help, size_t helplen);

#endif /* TPCC_INPUT_ROOTS_H */
