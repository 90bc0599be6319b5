/* auto_plan.c: the shipped Hugging Face plan of a config.json's family
 * (see auto_plan.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/driver/auto_plan.h"
#include "compiler/driver/model_path.h"
#include "compiler/front/hf_check.h"
#include "compiler/front/hf_json.h"
#include "compiler/front/hf_names.h"
#include "grammar/parse.h"
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

/* The names of dir's .plan files without the suffix, sorted; *n of them
 * (0, and NULL, when dir cannot be read). Free each and the array. */
static char **plan_stems(const char *dir, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **names = NULL;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".plan"))
            continue;
        names = tp_xgrow(names, *n, &cap, sizeof *names, 16);
        names[(*n)++] = tp_xstrndup(e->d_name, len - 5);
    }
    closedir(d);
    qsort(names, (size_t)*n, sizeof *names, by_name);
    return names;
}

static void free_stems(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* "gemma, gemma2, llama, ...": the model types plans/hf/ has a plan for. */
static char *shipped_types(const char *hf_dir)
{
    if (access(hf_dir, R_OK) != 0)
        return tp_xasprintf("none: %s cannot be read", hf_dir);
    int n;
    char **names = plan_stems(hf_dir, &n);
    tp_buf b;
    tp_buf_init(&b);
    for (int i = 0; i < n; i++)
        tp_buf_appendf(&b, "%s%s", i ? ", " : "", names[i]);
    free_stems(names, n);
    if (!n)
        tp_buf_appendf(&b, "none in %s", hf_dir);
    return b.data;
}

/* Whether the plan at path names a model file that implements model_type. */
static bool plan_fits(const char *path, const char *model_type)
{
    tp_sources src;
    tp_diags diags;
    tp_sources_init(&src);
    tp_diags_init(&diags);
    char err[256];
    bool fits = false;
    int id = tp_sources_load(&src, path, err, sizeof err);
    tp_node *ast = id >= 0 ? tp_parse(&src, id, &diags) : NULL;
    for (int i = 0; ast && i < ast->nkids && !fits; i++)
        if (ast->kids[i]->kind == N_MODEL_REF) {
            /* a shipped plan's model is found as any plan's: no settings */
            tp_model_dirs dirs;
            tp_model_dirs_for_plan(&dirs, path, NULL, 0);
            char *model = tp_find_model(path, ast->kids[i]->str, &dirs);
            fits = model && tp_hf_model_implements_type(model, model_type);
            free(model);
            tp_model_dirs_free(&dirs);
        }
    if (ast)
        tp_node_free(ast);
    tp_diags_free(&diags);
    tp_sources_free(&src);
    return fits;
}

/* "DIR/a.plan or DIR/b.plan": the shipped plans of other layouts than
 * transformers' whose model implements model_type; NULL when none. */
static char *plans_for_type(const char *plans_dir, const char *model_type)
{
    int n;
    char **names = plan_stems(plans_dir, &n);
    tp_buf b;
    tp_buf_init(&b);
    int found = 0;
    for (int i = 0; i < n; i++) {
        char *path = tp_xasprintf("%s/%s.plan", plans_dir, names[i]);
        if (plan_fits(path, model_type))
            tp_buf_appendf(&b, "%s%s", found++ ? " or " : "", path);
        free(path);
    }
    free_stems(names, n);
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

/* Why there is no plan for model_type: a mixture-of-experts family, for
 * which none can be written yet, or none shipped (with the plans of
 * another layout that apply to it, if any). */
static void report_no_plan(const char *config_path, const char *plans_dir, const char *hf_dir, const char *type,
                           tp_sources *src, tp_diags *diags)
{
    if (tp_hf_moe_model_type(type)) {
        char *message = tp_xasprintf("model_type '%s' is a mixture-of-experts family: no plan, shipped or written, "
                                     "can be checked or compiled yet: tpcc would need expert layers (the router, "
                                     "the experts and their styles)", type);
        tp_diag *g = tp_hf_json_finding(src, diags, config_path, 1, 1, TP_UNSUPPORTED, "unsupported", message);
        tp_diag_help(g, "check and run it with PyTorch itself: from_pretrained(..., tp_plan=\"auto\")");
        free(message);
        return;
    }
    char *have = shipped_types(hf_dir);
    char *message = tp_xasprintf("model_type '%s' has no Hugging Face plan shipped in %s (shipped: %s); "
                                 "give a plan file instead of --tp-plan auto", type, hf_dir, have);
    tp_diag *g = tp_hf_json_finding(src, diags, config_path, 1, 1, TP_ERROR, "plan", message);
    char *fits = plain_name(type) ? plans_for_type(plans_dir, type) : NULL;
    if (fits)
        tp_diag_help(g, "%s applies to model_type '%s': tpcc --check PLAN --hf-config %s", fits, type, config_path);
    free(fits);
    free(message);
    free(have);
}

char *tp_auto_plan(const char *config_path, const char *plans_dir, tp_sources *src, tp_diags *diags)
{
    char err[512];
    int line, col;
    json_t *root = tp_hf_json_read(config_path, &line, &col, err, sizeof err);
    if (!root) {
        tp_hf_json_finding(src, diags, config_path, line, col, TP_ERROR, "io", err);
        return NULL;
    }
    char *hf_dir = tp_xasprintf("%s/hf", plans_dir);
    char *plan = NULL;
    const char *type = json_string_value(json_object_get(root, "model_type"));
    if (!type) {
        char *have = shipped_types(hf_dir);
        char *message = tp_xasprintf("config.json has no model_type string, which --tp-plan auto picks the plan "
                                     "by (shipped: %s)", have);
        tp_hf_json_finding(src, diags, config_path, 1, 1, TP_ERROR, "config", message);
        free(message);
        free(have);
    } else {
        char *candidate = tp_xasprintf("%s/%s.plan", hf_dir, type);
        if (plain_name(type) && access(candidate, R_OK) == 0) {
            plan = candidate;
        } else {
            report_no_plan(config_path, plans_dir, hf_dir, type, src, diags);
            free(candidate);
        }
    }
    json_decref(root);
    free(hf_dir);
    return plan;
}
