/* hf_check.c: config.json against the model file's hf { } block (see hf_check.h). */
#define _XOPEN_SOURCE 700   /* realpath */
#include <dirent.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "compiler/front/hf_check.h"
#include "compiler/front/hf_names.h"
#include "compiler/front/window.h"
#include "sched/rope.h"
#include "grammar/parse.h"
#include "util/map.h"
#include "util/xalloc.h"

/* Keys that change what a model computes, with the JSON value that changes
 * nothing (NULL: only null does). A model file that does not read such a
 * key with hf() gets an error when config.json gives it another value. */
static const struct math_key {
    const char *key;
    const char *neutral;
} math_keys[] = {
    {"num_local_experts", NULL}, {"num_experts", NULL}, {"num_experts_per_tok", NULL},
    {"n_routed_experts", NULL}, {"n_shared_experts", NULL}, {"moe_intermediate_size", NULL},
    {"shared_expert_intermediate_size", NULL},
    {"sliding_window", NULL}, {"attn_logit_softcapping", NULL}, {"final_logit_softcapping", NULL},
    {"query_pre_attn_scalar", NULL}, {"rope_scaling", NULL}, {"partial_rotary_factor", "1.0"},
    {"rotary_pct", "1.0"}, {"rotary_dim", NULL}, {"qk_layernorm", "false"}, {"use_qk_norm", "false"},
    {"hidden_act", NULL}, {"hidden_activation", NULL}, {"activation_function", NULL},
    {"attention_bias", "false"}, {"mlp_bias", "false"}, {"qkv_bias", "false"}, {"use_bias", "false"},
    {"pretraining_tp", "1"}, {"parallel_attn", "false"}, {"use_parallel_residual", "false"},
    {"alibi", "false"}, {"use_mrope", "false"}, {"clip_qkv", NULL}, {"embedding_multiplier", "1.0"}, {"logits_scaling", "1.0"},
    {"residual_multiplier", "1.0"}, {"attention_multiplier", NULL}, {"scale_attn_weights", "true"},
    {"scale_attn_by_inverse_layer_idx", "false"}, {"num_key_value_heads", NULL}, {"head_dim", NULL},
    {"rope_theta", NULL}, {"rms_norm_eps", NULL}, {"layer_norm_eps", NULL}, {"layer_norm_epsilon", NULL},
    {"tie_word_embeddings", "false"}, {"rope_parameters", NULL}, {"layer_types", NULL},
    {"use_bidirectional_attention", "false"},
};

/* Keys that make a mixture-of-experts model: tpcc has no expert layers yet. */
static const char *const expert_keys[] = {"num_local_experts", "num_experts", "n_routed_experts"};

/* What the check works on. Every lookup per config.json key goes through
 * a map built once (index_keys, index_reads, index_block): a scan per key
 * made a config.json of n keys cost n times its size. */
typedef struct hf_check {
    tp_config *c;
    tp_sources *src;
    json_t *json;
    int json_file;              /* config.json as a source, for spans; -1 if unreadable */
    const tp_node *block;       /* the model's hf { }, or NULL */
    const tp_node *model_ast, *plan_ast;
    const char *model_path;
    tp_map key_at;              /* a top-level key as written -> its index in key_spans */
    tp_span *key_spans;
    tp_map reads;               /* keys the model or plan reads with hf("key", ...) */
    tp_map member_reads;        /* keys whose members they read: hf("key.member", ...) */
    const tp_node *requires_dict;   /* hf { requires }, or NULL */
    tp_map requires;            /* its keys -> their index in it */
    tp_map understands;         /* hf { understands } keys */
} hf_check;

static bool in_table(const char *s, const char *const *table, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, table[i]))
            return true;
    return false;
}

static const tp_node *find_hf_block(const tp_node *file)
{
    for (int i = 0; i < file->nkids; i++)
        if (file->kids[i]->kind == N_HF)
            return file->kids[i];
    return NULL;
}

/* The value of field `name` in an hf { } block, or NULL. */
static const tp_node *field(const tp_node *block, const char *name)
{
    const tp_node *found = NULL;
    for (int i = 0; block && i < block->nkids; i++)
        if (block->kids[i]->kind == N_ASSIGN && !strcmp(block->kids[i]->name, name))
            found = block->kids[i]->kids[0];
    return found;
}

/* Does the tuple of strings `list` hold s? */
static bool lists(const tp_node *list, const char *s)
{
    for (int i = 0; list && i < list->nkids; i++)
        if (list->kids[i]->kind == N_STR && !strcmp(list->kids[i]->str, s))
            return true;
    return false;
}

