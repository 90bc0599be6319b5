/* pynames.c: import lines, names for PyTorch's classes and conditions over
 * the configuration in plan files (see pynames.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/diag/suggest.h"
#include "compiler/plan/pynames.h"
#include "util/xalloc.h"

/* ---- the modules tpcc knows, with what `from M import X` finds in each
 * (torch 2.15: the public names of each module, dir() less the modules and
 * the typing and standard-library names it imports for itself). A
 * submodule is a name too (from torch.distributed.tensor import parallel):
 * every module below is found whether or not its package lists it. */

typedef struct known_module {
    const char *path;
    const char *const *names;   /* NULL: a private module, whose names tpcc does not read */
} known_module;

static const char *const tp_parallel_names[] = {
    "ColwiseParallel", "ParallelStyle", "PrepareModuleInput", "PrepareModuleInputOutput", "PrepareModuleOutput",
    "RowwiseParallel", "SequenceParallel", "loss_parallel", "parallelize_module", "api", "loss", "style", NULL};
static const char *const tp_style_names[] = {
    "ColwiseParallel", "ParallelStyle", "PrepareModuleInput", "PrepareModuleInputOutput", "PrepareModuleOutput",
    "RowwiseParallel", "SequenceParallel", "DTensor", "DeviceMesh", "Placement", "Replicate", "Shard",
    "distribute_module", "distribute_tensor", NULL};
static const char *const tp_api_names[] = {"DeviceMesh", "ParallelStyle", "parallelize_module", NULL};
static const char *const tp_loss_names[] = {
    "DTensor", "DTensorSpec", "DeviceMesh", "Partial", "Placement", "Reduction", "Replicate", "Shard", "Tensor",
    "TensorMeta", "customized_loss_ops", "loss_parallel", "normalize_dim", "replicate_reduction_dims", NULL};
static const char *const tp_input_reshard_names[] = {"DTensor", "DeviceMesh", "Replicate", "Shard", "input_reshard",
                                                     NULL};
static const char *const tp_ddp_names[] = {NULL};
static const char *const tp_fsdp_names[] = {
    "ChunkShardingSpec", "DShard", "DTensor", "DTensorExtensions", "DeviceMesh", "FSDPExtensions", "Replicate",
    "Shard", "ShardMetadata", "ShardedTensor", "ShardedTensorMetadata", "TensorProperties", NULL};
static const char *const tensor_names[] = {
    "DTensor", "DeviceMesh", "Partial", "Placement", "Replicate", "Shard", "distribute_module",
    "distribute_tensor", "empty", "full", "init_device_mesh", "linspace", "logspace", "ones", "rand", "randn",
    "zeros", "device_mesh", "parallel", "placement_types", NULL};
static const char *const placement_names[] = {
    "DeviceMesh", "IntLikeType", "MaskBuffer", "Partial", "Placement", "RankType", "Replicate", "Shard",
    "fill_empty_tensor_to_shards", "maybe_run_for_local_tensor", "mesh_broadcast", "mesh_scatter", "pad_tensor",
    "shard_dim_alltoall", "unpad_tensor", NULL};
static const char *const experimental_names[] = {"DTensor", "context_parallel", "implicit_replication", "local_map",
                                                 "register_sharding", NULL};
static const char *const debug_names[] = {"CommDebugMode", "visualize_sharding", NULL};
static const char *const old_tensor_names[] = {
    "DTensor", "DeviceMesh", "Partial", "Placement", "Replicate", "Shard", "distribute_module",
    "distribute_tensor", "empty", "full", "init_device_mesh", "ones", "rand", "randn", "zeros",
    "placement_types", "device_mesh", NULL};
static const char *const old_api_names[] = {"DTensor", "distribute_module", "distribute_tensor", "empty", "full",
                                            "linspace", "logspace", "ones", "rand", "randn", "zeros", NULL};
static const char *const old_placement_names[] = {
    "DTensorSpec", "DeviceMesh", "Partial", "Placement", "Replicate", "Shard", "ShardOrder", "ShardOrderEntry",
    "TensorMeta", "dtype_abbrs", NULL};
static const char *const mesh_names[] = {"DeviceMesh", "init_device_mesh", NULL};

