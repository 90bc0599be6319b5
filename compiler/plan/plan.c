/* plan.c: mesh, styles with PyTorch's defaults, pattern resolution and
 * coverage checks (see plan.h). */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/plan/plan.h"
#include "compiler/plan/pynames.h"
#include "compiler/plan/hf_styles.h"
#include "compiler/plan/styles.h"
#include "compiler/diag/suggest.h"
#include "util/map.h"
#include "util/xalloc.h"

int64_t tp_plan_tp_size(const tp_plan *p) { return p->mesh_size[p->tp_dim]; }

/* fnmatch's special characters (flags 0): a component without them
 * matches only itself. */
static bool is_literal(const char *pattern, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strchr("*?[\\", pattern[i]))
            return false;
    return true;
}

static bool component_match(const char *pattern, size_t pl, const char *fqn, size_t fl)
{
    if (is_literal(pattern, pl))
        return pl == fl && !memcmp(pattern, fqn, pl);
    char *pc = tp_xstrndup(pattern, pl), *fc = tp_xstrndup(fqn, fl);
    bool same = fnmatch(pc, fc, 0) == 0;
    free(pc);
    free(fc);
    return same;
}

/* PyTorch splits the key on '.' and matches each part against the child
 * names one level down; the root itself is only named by the empty key. */
bool tp_pattern_match(const char *pattern, const char *fqn)
{
    if (!*fqn || !*pattern)
        return !*fqn && !*pattern;
    for (;;) {
        size_t pl = strcspn(pattern, "."), fl = strcspn(fqn, ".");
        if (!component_match(pattern, pl, fqn, fl))
            return false;
        if (!pattern[pl] || !fqn[fl])
            return !pattern[pl] && !fqn[fl];
        pattern += pl + 1;
        fqn += fl + 1;
    }
}

/* The modules by name: a key without wildcards (nearly every key) names
 * at most one module, found in the map; only a key with wildcards is
 * matched against every module (a scan per key made a plan of n keys
 * cost n times the model). */
typedef struct name_list {
    char **names;
    int n;
} name_list;

typedef struct module_index {
    const tp_model *m;
    tp_map by_fqn;
    /* for did-you-mean: the module names relative to each parallelize
     * path, made once per path (names_under) */
    tp_map bases;
    name_list *lists; int nlists, caplists;
} module_index;

static void module_index_init(module_index *x, const tp_model *m)
{
    memset(x, 0, sizeof *x);
    x->m = m;
    for (int i = 0; i < m->count; i++)
        tp_map_puts(&x->by_fqn, m->all[i]->fqn, i);
}

static void module_index_free(module_index *x)
{
    for (int i = 0; i < x->nlists; i++) {
        for (int k = 0; k < x->lists[i].n; k++)
            free(x->lists[i].names[k]);
        free(x->lists[i].names);
    }
    free(x->lists);
    tp_map_free(&x->bases);
    tp_map_free(&x->by_fqn);
}

/* The next module from index *i on that pattern matches, or NULL; *i
 * moves past it. Loop as for (int i = 0; (mod = next_match(x, p, &i));). */
static tp_module *next_match(const module_index *x, const char *pattern, int *i)
{
    const tp_model *m = x->m;
    if (is_literal(pattern, strlen(pattern))) {
        int64_t at = tp_map_gets(&x->by_fqn, pattern);
        tp_module *found = at >= *i ? m->all[at] : NULL;
        *i = m->count;
        return found;
    }
    while (*i < m->count) {
        tp_module *mod = m->all[(*i)++];
        if (tp_pattern_match(pattern, mod->fqn))
            return mod;
    }
    return NULL;
}

typedef struct reader {
    tp_config *c;
    tp_diags *d;
    int rank_hint;      /* unused for now: placements are normalised when used */
} reader;

static bool bad(reader *r, const tp_node *n, const char *check, const char *msg)
{
    tp_diag_add(r->d, TP_ERROR, n->span, check, "%s", msg);
    return false;
}

/* Replicate() | Shard(d) | Partial() | None (when allowed), with PyTorch's
 * keyword spellings: Shard(dim=d), Partial(reduce_op="sum"). */
static bool read_placement(reader *r, const tp_node *e, bool allow_none, tp_io_layout *out)
{
    memset(out, 0, sizeof *out);
    out->node = e;
    if (e->kind == N_NONE && allow_none) {
        out->none = true;
        return true;
    }
    const char *fn = tp_call_name(e);
    if (fn && !strcmp(fn, "Replicate") && e->nkids == 1) { out->pl = tp_replicate(); return true; }
    const char *reduce = tp_call_partial_op(e);
    if (reduce && strcmp(reduce, "sum")) {
        tp_diag_add(r->d, TP_ERROR, e->span, "plan", "Partial(reduce_op=\"%s\"): tpcc models sums only "
                    "(Partial() is reduce_op=\"sum\")", reduce);
        return false;
    }
    if (reduce) { out->pl = tp_partial(); return true; }
    const tp_node *dim = tp_call_shard_dim(e);
    if (dim) {
        int64_t d;
        if (!tp_eval_int(r->c, dim, &d))
            return false;
        if (d < -TP_MAX_RANK || d >= TP_MAX_RANK)
            return bad(r, e, "plan", "Shard dimension out of range");
        out->pl = tp_shard((int)d);
        return true;
    }
    return bad(r, e, "plan", allow_none ? "expected Replicate(), Shard(d), Partial() or None"
                                        : "expected Replicate(), Shard(d) or Partial()");
}

/* A layouts argument: a tuple of placements (None allowed) or one placement. */
static bool read_tuple(reader *r, const tp_node *e, tp_io_layout *out, int *n)
{
    if (e->kind == N_TUPLE || e->kind == N_LIST) {
        if (e->nkids > TP_MAX_IO)
            return bad(r, e, "plan", "too many layouts (at most 8)");
        *n = e->nkids;
        bool ok = true;
        for (int i = 0; i < e->nkids; i++)
            ok &= read_placement(r, e->kids[i], true, &out[i]);
        return ok;
    }
    *n = 1;
    return read_placement(r, e, true, &out[0]);
}