/* "A, B" of a tuple of strings; malloc'ed. */
static char *joined(const tp_node *list)
{
    tp_buf b;
    tp_buf_init(&b);
    for (int i = 0; list && i < list->nkids; i++)
        tp_buf_appendf(&b, "%s%s", i ? ", " : "", list->kids[i]->str);
    return b.data ? tp_buf_take(&b) : tp_xstrdup("nothing");
}

static bool is_string_tuple(const tp_node *v)
{
    if (v->kind != N_TUPLE && v->kind != N_LIST)
        return false;
    for (int i = 0; i < v->nkids; i++)
        if (v->kids[i]->kind != N_STR)
            return false;
    return true;
}

static bool is_requires_dict(const tp_node *v)
{
    if (v->kind != N_DICT)
        return false;
    for (int i = 0; i < v->nkids; i++)
        if (v->kids[i]->kids[0]->kind != N_STR)
            return false;
    return true;
}

void tp_hf_check_block(tp_config *c, const tp_node *model_ast)
{
    const tp_node *block = find_hf_block(model_ast);
    for (int i = 0; block && i < model_ast->nkids; i++)
        if (model_ast->kids[i]->kind == N_HF && model_ast->kids[i] != block)
            tp_diag_add(c->diags, TP_ERROR, model_ast->kids[i]->span, "model",
                        "a model file has one hf { } block; merge this one into the first");
    for (int i = 0; block && i < block->nkids; i++) {
        const tp_node *a = block->kids[i];
        if (a->kind != N_ASSIGN)
            continue;
        bool tuple_field = !strcmp(a->name, "architectures") || !strcmp(a->name, "model_types") ||
                           !strcmp(a->name, "understands");
        if (tuple_field && !is_string_tuple(a->kids[0]))
            tp_diag_add(c->diags, TP_ERROR, a->kids[0]->span, "model",
                        "hf { %s } must be a tuple of strings: %s = (\"...\",)", a->name, a->name);
        else if (!strcmp(a->name, "requires") && !is_requires_dict(a->kids[0]))
            tp_diag_add(c->diags, TP_ERROR, a->kids[0]->span, "model",
                        "hf { requires } must be a dict from config.json keys to values: "
                        "requires = {\"hidden_act\": \"silu\"}");
        else if (!strcmp(a->name, "positions_from") && a->kids[0]->kind != N_STR)
            tp_diag_add(c->diags, TP_ERROR, a->kids[0]->span, "model",
                        "hf { positions_from } must be a module path: positions_from = \"model.embed_tokens\"");
        else if (!tuple_field && strcmp(a->name, "requires") && strcmp(a->name, "positions_from"))
            tp_diag_add(c->diags, TP_ERROR, a->span, "model",
                        "hf { } has no field '%s'; it takes architectures, model_types, understands, "
                        "requires and positions_from", a->name);
    }
}

void tp_hf_check_plan(tp_config *c, const tp_node *plan_ast)
{
    for (int i = 0; i < plan_ast->nkids; i++)
        if (plan_ast->kids[i]->kind == N_HF)
            tp_diag_add(c->diags, TP_ERROR, plan_ast->kids[i]->span, "plan",
                        "hf { } says what a model file implements; move it into the model file");
}

/* ---- config.json as a source: spans of its keys ---- */

/* Where each top-level key of config.json is written, in one pass over
 * the text (jansson has read it already, so it is valid JSON: a string at
 * depth 1 followed by ':' is a key of the top-level object). A key is
 * indexed as written between its quotes, so one spelled with an escape
 * (\u0041) is not found and its diagnostics carry no line. The first of
 * two equal keys is the one shown. */
static void index_keys(hf_check *k)
{
    if (k->json_file < 0)
        return;
    const tp_source_file *f = &k->src->files[k->json_file];
    const char *text = f->text, *end = f->text + f->size, *line_start = text;
    int depth = 0, line = 1, nspans = 0, cap = 0;
    for (const char *p = text; p < end; p++) {
        if (*p == '\n') {
            line++;
            line_start = p + 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        } else if (*p == '"') {
            const char *open = p++;
            while (p < end && *p != '"')
                p += *p == '\\' ? 2 : 1;        /* a string holds no raw newline */
            if (p >= end)
                break;
            const char *after = p + 1 + strspn(p + 1, " \t\r\n");
            if (depth != 1 || after >= end || *after != ':')
                continue;
            k->key_spans = tp_xgrow(k->key_spans, nspans, &cap, sizeof *k->key_spans, 32);
            k->key_spans[nspans] = (tp_span){k->json_file, line, (int)(open - line_start) + 1, (int)(open - text),
                                             (int)(p - open) + 1};
            tp_map_put(&k->key_at, open + 1, (size_t)(p - open - 1), nspans++);
        }
    }
}

