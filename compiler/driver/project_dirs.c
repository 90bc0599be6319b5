/* project_dirs.c: a directory and those above it, up to the project's
 * root (see project_dirs.h). */
#define _XOPEN_SOURCE 700   /* realpath */

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "compiler/driver/project_dirs.h"
#include "util/atomic_write.h"
#include "util/xalloc.h"

static bool holds_git(const char *dir)
{
    char *git = tp_xasprintf("%s/.git", dir);
    struct stat st;
    bool found = lstat(git, &st) == 0;
    free(git);
    return found;
}

int tp_project_dirs(const char *dir, char ***out)
{
    *out = NULL;
    char *at = realpath(dir, NULL);
    int n = 0, cap = 0;
    while (at) {
        *out = tp_xgrow(*out, n, &cap, sizeof **out, 8);
        (*out)[n++] = at;
        if (!strcmp(at, "/") || holds_git(at))
            break;
        at = tp_path_parent(at);
    }
    return n;
}

void tp_project_dirs_free(char **dirs, int count)
{
    for (int i = 0; i < count; i++)
        free(dirs[i]);
    free(dirs);
}