static bool read_kw_dict(reader *r, const tp_node *e, char **names, tp_io_layout *out, int *n)
{
    if (e->kind != N_DICT)
        return bad(r, e, "plan", "expected a dict such as {\"hidden_states\": Shard(1)}");
    if (e->nkids > TP_MAX_IO)
        return bad(r, e, "plan", "too many keyword layouts (at most 8)");
    *n = 0;
    bool ok = true;
    for (int i = 0; i < e->nkids; i++) {
        const tp_node *k = e->kids[i]->kids[0];
        if (k->kind != N_STR) {
            ok = bad(r, k, "plan", "keyword layout keys are argument names in quotes");
            continue;
        }
        names[*n] = tp_xstrdup(k->str);
        ok &= read_placement(r, e->kids[i]->kids[1], true, &out[(*n)++]);
    }
    return ok;
}

static bool read_bool(reader *r, const tp_node *call, const char *kw, bool dflt)
{
    const tp_node *e = tp_call_kw(call, kw);
    int64_t v;
    if (!e)
        return dflt;
    /* a flag of the configuration (use_local_output=loss_parallel) reads as it */
    bool flag = e->kind == N_NAME && tp_config_has(r->c, e->name);
    if (e->kind != N_TRUE && e->kind != N_FALSE && !flag) {
        bad(r, e, "plan", "expected True or False");
        return dflt;
    }
    return tp_eval_int(r->c, e, &v) && v;
}

/* kwarg dict names must pair up with the desired dict, in the same order. */
static bool pair_kw(reader *r, const tp_node *call, tp_io_spec *s, char **dnames, int nd)
{
    if (nd != s->nkw && nd > 0)
        return bad(r, call, "arity", "input_kwarg_layouts and desired_input_kwarg_layouts should have same length!");
    for (int i = 0; i < nd; i++) {
        int j = 0;
        while (j < s->nkw && strcmp(s->kw[j], dnames[i]))
            j++;
        if (j == s->nkw)
            return bad(r, call, "arity", "desired_input_kwarg_layouts names an argument input_kwarg_layouts does not");
    }
    return true;
}

static bool read_inputs(reader *r, const tp_node *call, tp_io_spec *s)
{
    const tp_node *il = tp_call_kw(call, "input_layouts"), *dl = tp_call_kw(call, "desired_input_layouts");
    const tp_node *ik = tp_call_kw(call, "input_kwarg_layouts"), *dk = tp_call_kw(call, "desired_input_kwarg_layouts");
    bool ok = true;
    int nd = 0;
    s->n = -1;
    if (il) ok &= read_tuple(r, il, s->layout, &s->n);
    if (dl) ok &= read_tuple(r, dl, s->desired, &nd);
    if (ok && (il || dl) && nd != (s->n < 0 ? 0 : s->n)) {
        /* PyTorch asserts this in PrepareModuleInput.__init__ */
        tp_diag_add(r->d, TP_ERROR, (dl ? dl : il)->span, "arity",
                    "input_layouts and desired_input_layouts should have same length! (%d vs %d)",
                    s->n < 0 ? 0 : s->n, nd);
        ok = false;
    }
    char *dnames[TP_MAX_IO];
    int ndk = 0;
    if (ik) ok &= read_kw_dict(r, ik, s->kw, s->kw_layout, &s->nkw);
    if (dk) ok &= read_kw_dict(r, dk, dnames, s->kw_desired, &ndk);
    if (ok && (ik || dk)) {
        ok &= pair_kw(r, call, s, dnames, ndk);
        /* order the desired layouts like the declared ones */
        tp_io_layout sorted[TP_MAX_IO];
        for (int j = 0; j < s->nkw; j++) {
            sorted[j] = (tp_io_layout){.none = true};
            for (int i = 0; i < ndk; i++)
                if (!strcmp(dnames[i], s->kw[j]))
                    sorted[j] = s->kw_desired[i];
        }
        memcpy(s->kw_desired, sorted, sizeof sorted);
    }
    for (int i = 0; i < ndk; i++)
        free(dnames[i]);
    return ok;
}

static bool read_outputs(reader *r, const tp_node *call, tp_io_spec *s)
{
    const tp_node *ol = tp_call_kw(call, "output_layouts"), *dl = tp_call_kw(call, "desired_output_layouts");
    bool ok = true;
    int nd = 0;
    s->n = -1;
    if (!ol || !dl)
        return bad(r, call, "plan", "PrepareModuleOutput needs output_layouts and desired_output_layouts");
    ok &= read_tuple(r, ol, s->layout, &s->n);
    ok &= read_tuple(r, dl, s->desired, &nd);
    if (ok && nd != s->n) {
        tp_diag_add(r->d, TP_ERROR, dl->span, "arity",
                    "output_layouts and desired_output_layouts should have same length! (%d vs %d)", s->n, nd);
        ok = false;
    }
    return ok;
}

static bool check_keywords(reader *r, const tp_node *call, tp_style_kind k)
{
    const tp_style_row *row = &tp_style_rows[k];
    bool ok = true;
    for (int i = 1; i < call->nkids; i++) {
        const tp_node *a = call->kids[i];
        if (!a->name) {
            tp_diag_add(r->d, TP_ERROR, a->span, "plan",
                        "%s takes keyword arguments only (as in PyTorch)", row->class_name);
            ok = false;
            continue;
        }
        bool known = false;
        for (const char *const *p = row->keywords; *p; p++)
            known |= !strcmp(*p, a->name);
        if (!known) {
            tp_diag *g = tp_diag_add(r->d, TP_ERROR, a->span, "plan", "%s has no argument '%s'",
                                     row->class_name, a->name);
            const char *best = tp_suggest(a->name, row->keywords, row->nkeywords);
            if (best)
                tp_diag_help(g, "did you mean '%s'?", best);
            ok = false;
        }
    }
    return ok;
}

/* ColwiseParallel(tpcc_replicate_heads=kv_heads): the projection's output
 * is that many heads, and where tp exceeds them each head is replicated
 * over tp / heads ranks, as Megatron and vLLM do with kv heads
 * (sema/params.c). */
static bool read_replicate_heads(reader *r, const tp_node *e, int64_t *heads)
{
    /* True would read as 1 head (a Python bool is an int): one head
     * replicated over every rank, whatever the projection holds */
    const tp_cfg_entry *named = e->kind == N_NAME ? tp_config_entry(r->c, e->name) : NULL;
    if (e->kind == N_TRUE || e->kind == N_FALSE || (named && named->is_bool))
        return bad(r, e, "plan", "tpcc_replicate_heads takes the number of heads the projection's output holds "
                   "(such as kv_heads), not True or False");
    if (!tp_eval_int(r->c, e, heads))
        return false;
    if (*heads < 1) {
        bad(r, e, "plan", "tpcc_replicate_heads takes the number of heads the projection's output holds (at least 1)");
        return false;
    }
    return true;
}