/* The span of "key": in config.json's text, or TP_NO_SPAN. */
static tp_span key_span(const hf_check *k, const char *key)
{
    int64_t i = tp_map_gets(&k->key_at, key);
    return i >= 0 ? k->key_spans[i] : TP_NO_SPAN;
}

/* A JSON value as a message shows it; malloc'ed. */
static char *json_text(const json_t *v)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    return s ? s : tp_xstrdup("?");
}

static const char *json_string_at(const json_t *json, const char *key)
{
    return json_string_value(json_object_get(json, key));
}

/* ---- the architecture ---- */

/* "a MixtralForCausalLM (model_type 'mixtral')"; malloc'ed. */
static char *describe_config(const json_t *json)
{
    const json_t *archs = json_object_get(json, "architectures");
    const char *arch = json_string_value(json_array_get(archs, 0));
    const char *type = json_string_at(json, "model_type");
    if (arch && type)
        return tp_xasprintf("a %s (model_type '%s')", arch, type);
    return arch ? tp_xasprintf("a %s", arch) : tp_xasprintf("model_type '%s'", type);
}

static bool config_is_moe(const json_t *json)
{
    const char *type = json_string_at(json, "model_type");
    if (type && tp_hf_moe_model_type(type))
        return true;
    for (size_t i = 0; i < sizeof expert_keys / sizeof *expert_keys; i++)
        if (json_integer_value(json_object_get(json, expert_keys[i])) > 0)
            return true;
    return false;
}

/* Does the model file at path list value in its hf { } field `name`? */
static bool file_lists(const char *path, const char *name, const char *value)
{
    tp_sources src;
    tp_diags diags;
    tp_sources_init(&src);
    tp_diags_init(&diags);
    char err[256];
    bool found = false;
    int id = tp_sources_load(&src, path, err, sizeof err);
    if (id >= 0) {
        tp_node *ast = tp_parse(&src, id, &diags);
        found = lists(field(find_hf_block(ast), name), value);
        tp_node_free(ast);
    }
    tp_diags_free(&diags);
    tp_sources_free(&src);
    return found;
}

/* Whether path really is in the directory real_dir (resolved): a
 * symlink beside the model pointing elsewhere is not read, as the plan
 * could not have named its target (driver/input_roots.h). */
static bool really_in(const char *path, const char *real_dir)
{
    char *real = realpath(path, NULL);
    char *slash = real ? strrchr(real, '/') : NULL;
    bool in = slash && strlen(real_dir) == (size_t)(slash - real) + (slash == real) &&
              !strncmp(real, real_dir, strlen(real_dir));
    free(real);
    return in;
}

bool tp_hf_model_implements_type(const char *model_path, const char *model_type)
{
    return file_lists(model_path, "model_types", model_type);
}

/* The first (by name) other .model file beside model_path that implements
 * arch, or NULL; malloc'ed. */
static char *sibling_implementing(const char *model_path, const char *arch)
{
    const char *slash = strrchr(model_path, '/');
    char *dir = slash ? tp_xstrndup(model_path, (size_t)(slash - model_path)) : tp_xstrdup(".");
    char *best = NULL;
    char *real_dir = realpath(dir, NULL);
    DIR *d = real_dir ? opendir(dir) : NULL;
    for (struct dirent *ent; d && (ent = readdir(d));) {
        size_t len = strlen(ent->d_name);
        if (len < 7 || strcmp(ent->d_name + len - 6, ".model"))
            continue;
        char *path = slash ? tp_xasprintf("%s/%s", dir, ent->d_name) : tp_xstrdup(ent->d_name);
        if (strcmp(path, model_path) && (!best || strcmp(path, best) < 0) && really_in(path, real_dir) &&
            file_lists(path, "architectures", arch)) {
            free(best);
            best = path;
        } else {
            free(path);
        }
    }
    if (d)
        closedir(d);
    free(real_dir);
    free(dir);
    return best;
}

/* How to go on when config.json is another architecture. */
static void help_other_architecture(const hf_check *k, tp_diag *g)
{
    const char *arch = json_string_value(json_array_get(json_object_get(k->json, "architectures"), 0));
    char *other = arch ? sibling_implementing(k->model_path, arch) : NULL;
    if (other)
        tp_diag_help(g, "%s implements %s: name it in the plan's model line", other, arch);
    else
        tp_diag_help(g, "write a model file for it, declaring hf { architectures = (\"%s\",) }",
                     arch ? arch : "...");
    free(other);
}

/* false when config.json names an architecture or model_type the model
 * file does not implement. */
