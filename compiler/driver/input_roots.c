/* input_roots.c: the directories a plan may make tpcc read from (see
 * input_roots.h). */
#define _XOPEN_SOURCE 700   /* realpath */

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "compiler/driver/input_roots.h"
#include "compiler/diag/source.h"
#include "util/errmsg.h"
#include "util/atomic_write.h"
#include "util/xalloc.h"

char *tp_roots_resolve(const char *path, char *err, size_t errlen)
{
    char *real = realpath(path, NULL);
    if (!real)
        tp_error(err, errlen, "cannot resolve '%s': %s", path, strerror(errno));
    return real;
}

/* Adds the resolved path when it exists; roots that do not exist allow
 * nothing. Takes ownership of nothing. */
static void add(tp_roots *r, const char *path)
{
    char *real = realpath(path, NULL);
    if (!real)
        return;
    r->dirs = tp_xreallocarray(r->dirs, (size_t)r->count + 1, sizeof *r->dirs);
    r->dirs[r->count++] = real;
}

void tp_roots_for_plan(tp_roots *r, const char *plan_path, const tp_model_dirs *models, char *const *allowed,
                       int nallowed)
{
    r->dirs = NULL;
    r->count = 0;
    char *plan_dir = tp_path_parent(plan_path);
    add(r, plan_dir);
    free(plan_dir);
    for (int i = 0; i < models->count; i++)
        add(r, models->dirs[i]);
    for (int i = 0; i < nallowed; i++)
        add(r, allowed[i]);
}

void tp_roots_free(tp_roots *r)
{
    for (int i = 0; i < r->count; i++)
        free(r->dirs[i]);
    free(r->dirs);
    r->dirs = NULL;
    r->count = 0;
}

/* real (resolved) is root itself or inside it */
static bool under(const char *real, const char *root)
{
    size_t n = strlen(root);
    if (strncmp(real, root, n))
        return false;
    return real[n] == '\0' || real[n] == '/' || (n > 0 && root[n - 1] == '/');
}

int tp_roots_check(const tp_roots *r, const char *path, char *err, size_t errlen, char *help, size_t helplen)
{
    help[0] = '\0';
    char *real = realpath(path, NULL);
    if (!real)
        return tp_error(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    bool inside = false;
    for (int i = 0; i < r->count && !inside; i++)
        inside = under(real, r->dirs[i]);
    int rc = 0;
    struct stat st;
    if (!inside) {
        char *dir = tp_xstrdup(real);
        char *slash = strrchr(dir, '/');
        if (slash)
            slash[slash == dir] = '\0';   /* "/x" -> "/" */
        const char *why = "outside the directories a plan may read (the plan's own directory and below, the "
                          "models/ directories beside it and above it, tpcc's models, TPCC_MODEL_PATH, the "
                          "settings' model-path and allow-outside, --allow-outside)";
        rc = strcmp(real, path) ? tp_error(err, errlen, "'%s' resolves to '%s', %s", path, real, why)
                                : tp_error(err, errlen, "'%s' is %s", path, why);
        tp_error(help, helplen, "move the file under the plan's directory or into a models/ directory beside it, "
                 "or allow its directory: --allow-outside %s", dir);
        free(dir);
    } else if (stat(real, &st) != 0) {
        rc = tp_error(err, errlen, "cannot open '%s': %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = tp_error(err, errlen, "'%s' is %s, not a regular file", path, tp_file_kind_name(st.st_mode));
        tp_error(help, helplen, "name a model file");
    }
    free(real);
    return rc;
}