static const known_module known[] = {
    {"torch.distributed.tensor.parallel", tp_parallel_names},
    {"torch.distributed.tensor.parallel.style", tp_style_names},
    {"torch.distributed.tensor.parallel.api", tp_api_names},
    {"torch.distributed.tensor.parallel.loss", tp_loss_names},
    {"torch.distributed.tensor.parallel.input_reshard", tp_input_reshard_names},
    {"torch.distributed.tensor.parallel.ddp", tp_ddp_names},
    {"torch.distributed.tensor.parallel.fsdp", tp_fsdp_names},
    {"torch.distributed.tensor", tensor_names},
    {"torch.distributed.tensor.placement_types", placement_names},
    {"torch.distributed.tensor.device_mesh", mesh_names},
    {"torch.distributed.tensor.experimental", experimental_names},
    {"torch.distributed.tensor.debug", debug_names},
    {"torch.distributed._tensor", old_tensor_names},
    {"torch.distributed._tensor.api", old_api_names},
    {"torch.distributed._tensor.placement_types", old_placement_names},
    {"torch.distributed._tensor.device_mesh", mesh_names},
    {"torch.distributed._tensor.experimental", experimental_names},
    {"torch.distributed.device_mesh", mesh_names},
    /* private modules: they exist, and what comes from them is foreign */
    {"torch.distributed.tensor._api", NULL},
    {"torch.distributed.tensor._collective_utils", NULL},
    {"torch.distributed.tensor._decompositions", NULL},
    {"torch.distributed.tensor._dispatch", NULL},
    {"torch.distributed.tensor._dtensor_spec", NULL},
    {"torch.distributed.tensor._nonlinear_redux", NULL},
    {"torch.distributed.tensor._op_schema", NULL},
    {"torch.distributed.tensor._ops", NULL},
    {"torch.distributed.tensor._ops._common_rules", NULL},
    {"torch.distributed.tensor._ops._conv_ops", NULL},
    {"torch.distributed.tensor._ops._einsum_strategy", NULL},
    {"torch.distributed.tensor._ops._embedding_ops", NULL},
    {"torch.distributed.tensor._ops._mask_buffer", NULL},
    {"torch.distributed.tensor._ops._math_ops", NULL},
    {"torch.distributed.tensor._ops._matrix_ops", NULL},
    {"torch.distributed.tensor._ops._pointwise_ops", NULL},
    {"torch.distributed.tensor._ops._random_ops", NULL},
    {"torch.distributed.tensor._ops._tensor_ops", NULL},
    {"torch.distributed.tensor._ops._view_ops", NULL},
    {"torch.distributed.tensor._ops.autogen", NULL},
    {"torch.distributed.tensor._ops.single_dim_strategy", NULL},
    {"torch.distributed.tensor._ops.strategy_validation", NULL},
    {"torch.distributed.tensor._ops.utils", NULL},
    {"torch.distributed.tensor._random", NULL},
    {"torch.distributed.tensor._redistribute", NULL},
    {"torch.distributed.tensor._sharding_prop", NULL},
    {"torch.distributed.tensor._shards_wrapper", NULL},
    {"torch.distributed.tensor._tp_conv", NULL},
    {"torch.distributed.tensor._utils", NULL},
    {"torch.distributed.tensor.debug._comm_mode", NULL},
    {"torch.distributed.tensor.debug._op_coverage", NULL},
    {"torch.distributed.tensor.debug._visualize_sharding", NULL},
    {"torch.distributed.tensor.experimental._attention", NULL},
    {"torch.distributed.tensor.experimental._context_parallel", NULL},
    {"torch.distributed.tensor.experimental._context_parallel._attention", NULL},
    {"torch.distributed.tensor.experimental._context_parallel._cp_custom_ops", NULL},
    {"torch.distributed.tensor.experimental._context_parallel._load_balancer", NULL},
    {"torch.distributed.tensor.experimental._context_parallel._sharding_rules", NULL},
    {"torch.distributed.tensor.experimental._func_map", NULL},
    {"torch.distributed.tensor.experimental._register_sharding", NULL},
    {"torch.distributed.tensor.experimental._tp_transform", NULL},
    {"torch.distributed.tensor.parallel._data_parallel_utils", NULL},
    {"torch.distributed._tensor._shards_wrapper", NULL},
    {"torch.distributed._tensor._utils", NULL},
};
#define NKNOWN ((int)(sizeof known / sizeof *known))

