/* clobber.c: -o against the inputs (see clobber.h). */
#define _XOPEN_SOURCE 700   /* realpath */

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "compiler/driver/clobber.h"
#include "sched/name.h"
#include "util/xalloc.h"

/* out resolved without requiring it to exist: realpath of its directory
 * plus its name; NULL when the directory does not resolve either. */
static char *resolve_new_file(const char *out)
{
    char *d = tp_xstrdup(out), *b = tp_xstrdup(out);
    char *dir = realpath(dirname(d), NULL);
    char *resolved = dir ? tp_xasprintf("%s/%s", dir, basename(b)) : NULL;
    free(dir);
    free(d);
    free(b);
    return resolved;
}

static int same_file(const struct stat *out_st, const char *out_resolved, const char *input)
{
    struct stat in_st;
    if (out_st)
        return stat(input, &in_st) == 0 && in_st.st_dev == out_st->st_dev && in_st.st_ino == out_st->st_ino;
    char *in_resolved = realpath(input, NULL);
    int same = in_resolved && out_resolved && strcmp(in_resolved, out_resolved) == 0;
    free(in_resolved);
    return same;
}

static const char *role(const tp_unit *u, int file)
{
    if (file == u->plan_file)
        return "the plan";
    if (file == u->model_file)
        return "the model file";
    if (u->config.hf_path && strcmp(u->src.files[file].path, u->config.hf_path) == 0)
        return "the Hugging Face config";
    return "an input";
}

int tp_output_clobbers_input(const char *out, const tp_unit *u, bool schedule, char *msg, size_t msglen)
{
    struct stat st;
    int exists = stat(out, &st) == 0;
    char *resolved = exists ? NULL : resolve_new_file(out);
    int found = -1;
    for (int i = 0; i < u->src.count && found < 0; i++)
        if (same_file(exists ? &st : NULL, resolved, u->src.files[i].path))
            found = i;
    int hf = found < 0 && u->config.hf_path && same_file(exists ? &st : NULL, resolved, u->config.hf_path);
    free(resolved);
    if (found < 0 && !hf)
        return 0;
    char *suggested = schedule ? tp_sched_name_for(u->plan_file >= 0 ? u->src.files[u->plan_file].path : out)
                               : tp_xstrdup("parallelize_plan.py");
    snprintf(msg, msglen, "-o %s would overwrite %s '%s', an input: nothing was written; name the %s "
             "another file, such as %s", out, hf ? "the Hugging Face config" : role(u, found),
             hf ? u->config.hf_path : u->src.files[found].path, schedule ? "schedule" : "export", suggested);
    free(suggested);
    return 1;
}
