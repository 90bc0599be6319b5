/* model.c: instantiate a model definition into a module tree (model.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/front/model.h"
#include "util/xalloc.h"

/* Leaf modules PyTorch users know, with their constructor arguments. */
typedef struct leaf_type {
    const char *name;
    tp_module_kind kind;
    int npos;                      /* positional sizes: (in, out) or (num, dim) or (dim,) */
    const char *const *keywords;   /* accepted keyword arguments */
    double eps;                    /* norms: eps when eps= is not given */
} leaf_type;

static const char *const linear_kw[] = {"bias", "pad_to", "packed", NULL};
static const char *const embedding_kw[] = {"pad_to", NULL};
static const char *const conv1d_kw[] = {NULL};
static const char *const norm_kw[] = {"eps", "bias", NULL};
/* unit_offset=True: Gemma's GemmaRMSNorm, which scales by (1 + weight) */
static const char *const rmsnorm_kw[] = {"eps", "bias", "unit_offset", NULL};
/* A norm without eps= gets the default of the class it stands for:
 * Hugging Face's LlamaRMSNorm (1e-6) and PyTorch's nn.LayerNorm (1e-5).
 * Model files pass eps= from their config, read with hf(). */
static const leaf_type leaf_types[] = {
    {"Linear", TP_MOD_LINEAR, 2, linear_kw, 0},
    {"Conv1D", TP_MOD_CONV1D, 2, conv1d_kw, 0},
    {"Embedding", TP_MOD_EMBEDDING, 2, embedding_kw, 0},
    {"RMSNorm", TP_MOD_RMSNORM, 1, rmsnorm_kw, 1e-6},
    {"LayerNorm", TP_MOD_LAYERNORM, 1, norm_kw, 1e-5},
};

/* Far beyond any real model (Llama-405B has about 1,150): a bound that
 * keeps repeat(repeat(...)) from exhausting memory. */
#define TP_MAX_MODULES (1 << 20)

typedef struct builder {
    tp_model *m;
    tp_config *c;
    tp_diags *d;
    int depth;
    bool recursion_reported, too_many_reported;
} builder;

static tp_module *instantiate(builder *b, const tp_node *ctor, const char *name,
                              const char *fqn, tp_module *parent, const tp_node *decl);

const tp_node *tp_model_def(const tp_model *m, const char *type)
{
    for (int i = 0; i < m->ndefs; i++)
        if (!strcmp(m->defs[i]->name, type))
            return m->defs[i];
    return NULL;
}

static void register_module(tp_model *m, tp_module *mod)
{
    m->all = tp_xgrow(m->all, m->count, &m->cap, sizeof *m->all, 256);
    mod->index = m->count;
    m->all[m->count++] = mod;
}

static tp_module *new_module(tp_module_kind kind, const char *name, const char *fqn,
                             const char *type, tp_module *parent, const tp_node *decl)
{
    tp_module *mod = tp_xcalloc(1, sizeof *mod);
    mod->kind = kind;
    mod->name = tp_xstrdup(name);
    mod->fqn = tp_xstrdup(fqn);
    mod->type = tp_xstrdup(type);
    mod->parent = parent;
    mod->decl = decl;
    return mod;
}

static void add_kid(tp_module *parent, tp_module *kid)
{
    parent->kids = tp_xrealloc(parent->kids, (size_t)(parent->nkids + 1) * sizeof *parent->kids);
    parent->kids[parent->nkids++] = kid;
}

static tp_param *add_param(tp_module *mod, const char *name, int rank)
{
    mod->params = tp_xrealloc(mod->params, (size_t)(mod->nparams + 1) * sizeof *mod->params);
    tp_param *p = &mod->params[mod->nparams++];
    memset(p, 0, sizeof *p);
    p->name = tp_xstrdup(name);
    p->fqn = mod->fqn[0] ? tp_xasprintf("%s.%s", mod->fqn, name) : tp_xstrdup(name);
    p->rank = rank;
    p->owner = mod;
    return p;
}

/* n rounded up to a multiple of pad (pad >= 1), or -1 when that overflows */
static int64_t padded_size(int64_t n, int64_t pad)
{
    int64_t r;
    if (__builtin_add_overflow(n, pad - 1, &r))
        return -1;
    return r / pad * pad;
}

static void set_dim(tp_param *p, int i, int64_t n, int64_t padded, const tp_node *expr)
{
    p->logical[i] = n;
    p->shape[i] = padded;
    p->dimname[i] = tp_expr_text(expr);
}