/* Packages whose every module tpcc knows: a module under them that is not
 * listed does not exist (Python's ModuleNotFoundError). */
static const char *const owned_packages[] = {"torch.distributed.tensor", "torch.distributed._tensor"};

/* The classes a plan's values construct (the styles of plan/styles.def
 * and the placements plan.c's read_placement reads), and where PyTorch
 * defines them (what the help of a wrong import names). */
static const char *const plan_classes[] = {
#define STYLE(NAME, class, ...) #class,
#include "compiler/plan/styles.def"
#undef STYLE
    "Shard", "Replicate", "Partial", NULL};

static const char *home_of(const char *cls)
{
    return !strcmp(cls, "Shard") || !strcmp(cls, "Replicate") || !strcmp(cls, "Partial")
               ? "torch.distributed.tensor"
               : "torch.distributed.tensor.parallel";
}

static const known_module *find_module(const char *path)
{
    for (int i = 0; i < NKNOWN; i++)
        if (!strcmp(known[i].path, path))
            return &known[i];
    return NULL;
}

static bool in_list(const char *const *names, const char *name)
{
    for (; *names; names++)
        if (!strcmp(*names, name))
            return true;
    return false;
}

static int list_len(const char *const *names)
{
    int n = 0;
    while (names[n])
        n++;
    return n;
}

static bool under_owned_package(const char *path)
{
    for (size_t i = 0; i < sizeof owned_packages / sizeof *owned_packages; i++) {
        size_t n = strlen(owned_packages[i]);
        if (!strncmp(path, owned_packages[i], n) && (!path[n] || path[n] == '.'))
            return true;
    }
    return false;
}

/* ---- the table ---- */

void tp_pynames_init(tp_pynames *n, const tp_node *file, tp_config *c)
{
    memset(n, 0, sizeof *n);
    n->file = file;
    n->c = c;
    n->d = c->diags;
}

void tp_pynames_free(tp_pynames *n)
{
    for (int i = 0; i < n->count; i++) {
        free(n->items[i].name);
        free(n->items[i].module);
        free(n->items[i].target);
    }
    free(n->items);
    tp_map_free(&n->index);
    memset(n, 0, sizeof *n);
}

/* Later bindings replace earlier ones, as Python rebinds a name. */
static void bind(tp_pynames *n, const char *name, tp_pyname_kind kind, const char *module, const char *target)
{
    int64_t i = tp_map_puts(&n->index, name, n->count);
    tp_pyname *b = i < n->count ? &n->items[i] : NULL;
    if (b) {
        free(b->name);
        free(b->module);
        free(b->target);
    } else {
        n->items = tp_xgrow(n->items, n->count, &n->cap, sizeof *n->items, 8);
        b = &n->items[n->count++];
    }
    b->name = tp_xstrdup(name);
    b->kind = kind;
    b->module = module ? tp_xstrdup(module) : NULL;
    b->target = target ? tp_xstrdup(target) : NULL;
}

static const tp_pyname *lookup(const tp_pynames *n, const char *name)
{
    int64_t i = tp_map_gets(&n->index, name);
    return i >= 0 ? &n->items[i] : NULL;
}

bool tp_pynames_is_binding(const tp_node *item)
{
    return item->kind == N_FROM_IMPORT || item->kind == N_IMPORT || item->kind == N_ASSIGN ||
           item->kind == N_UNPACK;
}

/* ---- import lines ---- */

/* "torch.distributed.tensor.paralel": Python's ModuleNotFoundError, with
 * the known module it was probably meant to be. */
static void report_no_module(tp_pynames *n, const tp_node *at, const char *path)
{
    tp_diag *g = tp_diag_add(n->d, TP_ERROR, at->span, "plan", "No module named '%s'", path);
    const char *paths[NKNOWN];
    for (int i = 0; i < NKNOWN; i++)
        paths[i] = known[i].path;
    const char *best = tp_suggest(path, paths, NKNOWN);
    if (best)
        tp_diag_help(g, "did you mean '%s'?", best);
}