static tp_style *read_style(reader *r, const tp_node *call)
{
    const char *fn = tp_call_name(call);
    int k = fn ? tp_style_find_class(fn) : -1;
    if (k < 0) {
        tp_diag *g = tp_diag_add(r->d, TP_ERROR, call->span, "plan",
                                 "expected a parallel style such as ColwiseParallel()");
        const char *sure = fn ? tp_suggest_sure(fn, tp_style_class_names, TP_STYLE_NCLASSES) : NULL;
        const char *best = sure ? sure : fn ? tp_suggest(fn, tp_style_class_names, TP_STYLE_NCLASSES) : NULL;
        if (best)
            tp_diag_help(g, "did you mean '%s'?", best);
        if (sure)
            tp_diag_fixit(g, call->kids[0]->span, sure);
        return NULL;
    }
    if (!check_keywords(r, call, (tp_style_kind)k))
        return NULL;
    tp_style *s = tp_xcalloc(1, sizeof *s);
    const tp_style_row *row = &tp_style_rows[k];
    s->kind = (tp_style_kind)k;
    s->name = row->class_name;
    s->call = call;
    bool ok = true;
    const tp_node *e;
    switch (s->kind) {
    case TP_STYLE_COLWISE:
    case TP_STYLE_ROWWISE:
        s->input.pl = row->input;
        s->output.pl = row->output;
        if ((e = tp_call_kw(call, "input_layouts")) && e->kind != N_NONE)
            ok &= read_placement(r, e, false, &s->input);
        if ((e = tp_call_kw(call, "output_layouts")) && e->kind != N_NONE)
            ok &= read_placement(r, e, false, &s->output);
        s->use_local_output = read_bool(r, call, "use_local_output", row->local_out);
        if ((e = tp_call_kw(call, "tpcc_replicate_heads")))
            ok &= read_replicate_heads(r, e, &s->replicate_heads);
        if (s->kind == TP_STYLE_COLWISE)
            s->packed = read_bool(r, call, "tpcc_packed", false);
        break;
    case TP_STYLE_SEQUENCE: {
        int64_t d = 1;
        if ((e = tp_call_kw(call, "sequence_dim")) && !tp_eval_int(r->c, e, &d))
            ok = false;
        s->sequence_dim = (int)d;
        s->use_local_output = read_bool(r, call, "use_local_output", row->local_out);
        break;
    }
    case TP_STYLE_PREPARE_INPUT:
        ok &= read_inputs(r, call, &s->in);
        s->in.use_local = read_bool(r, call, "use_local_output", row->local_out);
        s->out.n = -1;
        break;
    case TP_STYLE_PREPARE_OUTPUT:
        ok &= read_outputs(r, call, &s->out);
        s->out.use_local = read_bool(r, call, "use_local_output", row->local_out);
        s->in.n = -1;
        break;
    case TP_STYLE_PREPARE_INPUT_OUTPUT:
        ok &= read_inputs(r, call, &s->in);
        ok &= read_outputs(r, call, &s->out);
        s->in.use_local = read_bool(r, call, "use_local_input", row->local_in);
        s->out.use_local = read_bool(r, call, "use_local_output", row->local_out);
        break;
    case TP_STYLE_IDENTITY:     /* only Hugging Face strings are hookless */
        break;
    }
    if (!ok) {
        for (int i = 0; i < s->in.nkw; i++)
            free(s->in.kw[i]);
        free(s);
        return NULL;
    }
    return s;
}

static void read_mesh(tp_plan *p, const tp_node *item, tp_config *c)
{
    p->mesh_span = item->span;
    if (item->nkids > TP_MAX_MESH_DIMS) {
        tp_diag_add(c->diags, TP_ERROR, item->span, "mesh", "meshes have at most %d dimensions", TP_MAX_MESH_DIMS);
        return;
    }
    p->mesh_ndim = 0;
    for (int i = 0; i < item->nkids; i++) {
        const tp_node *a = item->kids[i];
        int64_t n;
        if (!a->name) {
            tp_diag_add(c->diags, TP_ERROR, a->span, "mesh", "name each mesh dimension: mesh(tp = 2)");
            continue;
        }
        if (!tp_eval_int(c, a->kids[0], &n))
            continue;
        if (n < 1) {
            tp_diag_add(c->diags, TP_ERROR, a->kids[0]->span, "degenerate-mesh",
                        "mesh dimension '%s' has size %lld; it needs at least one device",
                        a->name, (long long)n);
            continue;
        }
        if (n > 1 << 20) {
            tp_diag_add(c->diags, TP_ERROR, a->kids[0]->span, "mesh", "mesh dimension '%s' is too large", a->name);
            continue;
        }
        p->mesh_name[p->mesh_ndim] = tp_xstrdup(a->name);
        p->mesh_arg[p->mesh_ndim] = a;
        p->mesh_size[p->mesh_ndim++] = n;
    }
}

static void add_style(tp_plan *p, tp_style *s)
{
    p->styles = tp_xgrow(p->styles, p->nstyles, &p->capstyles, sizeof *p->styles, 16);
    p->styles[p->nstyles++] = s;
}

/* A name transformers does not register: the nearest one, if any. */
static void unknown_hf_style(reader *r, const tp_node *str)
{
    const char **names;
    int n = tp_hf_style_names(&names);
    tp_diag *g = tp_diag_add(r->d, TP_ERROR, str->span, "plan",
                             "\"%s\" is not a Hugging Face tp_plan style: transformers 5.23 registers none by "
                             "that name (ALL_PARALLEL_STYLES), nor did 4.56", str->str);
    const char *best = tp_suggest(str->str, names, n);
    if (best) {
        tp_diag_help(g, "did you mean \"%s\"?", best);
        char *quoted = tp_xasprintf("\"%s\"", best);
        tp_diag_fixit(g, str->span, quoted);
        free(quoted);
    } else {
        tp_diag_help(g, "use one of transformers' strings (\"colwise\", \"rowwise\", \"colwise_gather_output\", "
                        "...; README, \"Hugging Face string styles\") or a PyTorch constructor such as "
                        "ColwiseParallel()");
    }
}