static bool check_keywords(builder *b, const tp_node *ctor, const leaf_type *lt)
{
    bool ok = true;
    for (int k = 1; k < ctor->nkids; k++) {
        const char *kw = ctor->kids[k]->name;
        if (!kw)
            continue;
        if (!tp_keyword_known(lt->keywords, kw)) {
            char *takes = tp_keyword_list(lt->keywords);
            tp_diag_add(b->d, TP_ERROR, ctor->kids[k]->span, "model",
                        "%s() has no argument '%s'; it takes %s", lt->name, kw, takes);
            free(takes);
            ok = false;
        }
    }
    if (tp_call_npos(ctor) != lt->npos) {
        tp_diag_add(b->d, TP_ERROR, ctor->span, "model", "%s() takes %d size argument%s, got %d",
                    lt->name, lt->npos, lt->npos == 1 ? "" : "s", tp_call_npos(ctor));
        ok = false;
    }
    return ok;
}

static bool flag_arg(builder *b, const tp_node *ctor, const char *kw, bool dflt)
{
    const tp_node *e = tp_call_kw(ctor, kw);
    int64_t v;
    if (!e || !tp_eval_int(b->c, e, &v))
        return dflt;
    return v != 0;
}

/* A norm's eps=: a number that is not negative (the variance plus eps
 * goes under a square root). */
static bool norm_eps(builder *b, const tp_node *ctor, const leaf_type *lt, double *out)
{
    const tp_node *e = tp_call_kw(ctor, "eps");
    tp_cfg_value v;
    *out = lt->eps;
    if (!e)
        return true;
    if (!tp_eval_value(b->c, e, &v))
        return false;
    if (v.s) {
        tp_diag_add(b->d, TP_ERROR, e->span, "model", "%s() eps is the string \"%s\"; it must be a number",
                    lt->name, v.s);
        return false;
    }
    *out = tp_cfg_real(v);
    if (*out < 0) {
        char *t = tp_expr_text(e);
        tp_diag_add(b->d, TP_ERROR, e->span, "model", "%s() eps '%s' is negative; it must be 0 or more", lt->name, t);
        free(t);
        return false;
    }
    return true;
}

/* Linear(..., packed=(a, b, c)): the segments of a fused projection's
 * output, in order; they add up to its out features. */
static bool packed_segments(builder *b, const tp_node *ctor, int64_t out, int *n, int64_t *segments)
{
    const tp_node *e = tp_call_kw(ctor, "packed");
    if (!e)
        return true;
    if (e->kind != N_TUPLE || e->nkids < 2 || e->nkids > TP_MAX_SEGMENTS || tp_call_kw(ctor, "pad_to")) {
        tp_diag_add(b->d, TP_ERROR, e->span, "model",
                    "Linear() packed= takes a tuple of 2 to %d segment sizes, such as (heads * head_dim, "
                    "kv_heads * head_dim, kv_heads * head_dim), and no pad_to=", TP_MAX_SEGMENTS);
        return false;
    }
    int64_t sum = 0;
    for (int i = 0; i < e->nkids; i++) {
        if (!tp_eval_size(b->c, e->kids[i], &segments[i]))
            return false;
        sum += segments[i];
    }
    *n = e->nkids;
    if (sum != out) {
        tp_diag_add(b->d, TP_ERROR, e->span, "model",
                    "Linear() packed= segments add up to %lld, but the Linear has %lld out features",
                    (long long)sum, (long long)out);
        return false;
    }
    return true;
}

/* Linear(in, out, bias=True, pad_to=1): weight (out, in), bias (out,).
 * Conv1D(nf, nx), transformers.pytorch_utils.Conv1D: out features first,
 * weight (nx, nf) read as it is (y = x @ W + b), bias (nf,) always.
 * Embedding(num, dim, pad_to=1): weight (num, dim). Norms (dim, eps=,
 * bias=): weight (dim,). */