/* from M import name: Python's ImportError when M lacks it, with where a
 * class a plan uses really lives, or the closest name M has. */
static void report_not_in_module(tp_pynames *n, const tp_node *at, const known_module *m, const char *name)
{
    tp_diag *g = tp_diag_add(n->d, TP_ERROR, at->span, "plan", "cannot import name '%s' from '%s'", name, m->path);
    if (in_list(plan_classes, name)) {
        tp_diag_help(g, "%s is in %s: from %s import %s", name, home_of(name), home_of(name), name);
        return;
    }
    const char *best = tp_suggest(name, m->names, list_len(m->names));
    if (best)
        tp_diag_help(g, "did you mean '%s'?", best);
}

static void bind_from(tp_pynames *n, const tp_node *item)
{
    const known_module *m = find_module(item->str);
    if (!m && under_owned_package(item->str)) {
        report_no_module(n, item, item->str);
        return;
    }
    for (int i = 0; i < item->nkids; i++) {
        const tp_node *a = item->kids[i];
        const char *as = a->str ? a->str : a->name;
        char *sub = tp_xasprintf("%s.%s", item->str, a->name);
        if (find_module(sub))
            bind(n, as, TP_PYNAME_MODULE, sub, NULL);
        else if (!m || !m->names)
            bind(n, as, TP_PYNAME_FOREIGN, item->str, a->name);
        else if (!in_list(m->names, a->name))
            report_not_in_module(n, a, m, a->name);
        else
            bind(n, as, TP_PYNAME_CLASS, m->path, a->name);
        free(sub);
    }
}

/* import a.b.c binds a (the package, through which a.b.c is reached);
 * import a.b.c as x binds x to a.b.c itself. */
static void bind_import(tp_pynames *n, const tp_node *item)
{
    if (!find_module(item->str) && under_owned_package(item->str)) {
        report_no_module(n, item, item->str);
        return;
    }
    if (item->name) {
        bind(n, item->name, TP_PYNAME_MODULE, item->str, NULL);
        return;
    }
    char *head = tp_xstrdup(item->str);
    char *dot = strchr(head, '.');
    if (dot)
        *dot = '\0';
    bind(n, head, TP_PYNAME_MODULE, head, NULL);
    free(head);
}

/* ---- names in values ---- */

/* The k-th name the binding item `it` gives (with its alias node for an
 * import line, else NULL), or NULL past the last. `import a.b` binds a,
 * which a plan's values never use by itself: it counts for nothing here. */
static const char *bound_name(const tp_node *it, int k, const tp_node **alias)
{
    *alias = NULL;
    if (it->kind == N_FROM_IMPORT) {
        if (k >= it->nkids)
            return NULL;
        *alias = it->kids[k];
        return it->kids[k]->str ? it->kids[k]->str : it->kids[k]->name;
    }
    if (it->kind == N_ASSIGN || it->kind == N_IMPORT)
        return k == 0 ? it->name : NULL;
    return k + 1 < it->nkids ? it->kids[k]->name : NULL;
}

/* The line of a binding of `name` after the point `at`, or 0. */
static int bound_later(const tp_pynames *n, const char *name, tp_span at)
{
    for (int i = 0; i < n->file->nkids; i++) {
        const tp_node *it = n->file->kids[i];
        if (!tp_pynames_is_binding(it) || it->span.offset < at.offset)
            continue;
        const tp_node *alias;
        const char *bound;
        for (int k = 0; (bound = bound_name(it, k, &alias)); k++)
            if (!strcmp(bound, name))
                return it->span.line;
    }
    return 0;
}

/* Whether the class name `cls` means PyTorch's class everywhere in the
 * file: bound nowhere, or only by importing it under its own name from a
 * module that has it. A file that binds it to anything else, at any line
 * (RowwiseParallel as ColwiseParallel), makes a rename to it a change of
 * meaning, not a fix. */
