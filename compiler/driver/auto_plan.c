/* auto_plan.c: the shipped Hugging Face plan of a config.json's family
 * (see auto_plan.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/driver/auto_plan.h"
#include "compiler/driver/model_path.h"
#include "compiler/front/hf_json.h"
#include "util/xalloc.h"

char *tp_plans_dir(void)
{
    const char *env = getenv("TPCC_PLANS_DIR");
    if (env && *env)
        return tp_xstrdup(env);
    char *installed = tp_installed_dir("plans");
    if (installed && access(installed, R_OK) == 0)
        return installed;
    free(installed);
    return tp_xstrdup(TPCC_PLANS_DIR);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "gemma, gemma2, llama, ...": the model types plans/hf/ has a plan for. */
static char *shipped_types(const char *hf_dir)
{
    DIR *d = opendir(hf_dir);
    if (!d)
        return tp_xasprintf("none: %s cannot be read", hf_dir);
    char **names = NULL;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".plan"))
            continue;
        names = tp_xgrow(names, n, &cap, sizeof *names, 16);
        names[n++] = tp_xstrndup(e->d_name, len - 5);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    tp_buf b;
    tp_buf_init(&b);
    for (int i = 0; i < n; i++) {
        tp_buf_appendf(&b, "%s%s", i ? ", " : "", names[i]);
        free(names[i]);
    }
    free(names);
    if (!n)
        tp_buf_appendf(&b, "none in %s", hf_dir);
    return b.data;
}

/* A model_type names a file: only the characters Hugging Face's use. */
static bool plain_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-'))
            return false;
    return true;
}

char *tp_auto_plan(const char *config_path, const char *plans_dir, tp_sources *src, tp_diags *diags)
{
    char err[512];
    int line, col;
    json_t *root = tp_hf_json_read(config_path, &line, &col, err, sizeof err);
    if (!root) {
        tp_hf_json_error(src, diags, config_path, line, col, "io", err);
        return NULL;
    }
    char *hf_dir = tp_xasprintf("%s/hf", plans_dir);
    char *plan = NULL, *message = NULL;
    const char *check = "config";
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!type) {
        char *have = shipped_types(hf_dir);
        message = tp_xasprintf("config.json has no model_type string, which --tp-plan auto picks the plan by "
                               "(shipped: %s)", have);
        free(have);
    } else {
        char *candidate = tp_xasprintf("%s/%s.plan", hf_dir, type);
        if (plain_name(type) && access(candidate, R_OK) == 0) {
            plan = candidate;
        } else {
            char *have = shipped_types(hf_dir);
            message = tp_xasprintf("model_type '%s' has no Hugging Face plan shipped in %s (shipped: %s); "
                                   "give a plan file instead of --tp-plan auto", type, hf_dir, have);
            check = "plan";
            free(have);
            free(candidate);
        }
    }
    if (message)
        tp_hf_json_error(src, diags, config_path, 1, 1, check, message);
    free(message);
    json_decref(root);
    free(hf_dir);
    return plan;
}