static tp_module *build_leaf(builder *b, const leaf_type *lt, const tp_node *ctor, const char *name,
                             const char *fqn, tp_module *parent, const tp_node *decl)
{
    if (!check_keywords(b, ctor, lt))
        return NULL;
    int64_t size[2] = {0, 0};
    for (int i = 0; i < lt->npos; i++)
        if (!tp_eval_size(b->c, tp_call_pos(ctor, i), &size[i]))
            return NULL;
    int64_t pad = 1;
    const tp_node *pad_e = tp_call_kw(ctor, "pad_to");
    if (pad_e && !tp_eval_size(b->c, pad_e, &pad))
        return NULL;
    double eps;
    if (!norm_eps(b, ctor, lt, &eps))
        return NULL;
    int64_t vocab = lt->kind == TP_MOD_LINEAR ? size[1] : size[0], vocab_padded = padded_size(vocab, pad);
    int64_t elems;
    if (vocab_padded < 0 || __builtin_mul_overflow(vocab_padded, lt->npos == 2 ? size[lt->npos - 1] : 1, &elems)) {
        tp_diag_add(b->d, TP_ERROR, ctor->span, "config", "'%s' would have more than 2^63 elements; check the sizes", fqn);
        return NULL;
    }
    int nsegments = 0;
    int64_t segments[TP_MAX_SEGMENTS];
    if (lt->kind == TP_MOD_LINEAR && !packed_segments(b, ctor, size[1], &nsegments, segments))
        return NULL;
    tp_module *mod = new_module(lt->kind, name, fqn, lt->name, parent, decl);
    mod->eps = eps;
    mod->nsegments = nsegments;
    memcpy(mod->segments, segments, (size_t)nsegments * sizeof *segments);
    mod->unit_offset = flag_arg(b, ctor, "unit_offset", false);
    tp_param *w;
    switch (lt->kind) {
    case TP_MOD_LINEAR: {
        int64_t out_padded = vocab_padded;
        w = add_param(mod, "weight", 2);
        set_dim(w, 0, size[1], out_padded, tp_call_pos(ctor, 1));
        set_dim(w, 1, size[0], size[0], tp_call_pos(ctor, 0));
        if (flag_arg(b, ctor, "bias", true)) {
            tp_param *bias = add_param(mod, "bias", 1);
            set_dim(bias, 0, size[1], out_padded, tp_call_pos(ctor, 1));
        }
        break;
    }
    case TP_MOD_CONV1D:
        w = add_param(mod, "weight", 2);
        set_dim(w, 0, size[1], size[1], tp_call_pos(ctor, 1));
        set_dim(w, 1, size[0], size[0], tp_call_pos(ctor, 0));
        set_dim(add_param(mod, "bias", 1), 0, size[0], size[0], tp_call_pos(ctor, 0));
        break;
    case TP_MOD_EMBEDDING:
        w = add_param(mod, "weight", 2);
        set_dim(w, 0, size[0], vocab_padded, tp_call_pos(ctor, 0));
        set_dim(w, 1, size[1], size[1], tp_call_pos(ctor, 1));
        break;
    default:
        w = add_param(mod, "weight", 1);
        set_dim(w, 0, size[0], size[0], tp_call_pos(ctor, 0));
        if (flag_arg(b, ctor, "bias", lt->kind == TP_MOD_LAYERNORM)) {
            tp_param *bias = add_param(mod, "bias", 1);
            set_dim(bias, 0, size[0], size[0], tp_call_pos(ctor, 0));
        }
        break;
    }
    return mod;
}

static char *child_fqn(const char *parent, const char *name)
{
    return parent[0] ? tp_xasprintf("%s.%s", parent, name) : tp_xstrdup(name);
}

/* repeat(M(), n): a ModuleList of n instances named "0" .. "n-1". */
static tp_module *build_list(builder *b, const tp_node *ctor, const char *name, const char *fqn,
                             tp_module *parent, const tp_node *decl)
{
    const tp_node *elem = tp_call_pos(ctor, 0), *count_e = tp_call_pos(ctor, 1);
    int64_t n;
    if (!elem || !count_e || tp_call_npos(ctor) != 2 || elem->kind != N_CALL) {
        tp_diag_add(b->d, TP_ERROR, ctor->span, "model",
                    "repeat() takes a module and a count: repeat(Block(), layers)");
        return NULL;
    }
    if (!tp_eval_size(b->c, count_e, &n))
        return NULL;
    if (n > 100000) {
        tp_diag_add(b->d, TP_ERROR, count_e->span, "model", "repeat count %lld is too large", (long long)n);
        return NULL;
    }
    tp_module *list = new_module(TP_MOD_LIST, name, fqn, "ModuleList", parent, decl);
    register_module(b->m, list);
    for (int64_t i = 0; i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)i);
        char *kf = child_fqn(fqn, idx);
        tp_module *kid = instantiate(b, elem, idx, kf, list, decl);
        free(kf);
        if (!kid)
            return list;        /* the error is reported once, not n times */
        add_kid(list, kid);
    }
    return list;
}

static void apply_tie(builder *b, tp_module *mod, const tp_node *call);