static bool means_the_class(const tp_pynames *n, const char *cls)
{
    for (int i = 0; i < n->file->nkids; i++) {
        const tp_node *it = n->file->kids[i];
        if (!tp_pynames_is_binding(it))
            continue;
        const tp_node *alias;
        const char *bound;
        for (int k = 0; (bound = bound_name(it, k, &alias)); k++) {
            if (strcmp(bound, cls))
                continue;
            const known_module *m = alias ? find_module(it->str) : NULL;
            if (!m || !m->names || strcmp(alias->name, cls) || !in_list(m->names, cls))
                return false;
        }
    }
    return true;
}

/* NameError, with the name meant: a class of the same letters (fixed by
 * --fix), else the closest bound or class name. */
static void report_undefined(tp_pynames *n, const tp_node *use)
{
    const char *name = use->name;
    tp_diag *g = tp_diag_add(n->d, TP_ERROR, use->span, "plan", "name '%s' is not defined", name);
    int later = bound_later(n, name, use->span);
    if (later) {
        tp_diag_help(g, "'%s' is bound at line %d, after its use here; a name holds from its line on, as in Python",
                     name, later);
        return;
    }
    for (const char *const *c = plan_classes; *c; c++)
        if (tp_same_folded(name, *c)) {
            tp_diag_help(g, "did you mean '%s'? (or bind '%s' first: from %s import %s as %s)", *c, name,
                         home_of(*c), *c, name);
            if (means_the_class(n, *c))
                tp_diag_fixit(g, use->span, *c);
            else
                tp_diag_help(g, "--fix leaves it: this file binds '%s' to something else", *c);
            return;
        }
    int count = list_len(plan_classes);
    const char **names = tp_xmalloc((size_t)(count + n->count) * sizeof *names);
    memcpy(names, plan_classes, (size_t)count * sizeof *names);
    for (int i = 0; i < n->count; i++)
        names[count + i] = n->items[i].name;
    const char *best = tp_suggest(name, names, count + n->count);
    if (best)
        tp_diag_help(g, "did you mean '%s'?", best);
    free(names);
}

/* a.b.C as "a.b.C", or NULL when the chain is not names only. */
static char *dotted_text(const tp_node *e)
{
    if (e->kind == N_NAME)
        return tp_xstrdup(e->name);
    if (e->kind != N_ATTR)
        return NULL;
    char *head = dotted_text(e->kids[0]);
    if (!head)
        return NULL;
    char *s = tp_xasprintf("%s.%s", head, e->name);
    free(head);
    return s;
}

static const tp_node *chain_head(const tp_node *e)
{
    while (e->kind == N_ATTR)
        e = e->kids[0];
    return e;
}

/* The class a callee names: its own name ("ColwiseParallel") in *cls, and
 * its module in *module (NULL for a bare class name or one tpcc does not
 * know). Returns false after reporting. */
static bool resolve(tp_pynames *n, const tp_node *callee, char **cls, char **module, bool *foreign)
{
    *cls = *module = NULL;
    *foreign = false;
    const tp_node *head = chain_head(callee);
    if (head->kind != N_NAME) {
        tp_diag_add(n->d, TP_ERROR, callee->span, "plan", "expected a PyTorch class here, such as ColwiseParallel");
        return false;
    }
    const tp_pyname *b = lookup(n, head->name);
    if (callee->kind == N_NAME) {
        if (!b) {
            if (!in_list(plan_classes, head->name)) {
                report_undefined(n, head);
                return false;
            }
            *cls = tp_xstrdup(head->name);
            return true;
        }
        if (b->kind == TP_PYNAME_MODULE) {
            tp_diag_add(n->d, TP_ERROR, callee->span, "plan", "'%s' is the module %s, not a class", b->name,
                        b->module);
            return false;
        }
        *cls = tp_xstrdup(b->target);
        *module = b->module ? tp_xstrdup(b->module) : NULL;
        *foreign = b->kind == TP_PYNAME_FOREIGN;
        return true;
    }
    if (!b) {
        report_undefined(n, head);
        return false;
    }
    if (b->kind != TP_PYNAME_MODULE) {
        tp_diag_add(n->d, TP_ERROR, callee->span, "plan", "'%s' is %s%s%s, not a module", b->name,
                    b->module ? b->module : "", b->module ? "." : "", b->target);
        return false;
    }
    /* module.rest.Class: the path below the bound module, then the class */
    char *text = dotted_text(callee);
    if (!text) {
        tp_diag_add(n->d, TP_ERROR, callee->span, "plan", "expected a PyTorch class here, such as ColwiseParallel");
        return false;
    }
    char *last = strrchr(text, '.');
    *last = '\0';
    char *path = tp_xasprintf("%s%s", b->module, text + strlen(head->name));
    const known_module *m = find_module(path);
    bool ok = true;
    if (m && m->names && !in_list(m->names, last + 1)) {
        tp_diag *g = tp_diag_add(n->d, TP_ERROR, callee->span, "plan", "module '%s' has no attribute '%s'", path,
                                 last + 1);
        const char *best = in_list(plan_classes, last + 1) ? NULL : tp_suggest(last + 1, m->names, list_len(m->names));
        if (in_list(plan_classes, last + 1))
            tp_diag_help(g, "%s is in %s", last + 1, home_of(last + 1));
        else if (best)
            tp_diag_help(g, "did you mean '%s'?", best);
        ok = false;
    } else if (!m && under_owned_package(path)) {
        report_no_module(n, callee, path);
        ok = false;
    } else {
        *cls = tp_xstrdup(last + 1);
        *module = tp_xstrdup(path);
        *foreign = !m || !m->names;
    }
    free(path);
    free(text);
    return ok;
}

