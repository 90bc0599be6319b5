/* compile.c: the front-end pipeline (see compile.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/driver/compile.h"
#include "compiler/driver/input_roots.h"
#include "compiler/driver/model_path.h"
#include "compiler/front/hf_check.h"
#include "grammar/parse.h"
#include "compiler/plan/pynames.h"
#include "compiler/plan/train_block.h"
#include "compiler/sema/data_split.h"
#include "compiler/sema/grad_clip.h"
#include "compiler/sema/grad_placements.h"
#include "compiler/sema/partial_grad.h"
#include "compiler/sema/unreduced_grad.h"
#include "util/xalloc.h"

static const tp_node *find_item(const tp_node *file, tp_node_kind kind, int *count)
{
    const tp_node *first = NULL;
    *count = 0;
    for (int i = 0; i < file->nkids; i++)
        if (file->kids[i]->kind == kind) {
            if (!first)
                first = file->kids[i];
            (*count)++;
        }
    return first;
}

/* An I/O error points at `from` (the line that names the file), or at
 * the unreadable file itself. */
static void io_error(tp_unit *u, const char *path, tp_span from, const char *err)
{
    if (from.file < 0)
        from = (tp_span){tp_sources_add_unread(&u->src, path), 1, 1, 0, 0};
    tp_diag_add(&u->diags, TP_ERROR, from, "io", "%s", err);
    u->io_error = true;
}

static int load(tp_unit *u, const char *path, tp_span from)
{
    char err[512];
    int id = tp_sources_load(&u->src, path, err, sizeof err);
    if (id < 0)
        io_error(u, path, from, err);
    return id;
}

/* The model file must be one the plan may read (input_roots.h): the
 * error points at the plan's model line. */
static bool model_allowed(tp_unit *u, const char *plan_path, const char *model_path, tp_span from,
                          const tp_model_dirs *dirs, const tp_compile_opts *opts)
{
    tp_roots roots;
    tp_roots_for_plan(&roots, plan_path, dirs, opts->allow_outside, opts->nallow_outside);
    char err[1024], help[1024];
    int rc = tp_roots_check(&roots, model_path, err, sizeof err, help, sizeof help);
    tp_roots_free(&roots);
    if (rc == 0)
        return true;
    tp_diag *d = tp_diag_add(&u->diags, TP_ERROR, from, "io", "%s", err);
    if (help[0])
        tp_diag_help(d, "%s", help);
    u->io_error = true;
    return false;
}

/* The plan's model file (model_path.h), one it may read, or NULL after
 * an error at its model line that says where it was looked for. */
static char *find_model(tp_unit *u, const char *plan_path, const tp_node *ref, const tp_compile_opts *opts)
{
    tp_model_dirs dirs;
    tp_model_dirs_for_plan(&dirs, plan_path, opts->model_path, opts->nmodel_path);
    char *path = tp_find_model(plan_path, ref->str, &dirs);
    if (!path) {
        char *err, *looked;
        tp_model_not_found(plan_path, ref->str, &dirs, &err, &looked);
        tp_diag *d = tp_diag_add(&u->diags, TP_ERROR, ref->span, "io", "%s", err);
        tp_diag_note_at(d, TP_NO_SPAN, "%s", looked);
        tp_diag_help(d, "name the model's path relative to the plan, or put it in a models/ directory beside the "
                        "plan or above it; a directory elsewhere goes in TPCC_MODEL_PATH or in model-path in "
                        ".tpcc.toml or pyproject.toml's [tool.tpcc] (docs/lint.md)");
        free(err);
        free(looked);
        u->io_error = true;
    } else if (!model_allowed(u, plan_path, path, ref->span, &dirs, opts)) {
        free(path);
        path = NULL;
    }
    tp_model_dirs_free(&dirs);
    return path;
}

static void bind_config_blocks(tp_unit *u, const tp_node *file, tp_cfg_origin origin)
{
    for (int i = 0; i < file->nkids; i++)
        if (file->kids[i]->kind == N_CONFIG) {
            if (origin == TP_CFG_PLAN)
                tp_hf_check_overrides(&u->config, file->kids[i]);
            tp_config_bind_block(&u->config, file->kids[i], origin);
        }
}