/* A style transformers defines that tpcc cannot apply faithfully. */
static bool refused_hf_style(reader *r, const tp_node *str, const tp_hf_style *h)
{
    if (h->hooks == TP_HF_REFUSED) {
        tp_diag *g = tp_diag_add(r->d, TP_ERROR, str->span, "hf-style", "\"%s\" (transformers %s: %s) %s: %s",
                                 h->name, h->version, h->transformers, h->does, h->refusal);
        tp_diag_help(g, "leave the module out of the plan (replicated), or shard it with a style tpcc supports");
        return true;
    }
    if (h->needs_config && !tp_config_has(r->c, h->needs_config)) {
        tp_diag *g = tp_diag_add(r->d, TP_ERROR, str->span, "hf-style",
                                 "\"%s\" (transformers %s: %s) reads the config's %s, which this model does not "
                                 "define: transformers raises AttributeError", h->name, h->version, h->transformers,
                                 h->needs_config);
        tp_diag_help(g, "it is for multi-head latent attention (DeepSeek-V2 style), which this model does not have; "
                        "remove the entry");
        return true;
    }
    return false;
}

/* A Hugging Face string style (plan/hf_styles.c): transformers' class
 * with the arguments its registry gives the name, as tpcc's hooks. */
static tp_style *read_hf_style(reader *r, const tp_node *str)
{
    const tp_hf_style *h = tp_hf_style_find(str->str);
    if (!h) {
        unknown_hf_style(r, str);
        return NULL;
    }
    if (refused_hf_style(r, str, h))
        return NULL;
    tp_style *s = tp_xcalloc(1, sizeof *s);
    s->hf = h;
    s->kind = tp_style_of_hf(h->hooks);
    s->name = h->name;
    s->call = str;
    s->packed = h->packed;
    s->input.pl = h->input;
    s->output.pl = h->output;
    s->use_local_output = h->use_local_output;
    s->sequence_dim = 1;
    s->out.n = -1;
    if (h->reduce_output) {
        /* AllReduceParallel / GatherParallel: the output is partial sums to reduce */
        s->out.n = 1;
        s->out.layout[0].pl = tp_partial();
        s->out.desired[0].pl = tp_replicate();
        s->out.use_local = true;
    }
    return s;
}

/* The desugared values live as long as the plan: styles point into them. */
static const tp_node *keep_value(tp_plan *p, tp_node *value)
{
    p->values = tp_xgrow(p->values, p->nvalues, &p->capvalues, sizeof *p->values, 16);
    p->values[p->nvalues++] = value;
    return value;
}

static void read_parallelize(tp_plan *p, const tp_node *item, tp_config *c, tp_pynames *names)
{
    reader r = {c, c->diags, 0};
    const tp_node *dict = item->kids[0];
    for (int i = 0; i < dict->nkids; i++) {
        const tp_node *pair = dict->kids[i];
        const tp_node *key = pair->kids[0], *val = pair->kids[1];
        if (key->kind != N_STR) {
            tp_diag_add(c->diags, TP_ERROR, key->span, "plan", "plan keys are module names in quotes");
            continue;
        }
        if (val->kind == N_CALL || val->kind == N_COND) {
            int unsupported = c->diags->unsupported;
            tp_node *plain = tp_pynames_desugar(names, val);
            p->incomplete |= c->diags->unsupported > unsupported;
            if (!plain)
                continue;
            val = keep_value(p, plain);
        }
        if (val->kind != N_CALL && val->kind != N_STR) {
            tp_diag_add(c->diags, TP_ERROR, val->span, "plan", "expected a parallel style such as ColwiseParallel()");
            continue;
        }
        tp_style *s = val->kind == N_STR ? read_hf_style(&r, val) : read_style(&r, val);
        if (!s)
            continue;
        s->entry = pair;
        s->dict = dict;
        s->item = item;
        s->base = tp_xstrdup(item->str);
        if (!item->str[0])
            s->pattern = tp_xstrdup(key->str);
        else if (!key->str[0])
            s->pattern = tp_xstrdup(item->str);
        else
            s->pattern = tp_xasprintf("%s.%s", item->str, key->str);
        add_style(p, s);
    }
}

/* --- which mesh dimension the plan runs on ------------------------------ */

/* `parallelize "path" on "dim"`, not the whole multi-line item. */
static tp_span item_head(const tp_node *item)
{
    tp_span at = item->span;
    int head = item->kids[0]->span.offset - at.offset;
    if (head > 1 && head < at.length)
        at.length = head - 1;
    return at;
}

/* The mesh dimension a parallelize block names, or -1 (reported) when it
 * names none the mesh has or leaves a choice open. */
static int block_dim(const tp_plan *p, const tp_node *item, tp_diags *d)
{
    if (!item->name) {
        if (p->mesh_ndim == 1)
            return 0;
        tp_diag_add(d, TP_ERROR, item_head(item), "mesh",
                    "the mesh has %d dimensions; say which one: parallelize \"%s\" on \"tp\" {...}",
                    p->mesh_ndim, item->str);
        return -1;
    }
    for (int i = 0; i < p->mesh_ndim; i++)
        if (!strcmp(p->mesh_name[i], item->name))
            return i;
    tp_diag *g = tp_diag_add(d, TP_ERROR, item_head(item), "mesh", "the mesh has no dimension '%s'", item->name);
    tp_buf names;
    tp_buf_init(&names);
    for (int i = 0; i < p->mesh_ndim; i++)
        tp_buf_appendf(&names, "%s\"%s\"", i ? " or " : "", p->mesh_name[i]);
    bool declared = p->mesh_span.file >= 0;
    if (declared)
        tp_diag_note_at(g, p->mesh_span, "the mesh is declared here");
    tp_diag_help(g, "put the block on %s%s", names.data,
                 declared ? "" : " (a plan without a mesh statement has mesh(tp = tp))");
    tp_buf_free(&names);
    return -1;
}

/* Two dimensions would need a 2-D tensor-parallel lowering that does not
 * exist: styles on either would be applied over the other's ranks. */
static void report_second_dim(const tp_plan *p, const tp_node *item, int dim, const tp_node *first, tp_diags *d)
{
    const char *other = p->mesh_name[dim], *chosen = p->mesh_name[p->tp_dim];
    tp_diag *g = tp_diag_unsupported(d, item_head(item),
                                     "this block is on mesh dimension '%s' and an earlier one on '%s': tpcc compiles "
                                     "a forward schedule whose tensor-parallel plan runs over one mesh dimension, and "
                                     "would need a 2-D tensor-parallel lowering", other, chosen);
    tp_diag_note_at(g, item_head(first), "on \"%s\" here", chosen);
    tp_diag_help(g, "put every parallelize block on the same dimension; a plan over both '%s' and '%s' "
                    "is not supported yet", chosen, other);
}