/* ---- conditions ---- */

/* A name in a condition must be a configuration value: the flags of the
 * training script (loss_parallel, enable_float8) are the plan's config. */
static bool names_are_config(tp_pynames *n, const tp_node *e)
{
    if (e->kind == N_NAME && !tp_config_has(n->c, e->name)) {
        tp_diag *g = tp_diag_add(n->d, TP_ERROR, e->span, "config",
                                 "'%s' in this condition is not a configuration value: a plan's conditions are "
                                 "evaluated from its config (the config { } block, -D, the model's defaults)",
                                 e->name);
        const char **names = tp_xmalloc((size_t)(n->c->count + 1) * sizeof *names);
        for (int i = 0; i < n->c->count; i++)
            names[i] = n->c->items[i].name;
        const char *best = tp_suggest(e->name, names, n->c->count);
        if (best)
            tp_diag_help(g, "did you mean '%s'?", best);
        else
            tp_diag_help(g, "set it in the plan: config { %s = True } (or -D %s=true)", e->name, e->name);
        free(names);
        return false;
    }
    bool ok = true;
    for (int i = 0; i < e->nkids; i++)
        ok &= names_are_config(n, e->kids[i]);
    return ok;
}

static bool truth(tp_pynames *n, const tp_node *e, bool *out)
{
    int64_t v;
    if (!names_are_config(n, e) || !tp_eval_int(n->c, e, &v))
        return false;
    *out = v != 0;
    return true;
}

static bool is_boolean_expr(const tp_node *e)
{
    return e->kind == N_NOT || (e->kind == N_BINOP && (e->op == 'A' || e->op == 'O' || e->op == 'E' || e->op == 'N'));
}

/* ---- desugaring ---- */

/* Rewrite *e in place; false after reporting. */
static bool desugar(tp_pynames *n, tp_node **e)
{
    tp_node *x = *e;
    if (x->kind == N_COND) {
        bool c;
        if (!truth(n, x->kids[1], &c))
            return false;
        tp_node *chosen = x->kids[c ? 0 : 2];
        x->kids[c ? 0 : 2] = NULL;
        tp_node_free(x);
        *e = chosen;
        return desugar(n, e);
    }
    if (is_boolean_expr(x)) {
        bool c;
        if (!truth(n, x, &c))
            return false;
        tp_node *lit = tp_node_new(c ? N_TRUE : N_FALSE, x->span);
        tp_node_free(x);
        *e = lit;
        return true;
    }
    bool ok = true;
    if (x->kind == N_CALL && x->nkids > 0) {
        char *cls, *module;
        bool foreign;
        if (!resolve(n, x->kids[0], &cls, &module, &foreign))
            return false;
        if (foreign) {
            tp_diag *g = tp_diag_unsupported(n->d, x->kids[0]->span,
                                             "%s comes from %s, which tpcc does not read: it knows PyTorch's "
                                             "parallel styles and placements, and would need that module's",
                                             cls, module);
            tp_diag_help(g, "check and run the plan with PyTorch itself, or use PyTorch's styles here");
            ok = false;
        }
        tp_node *name = tp_node_new(N_NAME, x->kids[0]->span);
        name->name = cls;
        free(module);
        tp_node_free(x->kids[0]);
        x->kids[0] = name;
        for (int i = 1; i < x->nkids; i++)
            ok &= desugar(n, &x->kids[i]);
        return ok;
    }
    for (int i = 0; i < x->nkids; i++)
        ok &= desugar(n, &x->kids[i]);
    return ok;
}