static bool check_architecture(const hf_check *k, tp_span model_ref)
{
    const json_t *archs = json_object_get(k->json, "architectures");
    const tp_node *implemented = field(k->block, "architectures");
    bool arch_ok = json_array_size(archs) == 0;
    for (size_t i = 0; i < json_array_size(archs); i++)
        arch_ok |= json_is_string(json_array_get(archs, i)) &&
                   lists(implemented, json_string_value(json_array_get(archs, i)));
    const char *type = json_string_at(k->json, "model_type");
    bool type_ok = !type || lists(field(k->block, "model_types"), type);
    if (arch_ok && type_ok)
        return true;
    char *config = describe_config(k->json), *impl = joined(implemented);
    char *types = joined(field(k->block, "model_types"));
    if (config_is_moe(k->json)) {
        /* no model file can implement it: not the plan's mistake */
        tp_diag *g = tp_diag_unsupported(k->c->diags, model_ref, "%s is %s, a mixture-of-experts model: tpcc "
                                         "would need expert layers (the router, the experts and their styles) to "
                                         "check or compile it", k->c->hf_path, config);
        tp_diag_help(g, "check and run the plan with PyTorch itself; tpcc checks dense models only");
    } else {
        tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, model_ref, "hf-architecture",
                                 "%s is %s; %s implements %s (model_type '%s')", k->c->hf_path, config,
                                 k->model_path, impl, types);
        help_other_architecture(k, g);
    }
    free(config);
    free(impl);
    free(types);
    return false;
}

/* ---- the keys ---- */

/* Record every key a config expression reads with hf("key", ...), and
 * every object whose member it reads: hf("rope_scaling.factor", ...)
 * reads a member of rope_scaling. */
static void index_expr_reads(hf_check *k, const tp_node *e)
{
    const char *read = tp_config_hf_key(e);
    if (read) {
        tp_map_puts(&k->reads, read, 1);
        for (const char *dot = strchr(read, '.'); dot; dot = strchr(dot + 1, '.'))
            tp_map_put(&k->member_reads, read, (size_t)(dot - read), 1);
    }
    for (int i = 0; i < e->nkids; i++)
        index_expr_reads(k, e->kids[i]);
}

static void index_reads(hf_check *k, const tp_node *file)
{
    for (int i = 0; file && i < file->nkids; i++)
        if (file->kids[i]->kind == N_CONFIG)
            index_expr_reads(k, file->kids[i]);
}

/* hf { requires } and hf { understands }, by key. */
static void index_block(hf_check *k)
{
    const tp_node *dict = field(k->block, "requires");
    k->requires_dict = dict && dict->kind == N_DICT ? dict : NULL;
    for (int i = 0; k->requires_dict && i < dict->nkids; i++)
        if (dict->kids[i]->kids[0]->kind == N_STR)
            tp_map_puts(&k->requires, dict->kids[i]->kids[0]->str, i);
    const tp_node *list = field(k->block, "understands");
    for (int i = 0; list && i < list->nkids; i++)
        if (list->kids[i]->kind == N_STR)
            tp_map_puts(&k->understands, list->kids[i]->str, i);
}

/* The value the model's hf { requires } gives key, or NULL. */
static const tp_node *required_value(const hf_check *k, const char *key)
{
    int64_t i = tp_map_gets(&k->requires, key);
    return i >= 0 ? k->requires_dict->kids[i]->kids[1] : NULL;
}

static const struct math_key *find_math_key(const char *key)
{
    for (size_t i = 0; i < sizeof math_keys / sizeof *math_keys; i++)
        if (!strcmp(math_keys[i].key, key))
            return &math_keys[i];
    return NULL;
}

/* JSON values equal as Python compares them: 1 == 1.0. */
static bool json_same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

/* Does v hold the value of math key m that changes nothing? */
static bool is_neutral(const struct math_key *m, const json_t *v)
{
    json_t *neutral = m && m->neutral ? json_loads(m->neutral, JSON_DECODE_ANY, NULL) : NULL;
    bool harmless = neutral && json_same(v, neutral);
    json_decref(neutral);
    return harmless;
}

/* Does config.json's v equal the value want of a requires entry? */
static bool matches_required(tp_config *c, const json_t *v, const tp_node *want)
{
    switch (want->kind) {
    case N_STR: return json_is_string(v) && !strcmp(json_string_value(v), want->str);
    case N_NONE: return json_is_null(v);
    case N_TRUE: case N_FALSE: return json_is_boolean(v) && json_is_true(v) == (want->kind == N_TRUE);
    default: {
        tp_cfg_value x;
        return tp_eval_value(c, want, &x) && json_is_number(v) && json_number_value(v) == tp_cfg_real(x);
    }
    }
}

