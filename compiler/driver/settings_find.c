/* settings_find.c: the settings file of a plan (see settings_find.h). */
#include "compiler/driver/settings_find.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compiler/driver/project_dirs.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

/* In the order a directory's files are tried. */
static const char *const settings_files[] = {".tpcc.toml", "pyproject.toml"};

static bool is_pyproject(const char *path)
{
    const char *slash = strrchr(path, '/');
    return !strcmp(slash ? slash + 1 : path, "pyproject.toml");
}

/* The settings of the file at path, read now or earlier: 1 (*out set),
 * 0 (a pyproject.toml without [tool.tpcc]) or -1. */
static int cached(tp_settings_cache *c, const char *path, const tp_settings **out, char *err, size_t errlen)
{
    for (int i = 0; i < c->count; i++)
        if (!strcmp(c->paths[i], path)) {
            *out = c->settings[i];
            return *out != NULL;
        }
    tp_settings *s = tp_xcalloc(1, sizeof *s);
    int rc = tp_settings_read(s, path, is_pyproject(path), err, errlen);
    if (rc < 0) {
        free(s);
        return -1;
    }
    if (rc == 0) {
        free(s);
        s = NULL;
    }
    c->paths = tp_xreallocarray(c->paths, (size_t)c->count + 1, sizeof *c->paths);
    c->settings = tp_xreallocarray(c->settings, (size_t)c->count + 1, sizeof *c->settings);
    c->paths[c->count] = tp_xstrdup(path);
    c->settings[c->count++] = s;
    *out = s;
    return rc;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int tp_settings_for(tp_settings_cache *c, const char *dir, const char *config, const tp_settings **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (config) {
        int rc = cached(c, config, out, err, errlen);
        if (rc == 0)
            return tp_error(err, errlen, "--config %s: the file has no [tool.tpcc] table", config);
        return rc < 0 ? -1 : 0;
    }
    char **dirs;
    int ndirs = tp_project_dirs(dir, &dirs);
    int rc = 0;
    for (int i = 0; i < ndirs && !*out && rc >= 0; i++)
        for (size_t k = 0; k < sizeof settings_files / sizeof *settings_files && !*out && rc >= 0; k++) {
            char *path = tp_xasprintf("%s/%s", strcmp(dirs[i], "/") ? dirs[i] : "", settings_files[k]);
            if (is_file(path))
                rc = cached(c, path, out, err, errlen);
            free(path);
        }
    tp_project_dirs_free(dirs, ndirs);
    return rc < 0 ? -1 : 0;
}

void tp_settings_cache_free(tp_settings_cache *c)
{
    for (int i = 0; i < c->count; i++) {
        free(c->paths[i]);
        if (c->settings[i])
            tp_settings_free(c->settings[i]);
        free(c->settings[i]);
    }
    free(c->paths);
    free(c->settings);
    memset(c, 0, sizeof *c);
}