tp_node *tp_pynames_desugar(tp_pynames *n, const tp_node *value)
{
    tp_node *copy = tp_node_clone(value);
    if (desugar(n, &copy))
        return copy;
    tp_node_free(copy);
    return NULL;
}

/* ---- top-level assignments ---- */

/* The names a value gives (a tuple gives one per element); its elements
 * are classes resolved as a callee would be. */
static void bind_assignment(tp_pynames *n, const tp_node *item)
{
    const tp_node *value = item->kids[item->nkids - 1];
    tp_node *v = tp_node_clone(value);
    /* a condition chooses the tuple; the rest are names, not calls */
    while (v->kind == N_COND) {
        bool c;
        if (!truth(n, v->kids[1], &c)) {
            tp_node_free(v);
            return;
        }
        tp_node *chosen = v->kids[c ? 0 : 2];
        v->kids[c ? 0 : 2] = NULL;
        tp_node_free(v);
        v = chosen;
    }
    int ntargets = item->kind == N_UNPACK ? item->nkids - 1 : 1;
    if (item->kind == N_UNPACK && v->kind != N_TUPLE) {
        /* a class is not a sequence: Python's TypeError */
        tp_diag_add(n->d, TP_ERROR, value->span, "plan",
                    "cannot unpack a single value into %d name%s: unpacking takes a tuple, a, b = (ColwiseParallel, "
                    "RowwiseParallel)", ntargets, ntargets == 1 ? "" : "s");
        tp_node_free(v);
        return;
    }
    int nvalues = item->kind == N_UNPACK ? v->nkids : 1;
    if (item->kind == N_UNPACK && nvalues != ntargets) {
        if (nvalues > ntargets)
            tp_diag_add(n->d, TP_ERROR, value->span, "plan", "too many values to unpack (expected %d)", ntargets);
        else
            tp_diag_add(n->d, TP_ERROR, value->span, "plan", "not enough values to unpack (expected %d, got %d)",
                        ntargets, nvalues);
        tp_node_free(v);
        return;
    }
    for (int i = 0; i < ntargets; i++) {
        const tp_node *elem = item->kind == N_UNPACK ? v->kids[i] : v;
        const char *target = item->kind == N_UNPACK ? item->kids[i]->name : item->name;
        char *cls, *module;
        bool foreign;
        if (elem->kind == N_TUPLE) {
            tp_diag_add(n->d, TP_ERROR, elem->span, "plan",
                        "a tuple of classes is bound by unpacking it: a, b = (ColwiseParallel, RowwiseParallel)");
            continue;
        }
        if (!resolve(n, elem, &cls, &module, &foreign))
            continue;
        bind(n, target, foreign ? TP_PYNAME_FOREIGN : TP_PYNAME_CLASS, module, cls);
        free(cls);
        free(module);
    }
    tp_node_free(v);
}

void tp_pynames_bind(tp_pynames *n, const tp_node *item)
{
    switch (item->kind) {
    case N_FROM_IMPORT: bind_from(n, item); break;
    case N_IMPORT: bind_import(n, item); break;
    case N_ASSIGN: case N_UNPACK: bind_assignment(n, item); break;
    default: break;
    }
}

void tp_pynames_reject_in_model(const tp_node *model_file, tp_diags *d)
{
    for (int i = 0; i < model_file->nkids; i++)
        if (tp_pynames_is_binding(model_file->kids[i]))
            tp_diag_add(d, TP_ERROR, model_file->kids[i]->span, "model",
                        "imports and names for PyTorch's classes belong in plan files; a model file declares "
                        "config, modules and hf");
}