static void check_required(const hf_check *k, const char *key, const json_t *v, const tp_node *want)
{
    if (matches_required(k->c, v, want))
        return;
    char *got = json_text(v), *wanted = tp_expr_text(want);
    char *top = tp_xasprintf("%.*s", (int)strcspn(key, "."), key);   /* a member's object: where it is */
    tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, top), "hf-key",
                             "%s sets %s to %s; %s computes %s = %s only", k->c->hf_path, key, got,
                             k->model_path, key, wanted);
    tp_diag_help(g, "use a model file that computes %s = %s, or correct %s", key, got, k->c->hf_path);
    free(top);
    free(got);
    free(wanted);
}

/* A sliding window shorter than seq masks what the model file attends to;
 * one at least as long as seq changes nothing. Qwen2 turns it off with
 * use_sliding_window false. */
static bool window_masks_nothing(const hf_check *k, const json_t *v, int64_t *seq)
{
    bool has_seq = tp_config_has(k->c, "seq") && tp_config_get(k->c, "seq", TP_NO_SPAN, seq);
    return !v || json_is_null(v) || json_is_false(json_object_get(k->json, "use_sliding_window")) ||
           (json_is_number(v) && has_seq && json_number_value(v) >= (double)*seq);
}

/* The sliding window config.json sets, or 0: none (null, or
 * use_sliding_window false). tpcc's attention attends to every earlier
 * position, so seq must stay within it. */
static int64_t config_window(const hf_check *k)
{
    const json_t *v = json_object_get(k->json, "sliding_window");
    if (!json_is_number(v) || json_is_false(json_object_get(k->json, "use_sliding_window")))
        return 0;
    return (int64_t)json_number_value(v);
}

/* The config's tp (1 when it has none). */
static int64_t config_tp(const hf_check *k)
{
    int64_t tp = 1;
    return tp_config_has(k->c, "tp") && tp_config_get(k->c, "tp", TP_NO_SPAN, &tp) && tp > 0 ? tp : 1;
}

static void check_sliding_window(const hf_check *k, const json_t *v)
{
    int64_t seq = 0;
    if (window_masks_nothing(k, v, &seq))
        return;
    if (!json_is_number(v)) {
        char *window = json_text(v);
        tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, "sliding_window"), "hf-key",
                                 "%s sets sliding_window to %s: transformers takes a number of positions, or null",
                                 k->c->hf_path, window);
        tp_diag_help(g, "correct %s", k->c->hf_path);
        free(window);
        return;
    }
    int64_t window = config_window(k);
    tp_diag *g = tp_diag_unsupported(k->c->diags, key_span(k, "sliding_window"),
                                     "%s sets sliding_window %lld, below seq %lld: each position attends to only "
                                     "the last %lld positions, and %s attends to all of them: " TP_WINDOW_NEEDS,
                                     k->c->hf_path, (long long)window, (long long)seq, (long long)window,
                                     k->model_path);
    tp_window_help(g, window, config_tp(k));
}

/* The RoPE type of a rope_scaling or rope_parameters object, or NULL. */
static const char *rope_type_of(const json_t *v)
{
    const char *type = json_string_value(json_object_get(v, "rope_type"));
    return type ? type : json_string_value(json_object_get(v, "type"));
}

/* A RoPE type transformers computes and rope() does not (longrope). */
static bool rope_type_unsupported(const char *type)
{
    return type && tp_hf_rope_type_defined(type) && tp_rope_type_parse(type) < 0;
}

/* What tpcc would need for a RoPE type rope() does not compute. */
static void report_rope_type(const hf_check *k, const char *key, const char *type)
{
    tp_diag *g = tp_diag_unsupported(k->c->diags, key_span(k, key),
                                     "%s sets %s type '%s', which transformers computes: tpcc would need its "
                                     "frequencies in rope() (it computes default, linear, dynamic, llama3 and yarn)",
                                     k->c->hf_path, key, type);
    tp_diag_help(g, "check and run the plan with PyTorch itself, or use a checkpoint without RoPE scaling");
}

/* rope_scaling or rope_parameters in a model file that does not read it:
 * only HF's "default" type (absent in rope_parameters) is unscaled RoPE. */