static tp_module *build_user(builder *b, const tp_node *def, const char *name, const char *fqn,
                             tp_module *parent, const tp_node *decl)
{
    tp_module *mod = new_module(TP_MOD_USER, name, fqn, def->name, parent, decl);
    mod->def = def;
    register_module(b->m, mod);
    for (int i = 0; i < def->nkids; i++) {
        const tp_node *mem = def->kids[i];
        if (mem->kind != N_ASSIGN)
            continue;
        if (mem->kids[0]->kind != N_CALL) {
            tp_diag_add(b->d, TP_ERROR, mem->span, "model",
                        "module member '%s' must be a module, e.g. Linear(hidden, ffn)", mem->name);
            continue;
        }
        char *kf = child_fqn(fqn, mem->name);
        tp_module *kid = instantiate(b, mem->kids[0], mem->name, kf, mod, mem);
        free(kf);
        if (kid)
            add_kid(mod, kid);
    }
    for (int i = 0; i < def->nkids; i++)
        if (def->kids[i]->kind == N_EXPR_STMT)
            apply_tie(b, mod, def->kids[i]->kids[0]);
    return mod;
}

static tp_module *instantiate(builder *b, const tp_node *ctor, const char *name,
                              const char *fqn, tp_module *parent, const tp_node *decl)
{
    const char *type = tp_call_name(ctor);
    if (!type) {
        tp_diag_add(b->d, TP_ERROR, ctor->span, "model", "expected a module constructor such as Linear(...)");
        return NULL;
    }
    if (b->depth > 64) {
        tp_diag_add(b->d, TP_ERROR, ctor->span, "model", "modules nest more than 64 deep (is '%s' recursive?)", type);
        return NULL;
    }
    for (size_t i = 0; i < sizeof leaf_types / sizeof *leaf_types; i++)
        if (!strcmp(type, leaf_types[i].name)) {
            tp_module *mod = build_leaf(b, &leaf_types[i], ctor, name, fqn, parent, decl);
            if (mod)
                register_module(b->m, mod);
            return mod;
        }
    if (!strcmp(type, "repeat"))
        return build_list(b, ctor, name, fqn, parent, decl);
    const tp_node *def = tp_model_def(b->m, type);
    for (const tp_module *up = parent; def && up; up = up->parent)
        if (up->def == def) {
            /* Each recursive member would otherwise expand again, and a
             * module with two of them doubles at every level: stop here. */
            if (!b->recursion_reported)
                tp_diag_add(b->d, TP_ERROR, ctor->span, "model",
                            "module '%s' contains itself: '%s' is recursive", type, fqn);
            b->recursion_reported = true;
            return NULL;
        }
    if (b->m->count >= TP_MAX_MODULES) {
        if (!b->too_many_reported)
            tp_diag_add(b->d, TP_ERROR, ctor->span, "model", "the model has more than %d modules", TP_MAX_MODULES);
        b->too_many_reported = true;
        return NULL;
    }
    if (!def) {
        tp_diag_add(b->d, TP_ERROR, ctor->kids[0]->span, "model",
                    "unknown module type '%s'; define it with `module %s { ... }` or use Linear, Conv1D, Embedding, "
                    "RMSNorm, LayerNorm, repeat",
                    type, type);
        return NULL;
    }
    if (tp_call_npos(ctor) || ctor->nkids > 1)
        tp_diag_add(b->d, TP_ERROR, ctor->span, "model", "%s() takes no arguments; sizes come from config", type);
    b->depth++;
    tp_module *mod = build_user(b, def, name, fqn, parent, decl);
    b->depth--;
    return mod;
}

tp_module *tp_model_find(const tp_model *m, const char *fqn)
{
    for (int i = 0; i < m->count; i++)
        if (!strcmp(m->all[i]->fqn, fqn))
            return m->all[i];
    return NULL;
}

tp_param *tp_module_param(const tp_module *mod, const char *name)
{
    for (int i = 0; i < mod->nparams; i++)
        if (!strcmp(mod->params[i].name, name))
            return &mod->params[i];
    return NULL;
}

tp_param *tp_model_find_param(const tp_model *m, const char *fqn)
{
    const char *dot = strrchr(fqn, '.');
    char *mod_fqn = dot ? tp_xstrdup(fqn) : tp_xstrdup("");
    if (dot)
        mod_fqn[dot - fqn] = '\0';
    tp_module *mod = tp_model_find(m, mod_fqn);
    free(mod_fqn);
    return mod ? tp_module_param(mod, dot ? dot + 1 : fqn) : NULL;
}

/* tie("lm_head.weight", "model.embed_tokens.weight", when=flag): the first
 * parameter shares the second's storage (paths relative to the module). */