/* `tp = tp` or `tp = 2`: a dimension as the plan declares it, its size
 * by name when a config value gives it. */
static char *dim_decl(const tp_plan *p, int dim)
{
    const tp_node *size = p->mesh_arg[dim] ? p->mesh_arg[dim]->kids[0] : NULL;
    if (size && size->kind == N_NAME)
        return tp_xasprintf("%s = %s", p->mesh_name[dim], size->name);
    return tp_xasprintf("%s = %lld", p->mesh_name[dim], (long long)p->mesh_size[dim]);
}

/* A dimension no block is on replicates the model over its devices: data
 * parallelism, each replica on its own batch. A forward schedule has no
 * use for replicas (nothing couples them), so only tpcc --train, whose
 * runtime averages the gradients over them, accepts one. */
void tp_plan_refuse_data_parallel(const tp_plan *p, tp_diags *d)
{
    int dim = p->dp_dim;
    const char *dp = p->mesh_name[dim], *tp = p->mesh_name[p->tp_dim];
    long long n = (long long)p->mesh_size[dim];
    const tp_node *arg = p->mesh_arg[dim];
    tp_diag *g = tp_diag_unsupported(d, arg ? arg->span : p->mesh_span,
                             "mesh dimension '%s' (size %lld) is data parallel: no parallelize block is on it, "
                             "and a forward schedule runs the tensor-parallel plan over one mesh dimension ('%s') "
                             "and would need data-parallel replicas: a %s x %s mesh (each %s replica its own batch, "
                             "world size %lld) is supported by tpcc --train only",
                             dp, n, tp, dp, tp, dp, n * (long long)p->mesh_size[p->tp_dim]);
    char *keep = dim_decl(p, p->tp_dim);
    if (arg && arg->kids[0]->kind == N_NAME)
        tp_diag_help(g, "compile with --train to train on the %s x %s mesh, or for one %s replica with -D %s=1 "
                        "(or mesh(%s))", dp, tp, dp, arg->kids[0]->name, keep);
    else
        tp_diag_help(g, "compile with --train to train on the %s x %s mesh, or for one %s replica with mesh(%s) "
                        "(or %s = 1)", dp, tp, dp, keep, dp);
    free(keep);
}

/* Ranks are laid out as torch's init_device_mesh lays out a mesh: the last
 * dimension fastest. tprun takes the tensor-parallel group of rank r to be
 * ranks r - r % T .. + T, so the tp dimension must be the last one that
 * holds more than one device. */
static void report_dp_after_tp(const tp_plan *p, int dim, tp_diags *d)
{
    const tp_node *arg = p->mesh_arg[dim];
    tp_diag *g = tp_diag_unsupported(d, arg ? arg->span : p->mesh_span,
                                     "data-parallel mesh dimension '%s' comes after the tensor-parallel one '%s': "
                                     "tprun lays ranks out with the tensor-parallel dimension fastest (the last one), "
                                     "and would need its groups strided to run this mesh",
                                     p->mesh_name[dim], p->mesh_name[p->tp_dim]);
    tp_diag_help(g, "declare the mesh as mesh(%s = ..., %s = ...)", p->mesh_name[dim], p->mesh_name[p->tp_dim]);
}

/* The first block's dimension carries the plan. Every other dimension of
 * more than one device is data parallel (dp_dim, data_parallel), which
 * only a training schedule may be (tp_plan_refuse_data_parallel), or the
 * schedule would silently cover less than the mesh. */
static void choose_tp_dim(tp_plan *p, const tp_node *file, tp_diags *d)
{
    const tp_node *first[TP_MAX_MESH_DIMS] = {0};   /* the first block on each dimension */
    bool resolved = true;
    bool chosen = false;
    for (int i = 0; i < file->nkids; i++) {
        const tp_node *it = file->kids[i];
        if (it->kind != N_PARALLELIZE)
            continue;
        int dim = block_dim(p, it, d);
        if (dim < 0) {
            resolved = false;
            continue;
        }
        if (!chosen) {
            p->tp_dim = dim;
            chosen = true;
        }
        if (first[dim])
            continue;
        first[dim] = it;
        if (dim != p->tp_dim)
            report_second_dim(p, it, dim, first[p->tp_dim], d);
    }
    if (!resolved)
        return;             /* which dimensions the plan uses is unknown: no guessing */
    for (int i = 0; i < p->mesh_ndim; i++) {
        if (first[i] || i == p->tp_dim || p->mesh_size[i] <= 1)
            continue;
        if (i > p->tp_dim)
            report_dp_after_tp(p, i, d);
        if (p->dp_dim < 0)
            p->dp_dim = i;
        p->data_parallel *= p->mesh_size[i];
    }
}

/* --- resolution and coverage ------------------------------------------ */

static bool hf_supports(const tp_hf_style *h, const tp_module *m)
{
    switch (h->modules) {
    case TP_HF_LINEAR: return m->kind == TP_MOD_LINEAR;
    case TP_HF_EMBEDDING: return m->kind == TP_MOD_EMBEDDING;
    case TP_HF_PACKED: return m->kind == TP_MOD_LINEAR && m->nsegments > 0;
    case TP_HF_NORM: return m->kind == TP_MOD_RMSNORM || m->kind == TP_MOD_LAYERNORM;
    case TP_HF_NO_PARAMS: return m->nparams == 0;
    case TP_HF_ANY: return true;
    }
    return false;
}

static bool supports(const tp_style *s, const tp_module *m)
{
    if (s->hf)
        return hf_supports(s->hf, m);
    if (s->packed)      /* ColwiseParallel(tpcc_packed=True) */
        return m->kind == TP_MOD_LINEAR && m->nsegments > 0;
    switch (tp_style_rows[s->kind].takes) {
    case TP_STYLE_TAKES_LINEAR_OR_EMBEDDING: return m->kind == TP_MOD_LINEAR || m->kind == TP_MOD_EMBEDDING;
    case TP_STYLE_TAKES_NORM: return m->kind == TP_MOD_RMSNORM || m->kind == TP_MOD_LAYERNORM;
    case TP_STYLE_TAKES_ANY: return true;
    }
    return false;
}