static void check_rope_scaling(const hf_check *k, const char *key, const json_t *v)
{
    const char *type = rope_type_of(v);
    if (type ? !strcmp(type, "default") : !strcmp(key, "rope_parameters"))
        return;                 /* HF's name for unscaled RoPE */
    if (rope_type_unsupported(type)) {
        report_rope_type(k, key, type);
        return;
    }
    tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, key), "hf-key",
                             "%s: %s type '%s'; %s computes unscaled RoPE", k->c->hf_path, key, type ? type : "?",
                             k->model_path);
    if (type && !tp_hf_rope_type_defined(type))
        tp_diag_help(g, "transformers defines no RoPE type '%s' either (ROPE_INIT_FUNCTIONS): correct %s", type,
                     k->c->hf_path);
    else
        tp_diag_help(g, "use a model file that reads %s, or compile at a length the checkpoint supports "
                        "without it", key);
}

/* Does the model or the plan read key, or a member of it? */
static bool model_or_plan_reads(const hf_check *k, const char *key)
{
    return tp_map_gets(&k->reads, key) >= 0 || tp_map_gets(&k->member_reads, key) >= 0;
}

static bool model_or_plan_reads_member(const hf_check *k, const char *key)
{
    return tp_map_gets(&k->member_reads, key) >= 0;
}

/* An object the model reads member by member (rope_parameters,
 * rope_scaling): a member it does not read is an error unless it holds the
 * value that changes nothing (partial_rotary_factor 1.0, null). Members
 * in `handled` (NULL-terminated, or NULL) are checked by the caller. */
static void check_members(const hf_check *k, const char *key, const json_t *object, const char *const *handled)
{
    const char *member;
    json_t *v;
    json_object_foreach((json_t *)object, member, v) {
        bool skip = false;
        for (int i = 0; handled && handled[i]; i++)
            skip |= !strcmp(member, handled[i]);
        char *dotted = tp_xasprintf("%s.%s", key, member);
        if (!skip && !model_or_plan_reads(k, dotted) && !json_is_null(v) && !is_neutral(find_math_key(member), v)) {
            char *value = json_text(v);
            tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, key), "hf-key",
                                     "%s sets %s to %s, and %s does not read it", k->c->hf_path, dotted, value,
                                     k->model_path);
            tp_diag_help(g, "use a model file that reads it with hf(\"%s\", ...), or remove it from %s "
                            "if the checkpoint does not use it", dotted, k->c->hf_path);
            free(value);
        }
        free(dotted);
    }
}

/* layer_types (transformers 5 writes it for Qwen2 and Qwen3): each layer's
 * attention. "full_attention" is what the model files compute; a
 * "sliding_attention" layer is too while its window masks nothing. */
static void check_layer_types(const hf_check *k, const json_t *v)
{
    const json_t *window = json_object_get(k->json, "sliding_window");
    int64_t seq = 0;
    bool window_harmless = window_masks_nothing(k, window, &seq);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *type = json_string_value(json_array_get(v, i));
        if (type && (!strcmp(type, "full_attention") || (!strcmp(type, "sliding_attention") && window_harmless)))
            continue;
        char *what = json_text(json_array_get(v, i));
        if (type && !strcmp(type, "sliding_attention") && json_is_number(window)) {
            tp_diag *g = tp_diag_unsupported(k->c->diags, key_span(k, "layer_types"),
                                             "%s: layer_types[%zu] is %s with a sliding_window below seq %lld, and %s "
                                             "attends to all of them: " TP_WINDOW_NEEDS, k->c->hf_path, i, what,
                                             (long long)seq, k->model_path);
            tp_window_help(g, (int64_t)json_number_value(window), config_tp(k));
        } else {
            tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, "layer_types"), "hf-key",
                                     "%s: layer_types[%zu] is %s, and %s computes full causal attention in every "
                                     "layer", k->c->hf_path, i, what, k->model_path);
            tp_diag_help(g, "use a model file that computes it");
        }
        free(what);
        return;
    }
    if (!json_is_array(v))
        tp_diag_add(k->c->diags, TP_ERROR, key_span(k, "layer_types"), "hf-key",
                    "%s: layer_types must be a list of strings", k->c->hf_path);
}

/* rope_parameters (transformers 5) in a model file that reads no RoPE
 * value: only plain RoPE at HF's default theta computes what it computes. */
static void check_rope_parameters(const hf_check *k, const json_t *v)
{
    static const char *const handled[] = {"rope_type", "type", "rope_theta", NULL};
    const json_t *theta = json_object_get(v, "rope_theta");
    check_rope_scaling(k, "rope_parameters", v);
    if (rope_type_unsupported(rope_type_of(v)))
        return;                 /* its members are the type's */
    check_members(k, "rope_parameters", v, handled);
    if (theta && !(json_is_number(theta) && json_number_value(theta) == 10000.0)) {
        char *value = json_text(theta);
        tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, "rope_parameters"), "hf-key",
                                 "%s sets rope_parameters.rope_theta to %s, and %s does not read it",
                                 k->c->hf_path, value, k->model_path);
        tp_diag_help(g, "use a model file that reads it with hf(\"rope_parameters.rope_theta\", ...)");
        free(value);
    }
}

