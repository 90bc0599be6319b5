/* model_path.c: finding a plan's model file (see model_path.h). */
#define _XOPEN_SOURCE 700   /* readlink */

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/driver/model_path.h"
#include "compiler/diag/source.h"
#include "util/xalloc.h"

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

/* dir/name when it exists, else NULL */
static char *in_dir(const char *dir, size_t dirlen, const char *name)
{
    if (dirlen == 0)
        return NULL;
    char *p = tp_xasprintf("%.*s/%s", (int)dirlen, dir, name);
    if (readable(p))
        return p;
    free(p);
    return NULL;
}

char *tp_installed_dir(const char *what)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    char *dir = tp_xasprintf("%s/../share/tpcc/%s", exe, what);
    char *tidy = tp_path_tidy(dir);   /* exe is resolved: bin/.. is its parent */
    free(dir);
    return tidy;
}

char *tp_models_dir(void)
{
    char *installed = tp_installed_dir("models");
    if (installed && access(installed, R_OK) == 0)
        return installed;
    free(installed);
    return tp_xstrdup(TPCC_MODELS_DIR);
}

char *tp_find_model(const char *plan_path, const char *ref)
{
    char *beside = tp_path_relative_to(plan_path, ref);
    if (ref[0] == '/' || readable(beside))
        return beside;
    const char *name = strrchr(ref, '/') ? strrchr(ref, '/') + 1 : ref;
    char *found = NULL;
    const char *env = getenv("TPCC_MODEL_PATH");
    for (const char *dir = env; dir && !found;) {
        size_t len = strcspn(dir, ":");
        found = in_dir(dir, len, name);
        dir = dir[len] ? dir + len + 1 : NULL;
    }
    char *installed = found ? NULL : tp_installed_dir("models");
    if (installed)
        found = in_dir(installed, strlen(installed), name);
    free(installed);
    if (!found)
        return beside;
    free(beside);
    return found;
}