/* Why renaming s's key so that its absolute pattern becomes `pattern` is
 * not a fix --fix may apply, or NULL: the modules the new pattern matches
 * must all take the style and have no entry yet (else the rename makes a
 * duplicate-entry or an unsupported-module error). */
static const char *rename_blocked(const module_index *x, const tp_style *s, const char *pattern)
{
    const tp_module *mod;
    for (int i = 0; (mod = next_match(x, pattern, &i));) {
        if (mod->style)
            return "another entry already parallelizes it";
        if (!supports(s, mod))
            return "the style does not support it";
    }
    return NULL;
}

static char *absolute_pattern(const char *base, const char *key)
{
    return base[0] ? tp_xasprintf("%s.%s", base, key) : tp_xstrdup(key);
}

/* Every module name written relative to the parallelize path `base`: the
 * names a key of that block may mean. */
static void relative_names(const tp_model *m, const char *base, name_list *out)
{
    out->names = tp_xmalloc(((size_t)m->count + 1) * sizeof *out->names);
    out->n = 0;
    int parts = 1;
    for (const char *q = base; *q; q++)
        parts += *q == '.';
    for (int i = 0; i < m->count; i++) {
        const char *fqn = m->all[i]->fqn;
        if (!base[0]) {
            out->names[out->n++] = tp_xstrdup(fqn);
            continue;
        }
        /* strip a prefix matching the base pattern */
        const char *rest = fqn;
        for (int k = 0; k < parts && rest; k++) {
            rest = strchr(rest, '.');
            if (rest) rest++;
        }
        if (!rest)
            continue;
        char *prefix = tp_xstrndup(fqn, (size_t)(rest - fqn - 1));
        bool under = tp_pattern_match(base, prefix);
        free(prefix);
        if (under)
            out->names[out->n++] = tp_xstrdup(rest);
    }
}

/* The names of relative_names(base), made once per parallelize path. */
static const name_list *names_under(module_index *x, const char *base)
{
    int64_t i = tp_map_puts(&x->bases, base, x->nlists);
    if (i == x->nlists) {
        x->lists = tp_xgrow(x->lists, x->nlists, &x->caplists, sizeof *x->lists, 8);
        relative_names(x->m, base, &x->lists[x->nlists++]);
    }
    return &x->lists[i];
}

static void suggest_module(module_index *x, const tp_style *s, tp_diag *g)
{
    const name_list *under = names_under(x, s->base);
    const char *const *names = (const char *const *)under->names;
    int n = under->n;
    const char *key = s->entry->kids[0]->str;
    const char *best = tp_suggest(key, names, n);
    const char *sure = tp_suggest_sure(key, names, n);
    if (sure) {
        char *pattern = absolute_pattern(s->base, sure);
        const char *blocked = rename_blocked(x, s, pattern);
        if (blocked) {
            tp_diag_help(g, "did you mean '%s'? (--fix leaves it: %s)", sure, blocked);
        } else {
            tp_diag_help(g, "did you mean '%s'?", sure);
            char *quoted = tp_xasprintf("\"%s\"", sure);
            tp_diag_fixit_claim(g, s->entry->kids[0]->span, quoted, pattern);
            free(quoted);
        }
        free(pattern);
    } else if (best) {
        tp_diag_help(g, "did you mean '%s'?", best);
    }
}

static int wildcards(const char *pattern)
{
    int n = 0;
    for (; *pattern; pattern++)
        n += *pattern == '*' || *pattern == '?' || *pattern == '[';
    return n;
}

/* Two entries for one module: PyTorch would distribute it twice. Report
 * once per pair of entries; the more specific entry (fewer wildcards; the
 * later one on a tie) is kept so the rest of the check stays meaningful. */
static void report_duplicate(tp_diags *d, tp_style *s, tp_module *mod, int *reported)
{
    tp_style *old = mod->style;
    if (!(*reported)++) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, s->entry->kids[0]->span, "duplicate-entry",
                                 "module '%s' is already parallelized by another entry", mod->fqn);
        tp_diag_note_at(g, old->entry->kids[0]->span, "first matched here by '%s'", old->pattern);
        tp_diag_help(g, "keep one entry per module; PyTorch would apply both and distribute its parameters twice");
    }
    if (wildcards(s->pattern) <= wildcards(old->pattern))
        mod->style = s;
}

/* Colwise and Rowwise on transformers' Conv1D (GPT-2's c_attn, c_proj,
 * c_fc): PyTorch's styles refuse any module but nn.Linear and
 * nn.Embedding, and transformers' "colwise" wants out_features. Sharding
 * its [in, out] weight by dim 0 as "packed_colwise" does would split the
 * input features: there is no faithful tensor-parallel form. */
#define CONV1D_FIX                                                                                          \
    "no tensor-parallel style shards a Conv1D faithfully: leave it replicated (remove the entry), as "     \
    "plans/gpt2-hf-sp.plan does"

static void conv1d_help(tp_diag *g, const tp_style *s)
{
    if (s->packed)
        tp_diag_help(g, "transformers' packed_colwise shards a weight's dim 0, which is a Conv1D's input features "
                        "(its weight is [in, out]); %s", CONV1D_FIX);
    else
        tp_diag_help(g, "PyTorch raises NotImplementedError(\"%s currently only support nn.Linear and "
                        "nn.Embedding!\") on a Conv1D (its weight is [in, out]); %s", s->name, CONV1D_FIX);
}

/* The deepest module the first `depth` components of pattern name, or
 * NULL (the root for depth 0). */
static const tp_module *module_at(const module_index *x, const char *pattern, int depth)
{
    if (depth == 0)
        return x->m->root;
    const char *end = pattern;
    for (int k = 0; k < depth; k++) {
        end = strchr(end, '.');
        if (!end)
            break;
        if (k + 1 < depth)
            end++;
    }
    char *prefix = end ? tp_xstrndup(pattern, (size_t)(end - pattern)) : tp_xstrdup(pattern);
    int i = 0;
    const tp_module *found = next_match(x, prefix, &i);
    free(prefix);
    return found;
}

static int components(const char *path)
{
    int n = *path != '\0';
    for (; *path; path++)
        n += *path == '.';
    return n;
}