static void apply_tie(builder *b, tp_module *mod, const tp_node *call)
{
    const char *fn = tp_call_name(call);
    const tp_node *a = tp_call_pos(call, 0), *t = tp_call_pos(call, 1), *when = tp_call_kw(call, "when");
    if (!fn || strcmp(fn, "tie") || !a || !t || a->kind != N_STR || t->kind != N_STR) {
        tp_diag_add(b->d, TP_ERROR, call->span, "model",
                    "expected tie(\"param\", \"param\", when=flag) as a module statement");
        return;
    }
    int64_t on = 1;
    if (when && !tp_eval_int(b->c, when, &on))
        return;
    if (!on)
        return;
    char *fa = child_fqn(mod->fqn, a->str), *ft = child_fqn(mod->fqn, t->str);
    tp_param *pa = tp_model_find_param(b->m, fa), *pt = tp_model_find_param(b->m, ft);
    if (!pa || !pt) {
        tp_diag_add(b->d, TP_ERROR, (!pa ? a : t)->span, "model", "no parameter '%s'", !pa ? fa : ft);
    } else if (pa->rank != pt->rank || pa->shape[0] != pt->shape[0] || pa->shape[1] != pt->shape[1]) {
        tp_diag_add(b->d, TP_ERROR, call->span, "model",
                    "cannot tie '%s' (%lld x %lld) to '%s' (%lld x %lld): shapes differ", fa,
                    (long long)pa->shape[0], (long long)pa->shape[1], ft,
                    (long long)pt->shape[0], (long long)pt->shape[1]);
    } else {
        pa->tied_to = tp_param_canonical(pt);
        pa->tie_span = call->span;
    }
    free(fa);
    free(ft);
}

/* hf { positions_from = "..." }: a module of the model (hf_check.c checks
 * the field is a string). */
static void find_positions_from(tp_model *m, const tp_node *const *files, int nfiles, tp_diags *d)
{
    for (int f = 0; f < nfiles; f++)
        for (int i = 0; i < files[f]->nkids; i++) {
            const tp_node *block = files[f]->kids[i];
            for (int k = 0; block->kind == N_HF && k < block->nkids; k++) {
                const tp_node *a = block->kids[k];
                if (a->kind != N_ASSIGN || strcmp(a->name, "positions_from") || a->kids[0]->kind != N_STR)
                    continue;
                m->positions_from = tp_model_find(m, a->kids[0]->str);
                if (!m->positions_from)
                    tp_diag_add(d, TP_ERROR, a->kids[0]->span, "model", "hf { positions_from } names '%s', which "
                                "is no module of the model: give the path of the module whose output's length "
                                "transformers counts the positions by (\"model.embed_tokens\")", a->kids[0]->str);
            }
        }
}

bool tp_model_build(tp_model *m, const tp_node *const *files, int nfiles, tp_config *c)
{
    memset(m, 0, sizeof *m);
    const tp_node *root_def = NULL;
    for (int f = 0; f < nfiles; f++)
        for (int i = 0; i < files[f]->nkids; i++) {
            const tp_node *it = files[f]->kids[i];
            if (it->kind != N_MODULE)
                continue;
            if (tp_model_def(m, it->name)) {
                tp_diag_add(c->diags, TP_ERROR, it->span, "model", "module '%s' is defined twice", it->name);
                continue;
            }
            m->defs = tp_xrealloc(m->defs, (size_t)(m->ndefs + 1) * sizeof *m->defs);
            m->defs[m->ndefs++] = it;
            if (!root_def)
                root_def = it;
        }
    if (!root_def)
        return false;
    builder b = {m, c, c->diags, 0, false, false};
    m->root = build_user(&b, root_def, "", "", NULL, NULL);
    find_positions_from(m, files, nfiles, c->diags);
    return true;
}

static void free_module(tp_module *mod)
{
    for (int i = 0; i < mod->nparams; i++) {
        free(mod->params[i].name);
        free(mod->params[i].fqn);
        free(mod->params[i].dimname[0]);
        free(mod->params[i].dimname[1]);
    }
    free(mod->params);
    free(mod->kids);
    free(mod->name);
    free(mod->fqn);
    free(mod->type);
    free(mod);
}

void tp_model_free(tp_model *m)
{
    for (int i = 0; i < m->count; i++)
        free_module(m->all[i]);
    free(m->all);
    free(m->defs);
    memset(m, 0, sizeof *m);
}

const tp_node *tp_module_forward(const tp_module *mod)
{
    if (!mod->def)
        return NULL;
    for (int i = 0; i < mod->def->nkids; i++)
        if (mod->def->kids[i]->kind == N_DEF && !strcmp(mod->def->kids[i]->name, "forward"))
            return mod->def->kids[i];
    return NULL;
}

bool tp_module_is_leaf(const tp_module *mod)
{
    return mod->kind != TP_MOD_USER && mod->kind != TP_MOD_LIST;
}
