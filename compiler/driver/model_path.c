/* model_path.c: finding a plan's model file (see model_path.h). */
#define _XOPEN_SOURCE 700   /* readlink */

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "compiler/driver/model_path.h"
#include "compiler/driver/project_dirs.h"
#include "compiler/diag/source.h"
#include "util/atomic_write.h"
#include "util/xalloc.h"

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
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

/* Takes dir; drops it when the list has it already. */
static void add_dir(tp_model_dirs *d, char *dir)
{
    for (int i = 0; i < d->count; i++)
        if (!strcmp(d->dirs[i], dir)) {
            free(dir);
            return;
        }
    d->dirs = tp_xreallocarray(d->dirs, (size_t)d->count + 1, sizeof *d->dirs);
    d->dirs[d->count++] = dir;
}

/* dir/models when it is a directory and not a symbolic link */
static char *models_in(const char *dir)
{
    char *models = tp_xasprintf("%s/models", strcmp(dir, "/") ? dir : "");
    struct stat st;
    if (lstat(models, &st) == 0 && S_ISDIR(st.st_mode))
        return models;
    free(models);
    return NULL;
}

void tp_model_dirs_for_plan(tp_model_dirs *d, const char *plan_path, char *const *configured, int nconfigured)
{
    d->dirs = NULL;
    d->count = 0;
    const char *env = getenv("TPCC_MODEL_PATH");
    for (const char *dir = env; dir;) {
        size_t len = strcspn(dir, ":");
        if (len > 0)
            add_dir(d, tp_xstrndup(dir, len));
        dir = dir[len] ? dir + len + 1 : NULL;
    }
    for (int i = 0; i < nconfigured; i++)
        add_dir(d, tp_xstrdup(configured[i]));
    char *plan_dir = tp_path_parent(plan_path);
    char **above;
    int nabove = tp_project_dirs(plan_dir, &above);
    free(plan_dir);
    for (int i = 0; i < nabove; i++) {
        char *models = models_in(above[i]);
        if (models)
            add_dir(d, models);
    }
    tp_project_dirs_free(above, nabove);
    add_dir(d, tp_models_dir());
}

void tp_model_dirs_free(tp_model_dirs *d)
{
    for (int i = 0; i < d->count; i++)
        free(d->dirs[i]);
    free(d->dirs);
    d->dirs = NULL;
    d->count = 0;
}

static const char *file_name(const char *ref)
{
    const char *slash = strrchr(ref, '/');
    return slash ? slash + 1 : ref;
}

char *tp_find_model(const char *plan_path, const char *ref, const tp_model_dirs *dirs)
{
    char *beside = tp_path_relative_to(plan_path, ref);
    if (ref[0] == '/' || readable(beside))
        return beside;
    free(beside);
    const char *name = file_name(ref);
    for (int i = 0; i < dirs->count && *name; i++) {
        char *p = tp_xasprintf("%s/%s", dirs->dirs[i], name);
        if (readable(p))
            return p;
        free(p);
    }
    return NULL;
}

void tp_model_not_found(const char *plan_path, const char *ref, const tp_model_dirs *dirs, char **err,
                        char **looked)
{
    char *beside = tp_path_relative_to(plan_path, ref);
    *err = tp_xasprintf("cannot find the model '%s' (not at '%s', nor in a directory models are looked for in)",
                        ref, beside);
    tp_buf b;
    tp_buf_init(&b);
    tp_buf_appendf(&b, "looked for '%s' in", file_name(ref));
    for (int i = 0; i < dirs->count; i++)
        tp_buf_appendf(&b, "%s %s", i ? "," : "", dirs->dirs[i]);
    *looked = tp_buf_take(&b);
    free(beside);
}