/* A key that matches no module. PyTorch's parallelize_module walks the key
 * one component at a time and, at the first that names no child, warns
 * "Parallelize plan key '<rest>' could not be resolved: no submodule
 * matching token '<token>' in module <module>, skipping this plan entry."
 * and goes on (torch/distributed/tensor/parallel/api.py): a warning here
 * too, with the same words. Where the parallelize path itself names no
 * module, the training script's loop over it would find nothing to apply
 * the dict to: an error. */
static void report_unmatched(module_index *x, tp_style *s, tp_diags *d)
{
    int depth = 0, total = components(s->pattern), base = components(s->base);
    while (depth < total && module_at(x, s->pattern, depth + 1))
        depth++;
    tp_span at = s->entry->kids[0]->span;
    if (depth < base) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, at, "unmatched-entry",
                                 "plan key '%s' matches no module: the parallelize path '%s' names none",
                                 s->pattern, s->base);
        suggest_module(x, s, g);
        return;
    }
    const char *rest = s->pattern;
    for (int k = 0; k < depth; k++)
        rest = strchr(rest, '.') + 1;
    const char *dot = strchr(rest, '.');
    int token_len = dot ? (int)(dot - rest) : (int)strlen(rest);
    const tp_module *parent = module_at(x, s->pattern, depth);
    tp_diag *g = tp_diag_add(d, TP_WARNING, at, "unmatched-entry",
                             "plan key '%s' matches no module: PyTorch warns \"Parallelize plan key '%s' could not "
                             "be resolved: no submodule matching token '%.*s' in module %s(...), skipping this plan "
                             "entry.\" and applies the rest of the plan",
                             s->pattern, rest, token_len, rest, parent ? parent->type : "?");
    suggest_module(x, s, g);
}

/* Why a Hugging Face string style does not fit the module, as
 * transformers itself fails or misbehaves on it. */
static void hf_unsupported_help(tp_diag *g, const tp_hf_style *h, const tp_module *mod)
{
    switch (h->modules) {
    case TP_HF_LINEAR:
        tp_diag_help(g, "transformers %s's %s shards linear layers: it raises ValueError(\"%s has no `%s`\") "
                        "on anything else%s", h->version, h->transformers, mod->type,
                     h->hooks == TP_HF_COLWISE ? "out_features" : "in_features",
                     mod->kind == TP_MOD_EMBEDDING ? "; for an nn.Embedding use \"embedding_rowwise\" (vocabulary) "
                                                     "or \"embedding_colwise\""
                     : mod->kind == TP_MOD_CONV1D ? "; " CONV1D_FIX : "");
        break;
    case TP_HF_EMBEDDING:
        tp_diag_help(g, "\"%s\" is transformers' %s, for an nn.Embedding; shard a Linear with \"colwise\" or "
                        "\"rowwise\"", h->name, h->transformers);
        break;
    case TP_HF_NORM:
        tp_diag_help(g, "\"sequence_parallel\" is for norms (LayerNorm, RMSNorm)");
        break;
    case TP_HF_NO_PARAMS:
        tp_diag_help(g, "transformers 4.56's IsolatedParallel divides the module's own parameters by tp "
                        "(partition_tensor: param / device_mesh.size()), for a bias that a \"gather\" parent "
                        "sums back; tpcc does not compute divided weights: use it on a module without parameters");
        break;
    case TP_HF_PACKED:
    case TP_HF_ANY:
        break;
    }
}

bool tp_packed_halves(const tp_module *m)
{
    if (m->nsegments != 2 || m->segments[0] != m->segments[1])
        return false;
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, "bias"))
            return false;
    return true;
}

const char *tp_packed_style_for(const tp_module *m)
{
    return tp_packed_halves(m) ? "\"packed_colwise\"" : "ColwiseParallel(tpcc_packed=True)";
}

/* transformers 5.23's PackedColwiseParallel shards a weight as
 * _StridedShard(dim=0, split_factor=2): two equal halves (gate and up),
 * each sharded, and a bias as a contiguous Shard(0). Any other packing
 * (q/k/v, unequal or three segments) or a bias gives each rank rows of
 * the wrong pieces, silently. */
static void report_unequal_packing(tp_diags *d, const tp_style *s, const tp_module *mod)
{
    tp_diag *g = tp_diag_add(d, TP_ERROR, s->call->span, "hf-style",
                             "\"packed_colwise\" on '%s': transformers' PackedColwiseParallel shards its weight as "
                             "_StridedShard(dim=0, split_factor=2), two equal halves, %s: each rank would hold rows "
                             "of the wrong segments", mod->fqn,
                             mod->nsegments != 2 || mod->segments[0] != mod->segments[1]
                                 ? "and its packed= segments are not two equal ones"
                                 : "and its bias is sharded contiguously (Shard(0)), not by halves");
    tp_diag_help(g, "shard each segment separately with ColwiseParallel(tpcc_packed=True) (tpcc's own keyword: "
                    "vLLM's QKVParallelLinear layout; PyTorch has no style for it), or gather the output as "
                    "transformers' Phi-3 plan does: \"colwise_gather_output\" with \"rowwise_split_input\"");
    if (mod->decl)
        tp_diag_note_at(g, mod->decl->span, "'%s' is declared here", mod->fqn);
}

static void resolve(tp_plan *p, tp_model *m, tp_diags *d)
{
    module_index x;
    module_index_init(&x, m);
    for (int si = 0; si < p->nstyles; si++) {
        tp_style *s = p->styles[si];
        int duplicates = 0;
        bool unsupported = false;
        tp_module *mod;
        for (int i = 0; (mod = next_match(&x, s->pattern, &i));) {
            s->nmatched++;
            if (!supports(s, mod)) {
                if (!unsupported) {
                    tp_diag *g = tp_diag_add(d, TP_ERROR, s->call->span, "unsupported-module",
                                             "%s does not support '%s', a %s", s->name, mod->fqn, mod->type);
                    if (s->hf && !s->packed)
                        hf_unsupported_help(g, s->hf, mod);
                    else if (mod->kind == TP_MOD_CONV1D)
                        conv1d_help(g, s);
                    else if (s->packed)
                        tp_diag_help(g, "%s shards the segments of a fused Linear declared with packed=(...) in "
                                        "the model; use ColwiseParallel() for a plain Linear",
                                     s->hf ? "packed_colwise" : "tpcc_packed=True");
                    else if (s->kind == TP_STYLE_SEQUENCE)
                        tp_diag_help(g, "SequenceParallel is for norms (LayerNorm, RMSNorm); shard a Linear with ColwiseParallel or RowwiseParallel");
                    else if (mod->kind == TP_MOD_RMSNORM || mod->kind == TP_MOD_LAYERNORM)
                        tp_diag_help(g, "use SequenceParallel() for a norm, or leave it replicated");
                    else
                        tp_diag_help(g, "%s only supports Linear and Embedding; put PrepareModuleInput/PrepareModuleOutput on a container module", s->name);
                    if (mod->decl)
                        tp_diag_note_at(g, mod->decl->span, "'%s' is declared here", mod->fqn);
                }
                unsupported = true;
                continue;
            }
            if (s->hf && s->packed && !tp_packed_halves(mod))
                report_unequal_packing(d, s, mod);
            if (mod->style)
                report_duplicate(d, s, mod, &duplicates);
            else
                mod->style = s;
        }
    }
    /* after every entry is resolved, so a rename is checked against them all */
    for (int si = 0; si < p->nstyles; si++)
        if (p->styles[si]->nmatched == 0)
            report_unmatched(&x, p->styles[si], d);
    module_index_free(&x);
}