static void check_math_key(const hf_check *k, const char *key, const json_t *v, const struct math_key *m)
{
    if (json_is_null(v))
        return;                 /* HF's "off" */
    if (!strcmp(key, "sliding_window")) {
        check_sliding_window(k, v);
        return;
    }
    if (!strcmp(key, "layer_types")) {
        check_layer_types(k, v);
        return;
    }
    if (!strcmp(key, "rope_scaling")) {
        check_rope_scaling(k, key, v);
        return;
    }
    if (!strcmp(key, "rope_parameters")) {
        check_rope_parameters(k, v);
        return;
    }
    if (is_neutral(m, v))
        return;
    char *value = json_text(v);
    if (in_table(key, expert_keys, sizeof expert_keys / sizeof *expert_keys)) {
        tp_diag *g = tp_diag_unsupported(k->c->diags, key_span(k, key),
                                         "%s sets %s to %s, a mixture-of-experts model: tpcc would need expert "
                                         "layers (the router, the experts and their styles) to compute it",
                                         k->c->hf_path, key, value);
        tp_diag_help(g, "check and run the plan with PyTorch itself; tpcc checks dense models only");
    } else {
        tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, key), "hf-key",
                                 "%s sets %s to %s, which changes what the model computes, and %s "
                                 "does not read it", k->c->hf_path, key, value, k->model_path);
        tp_diag_help(g, "use a model file that reads it with hf(\"%s\", ...), or remove it from %s "
                        "if the checkpoint does not use it", key, k->c->hf_path);
    }
    free(value);
}

/* transformers 5 takes rope_scaling over rope_parameters when a config.json
 * gives both (convert_rope_params_to_dict), dropping rope_parameters'
 * rope_theta; the model files read rope_parameters first. */
static void check_one_rope_spelling(const hf_check *k)
{
    const json_t *scaling = json_object_get(k->json, "rope_scaling");
    if (!json_is_object(json_object_get(k->json, "rope_parameters")) || !scaling || json_is_null(scaling))
        return;
    tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, "rope_scaling"), "hf-key",
                             "%s gives both rope_scaling and rope_parameters: transformers takes rope_scaling "
                             "and drops rope_parameters (its rope_theta included)", k->c->hf_path);
    tp_diag_help(g, "keep one: rope_parameters, as transformers 5 saves it, or rope_scaling and rope_theta");
}

/* Factors transformers multiplies by (head_dim * partial_rotary_factor):
 * null is no "absent" there but a TypeError, where hf() would read the
 * default. */
static const char *const factors[] = {"partial_rotary_factor"};

static void check_null_factor(const hf_check *k, const char *key, const char *name, const json_t *v)
{
    if (!json_is_null(v) || !in_table(name, factors, sizeof factors / sizeof *factors))
        return;
    tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, name), "hf-key",
                             "%s sets %s to null; transformers multiplies by it and fails (TypeError), "
                             "and %s would read its default", k->c->hf_path, key, k->model_path);
    tp_diag_help(g, "give %s a number, or remove it from %s for the default", key, k->c->hf_path);
}

/* A key the model reads: an object whose members it reads must be one (a
 * string or a list would read as absent, every member at its default), and
 * a member the model's hf { requires } names must hold that value. */
static void check_read_key(const hf_check *k, const char *key, const json_t *v)
{
    check_null_factor(k, key, key, v);
    if (!json_is_object(v)) {
        if (!json_is_null(v) && model_or_plan_reads_member(k, key)) {
            char *value = json_text(v);
            tp_diag *g = tp_diag_add(k->c->diags, TP_ERROR, key_span(k, key), "hf-key",
                                     "%s sets %s to %s; it must be an object (or null), as %s reads its members",
                                     k->c->hf_path, key, value, k->model_path);
            tp_diag_help(g, "correct %s: transformers refuses it too", k->c->hf_path);
            free(value);
        }
        return;
    }
    const char *type = rope_type_of(v);
    if (rope_type_unsupported(type)) {
        /* a model that reads the type hands it to rope(), which reports
         * it; the type's own members (longrope's factor lists) and its
         * hf { requires } are consequences */
        char *rope_type = tp_xasprintf("%s.rope_type", key), *legacy = tp_xasprintf("%s.type", key);
        if (!model_or_plan_reads(k, rope_type) && !model_or_plan_reads(k, legacy))
            report_rope_type(k, key, type);
        free(rope_type);
        free(legacy);
        return;
    }
    check_members(k, key, v, NULL);
    const char *member;
    json_t *m;
    json_object_foreach((json_t *)v, member, m) {
        char *dotted = tp_xasprintf("%s.%s", key, member);
        const tp_node *want = required_value(k, dotted);
        if (want)
            check_required(k, dotted, m, want);
        check_null_factor(k, dotted, member, m);
        free(dotted);
    }
}