void tp_compile(tp_unit *u, const char *plan_path, const tp_compile_opts *opts)
{
    memset(u, 0, sizeof *u);
    tp_sources_init(&u->src);
    tp_diags_init(&u->diags);
    tp_config_init(&u->config, &u->diags);
    u->plan_file = load(u, plan_path, TP_NO_SPAN);
    if (u->plan_file < 0)
        return;
    u->plan_ast = tp_parse(&u->src, u->plan_file, &u->diags);
    int nrefs;
    const tp_node *ref = find_item(u->plan_ast, N_MODEL_REF, &nrefs);
    if (!ref) {
        if (!u->diags.errors)
            tp_diag_add(&u->diags, TP_ERROR, (tp_span){u->plan_file, 1, 1, 0, 0}, "plan",
                        "the plan does not say which model it applies to: add model \"path/to/x.model\"");
        return;
    }
    if (nrefs > 1)
        tp_diag_add(&u->diags, TP_ERROR, ref->span, "plan", "a plan applies to one model; it names %d", nrefs);
    char *model_path = find_model(u, plan_path, ref, opts);
    if (!model_path)
        return;
    u->model_file = load(u, model_path, ref->span);
    free(model_path);
    if (u->model_file < 0)
        return;
    u->model_ast = tp_parse(&u->src, u->model_file, &u->diags);
    tp_pynames_reject_in_model(u->model_ast, &u->diags);
    tp_train_block_reject_in_model(u->model_ast, &u->diags);
    if (u->diags.errors)
        return;            /* a broken file would only produce noise further on */
    if (opts->hf_config && tp_config_load_hf(&u->config, opts->hf_config, &u->src) < 0) {
        u->io_error = true;
        return;
    }
    bind_config_blocks(u, u->model_ast, TP_CFG_MODEL);
    bind_config_blocks(u, u->plan_ast, TP_CFG_PLAN);
    for (int i = 0; i < opts->ndefines; i++) {
        char err[512];
        if (tp_config_override(&u->config, opts->defines[i], err, sizeof err) < 0) {
            const char *at = opts->define_at ? opts->define_at[i] : NULL;
            tp_diag_add(&u->diags, TP_ERROR, TP_NO_SPAN, "config", "%s%s%s", at ? at : "", at ? ": defines: " : "",
                        err);
            u->io_error = true;
        }
    }
    if (u->io_error)
        return;
    tp_hf_check_block(&u->config, u->model_ast);
    tp_hf_check_plan(&u->config, u->plan_ast);
    if (opts->hf_config && !tp_hf_check_config(&u->config, &u->src, u->model_ast, u->plan_ast,
                                               u->src.files[u->model_file].path, ref->span))
        return;            /* another architecture: its sizes would only produce noise */
    const tp_node *files[] = {u->model_ast};
    if (!tp_model_build(&u->model, files, 1, &u->config)) {
        tp_diag_add(&u->diags, TP_ERROR, ref->span, "model", "the model file defines no module");
        return;
    }
    if (u->diags.errors)
        return;
    tp_plan_build(&u->plan, u->plan_ast, u->plan_file, &u->model, &u->config);
    if (u->plan.incomplete)
        return;            /* the layouts without an entry tpcc cannot read would only produce noise */
    if (opts->recompute_given)
        u->plan.train.recompute = opts->recompute;
    if (u->plan.dp_dim >= 0 && !opts->train)
        tp_plan_refuse_data_parallel(&u->plan, &u->diags);
    else if (opts->train)
        tp_train_check_shard_names(&u->plan, &u->diags);
    tp_check_data_split(&u->model, &u->plan, &u->diags);
    tp_check(&u->model, &u->plan, &u->config, opts->loss, &u->analysis);
    tp_check_grad_clip(&u->model, &u->plan, &u->analysis.graph, &u->diags);
    if (opts->program && !u->diags.errors && !u->diags.unsupported) {
        /* the plan's pad_id or eos_id: the training run builds segments from them, as tpcc --segments asks */
        const tp_node *masks_key = !opts->train ? NULL
                                   : u->plan.train.value_at[TP_TF_PAD_ID] ? u->plan.train.value_at[TP_TF_PAD_ID]
                                                                          : u->plan.train.value_at[TP_TF_EOS_ID];
        tp_passes_opts passes = {opts->optimize, opts->dtype, opts->train, u->plan.train.recompute,
                                 u->plan.data_parallel, u->plan.train.shard_mode, opts->segments || masks_key};
        tp_autodiff_error err;
        int failed = tp_passes_run(&u->analysis.graph, &passes, &u->ir, &err);
        if (failed && err.segments) {
            tp_diag *d = tp_diag_add(&u->diags, TP_ERROR, opts->segments || !masks_key ? ref->span : masks_key->span,
                                     "model", "%s", err.message);
            tp_diag_help(d, "%s, or change the model as the message says",
                         opts->segments ? "compile without --segments"
                                        : "remove pad_id and eos_id from the plan's train { } (they mask attention)");
        } else if (failed) {
            /* at the plan entry that made the node, else at the model the plan names */
            const tp_gnode *n = err.node >= 0 ? &u->analysis.graph.nodes[err.node] : NULL;
            tp_span at = n && n->entry ? tp_entry_span(n->entry) : ref->span;
            char *in = n && n->module ? tp_xasprintf(" (in '%s')", n->module->fqn) : tp_xstrdup("");
            tp_diag *d = err.unsupported ? tp_diag_unsupported(&u->diags, at, "%s%s", err.message, in)
                                         : tp_diag_add(&u->diags, TP_ERROR, at, "backward", "%s%s", err.message, in);
            free(in);
            tp_diag_help(d, "compile the forward step without --train, or change the plan so the op is supported");
        } else if (opts->train) {
            tp_check_unreduced_grads(&u->model, &u->plan, &u->analysis.graph, &u->diags);
            tp_check_grad_placements(&u->analysis, &u->diags);
            tp_check_partial_grads(&u->analysis, &u->diags);
        }
    }
    u->built = true;
}

void tp_unit_free(tp_unit *u)
{
    if (u->built) {
        tp_analysis_free(&u->analysis);
        tp_ir_free(&u->ir);
    }
    tp_plan_free(&u->plan);
    tp_model_free(&u->model);
    tp_config_free(&u->config);
    if (u->plan_ast) tp_node_free(u->plan_ast);
    if (u->model_ast) tp_node_free(u->model_ast);
    tp_diags_free(&u->diags);
    tp_sources_free(&u->src);
}