/* layers.7.mlp -> layers.*.mlp: one name for a module of every layer. */
static char *generic_name(const char *fqn)
{
    char *pat = tp_xstrdup(fqn);
    for (char *q = pat; *q; q++)
        if ((q == pat || q[-1] == '.') && *q >= '0' && *q <= '9') {
            char *e = q;
            while (*e >= '0' && *e <= '9') e++;
            if (*e == '.' || !*e) { *q = '*'; memmove(q + 1, e, strlen(e) + 1); }
        }
    return pat;
}

/* Linear and Embedding parameters that no entry shards are replicated on
 * every rank, usually an oversight: one warning listing them all. */
static void warn_uncovered(tp_plan *p, tp_model *m, tp_diags *d)
{
    if (tp_plan_tp_size(p) <= 1 || !p->nstyles)
        return;
    tp_buf names;
    tp_buf_init(&names);
    tp_module *first = NULL;
    tp_map seen;                   /* the generic names listed */
    tp_map_init(&seen);
    int nseen = 0;
    for (int i = 0; i < m->count; i++) {
        tp_module *mod = m->all[i];
        if ((mod->kind != TP_MOD_LINEAR && mod->kind != TP_MOD_EMBEDDING) || mod->style)
            continue;
        tp_param *w = tp_module_param(mod, "weight");
        if (w && w->tied_to && w->tied_to->owner->style)
            continue;              /* covered by the entry of its tied twin */
        char *pat = generic_name(mod->fqn);
        if (tp_map_puts(&seen, pat, nseen) == nseen) {
            nseen++;
            tp_buf_appendf(&names, "%s'%s'", nseen > 1 ? ", " : "", pat);
            if (!first)
                first = mod;
        }
        free(pat);
    }
    if (nseen) {
        tp_diag *g = tp_diag_add(d, TP_WARNING, item_head(p->styles[0]->item), "uncovered-parameter",
                                 "no entry shards %s: %s replicated on every rank", names.data,
                                 nseen == 1 ? "its parameters are" : "their parameters are");
        if (first->decl)
            tp_diag_note_at(g, first->decl->span, "'%s' is declared here", first->fqn);
        tp_diag_help(g, "shard them with ColwiseParallel()/RowwiseParallel(), or give them a "
                        "PrepareModuleOutput(...) entry to keep them replicated on purpose");
    }
    tp_map_free(&seen);
    tp_buf_free(&names);
}

bool tp_plan_build(tp_plan *p, const tp_node *file, int file_id, tp_model *m, tp_config *c)
{
    memset(p, 0, sizeof *p);
    p->file = file;
    p->file_id = file_id;
    p->mesh_span = TP_NO_SPAN;
    p->dp_dim = -1;
    p->data_parallel = 1;
    for (int i = 0; i < file->nkids; i++) {
        const tp_node *it = file->kids[i];
        if (it->kind == N_MESH) {
            if (p->mesh_ndim)
                tp_diag_add(c->diags, TP_ERROR, it->span, "mesh", "the plan declares a mesh twice");
            else
                read_mesh(p, it, c);
        } else if (it->kind == N_LOSS_PARALLEL) {
            p->loss_parallel = true;
            p->loss_parallel_span = it->span;
        }
    }
    if (!p->mesh_ndim) {
        /* no mesh statement: a 1-D mesh of size `tp` */
        int64_t tp = 1;
        if (tp_config_has(c, "tp") && !tp_config_get(c, "tp", TP_NO_SPAN, &tp))
            tp = 1;
        p->mesh_name[0] = tp_xstrdup("tp");
        p->mesh_size[0] = tp < 1 ? 1 : tp;
        p->mesh_ndim = 1;
    }
    p->tp_dim = p->mesh_ndim - 1;
    for (int i = 0; i < p->mesh_ndim; i++)
        if (!strcmp(p->mesh_name[i], "tp"))
            p->tp_dim = i;
    choose_tp_dim(p, file, c->diags);
    tp_train_block_read(p, file, c);
    /* Python's order: a name holds from the line that binds it */
    tp_pynames names;
    tp_pynames_init(&names, file, c);
    for (int i = 0; i < file->nkids; i++) {
        if (tp_pynames_is_binding(file->kids[i]))
            tp_pynames_bind(&names, file->kids[i]);
        else if (file->kids[i]->kind == N_PARALLELIZE)
            read_parallelize(p, file->kids[i], c, &names);
    }
    tp_pynames_free(&names);
    resolve(p, m, c->diags);
    if (!p->incomplete)     /* a parameter an entry tpcc cannot read shards is not uncovered */
        warn_uncovered(p, m, c->diags);
    return true;
}

void tp_plan_free(tp_plan *p)
{
    for (int i = 0; i < p->nstyles; i++) {
        tp_style *s = p->styles[i];
        for (int k = 0; k < s->in.nkw; k++)
            free(s->in.kw[k]);
        free(s->pattern);
        free(s->base);
        free(s);
    }
    free(p->styles);
    for (int i = 0; i < p->nvalues; i++)
        tp_node_free(p->values[i]);
    free(p->values);
    for (int i = 0; i < p->mesh_ndim; i++)
        free(p->mesh_name[i]);
    memset(p, 0, sizeof *p);
}

tp_span tp_entry_span(const tp_style *s) { return s->entry->kids[0]->span; }