static void check_key(const hf_check *k, const char *key, const json_t *v)
{
    if (!strcmp(key, "architectures") || !strcmp(key, "model_type"))   /* checked above */
        return;
    if (model_or_plan_reads(k, key)) {
        check_read_key(k, key, v);
        return;
    }
    const tp_node *want = required_value(k, key);
    if (want) {
        check_required(k, key, v, want);
        return;
    }
    if (tp_map_gets(&k->understands, key) >= 0)
        return;
    const struct math_key *m = find_math_key(key);
    if (m) {
        check_math_key(k, key, v, m);
        return;
    }
    tp_diag *g = tp_diag_add(k->c->diags, TP_WARNING, key_span(k, key), "hf-key",
                             "%s key '%s' is not used by %s", k->c->hf_path, key, k->model_path);
    tp_diag_help(g, "if it changes nothing tpcc computes, list it in the model's hf { understands = (...) }");
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every key, in name order so that the findings come out the same on every run. */
static void check_keys(const hf_check *k)
{
    size_t n = json_object_size(k->json), i = 0;
    const char **keys = tp_xcalloc(n + 1, sizeof *keys);
    const char *key;
    json_t *v;
    json_object_foreach(k->json, key, v)
        keys[i++] = key;
    qsort(keys, n, sizeof *keys, compare_strings);
    for (i = 0; i < n; i++)
        check_key(k, keys[i], json_object_get(k->json, keys[i]));
    free(keys);
    check_one_rope_spelling(k);
}

bool tp_hf_check_config(tp_config *c, tp_sources *src, const tp_node *model_ast,
                        const tp_node *plan_ast, const char *model_path, tp_span model_ref)
{
    char err[512];
    hf_check k = {.c = c, .src = src, .json = c->hf_json, .json_file = tp_sources_load(src, c->hf_path, err, sizeof err),
                  .block = find_hf_block(model_ast), .model_ast = model_ast, .plan_ast = plan_ast,
                  .model_path = model_path};
    c->seq_window = config_window(&k);
    bool same_architecture = true;
    if (!k.block)
        tp_diag_add(c->diags, TP_WARNING, model_ref, "hf-architecture",
                    "%s declares no hf { architectures = (...) }: tpcc cannot check that %s describes it",
                    model_path, c->hf_path);
    else
        same_architecture = check_architecture(&k, model_ref);
    if (same_architecture) {
        index_keys(&k);
        index_reads(&k, model_ast);
        index_reads(&k, plan_ast);
        index_block(&k);
        check_keys(&k);
    }
    tp_map_free(&k.key_at);
    free(k.key_spans);
    tp_map_free(&k.reads);
    tp_map_free(&k.member_reads);
    tp_map_free(&k.requires);
    tp_map_free(&k.understands);
    return same_architecture;
}

/* The key an hf() chain reads its value from: hf("a", hf("b", default))
 * reads a, else b; NULL when config.json gives neither (or null). */
static const char *chain_key(const tp_config *c, const tp_node *e, const json_t **value)
{
    for (const char *key = tp_config_hf_key(e); key; e = e->kids[2]->kids[0], key = tp_config_hf_key(e)) {
        *value = tp_config_hf_lookup(c, key);
        if (*value && !json_is_null(*value))
            return key;
    }
    return NULL;
}

void tp_hf_check_overrides(tp_config *c, const tp_node *plan_block)
{
    for (int i = 0; c->hf_json && i < plan_block->nkids; i++) {
        const tp_node *a = plan_block->kids[i];
        const tp_cfg_entry *e = tp_config_entry(c, a->kind == N_ASSIGN ? a->name : "");
        const json_t *v = NULL;
        const char *key = e && e->origin == TP_CFG_MODEL ? chain_key(c, e->expr, &v) : NULL;
        if (!key)
            continue;
        char *value = json_text(v), *plan = tp_expr_text(a->kids[0]);
        tp_diag *g = tp_diag_add(c->diags, TP_WARNING, a->span, "config-override",
                                 "the plan sets %s = %s, and %s gives %s = %s: the plan's value wins",
                                 a->name, plan, c->hf_path, key, value);
        tp_diag_help(g, "remove it from the plan's config block to use %s's value; -D %s=... wins over both",
                     c->hf_path, a->name);
        free(value);
        free(plan);
    }
}
