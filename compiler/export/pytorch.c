/* pytorch.c: --export=pytorch. A Python module that applies a checked plan
 * with PyTorch's parallelize_module: PLAN lists the parallelize blocks as
 * (path, dict) pairs, every style written with all its arguments (PyTorch's
 * defaults included, so the file says exactly what was checked), and
 * parallelize(model, mesh) calls parallelize_module once per block for
 * every module its path names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/export/export.h"

/* The names the module imports: placements and styles it uses. */
enum {
    USES_REPLICATE = 1 << 0, USES_SHARD = 1 << 1, USES_PARTIAL = 1 << 2,
    USES_STYLE = 1 << 3,        /* then 1 << (3 + tp_style_kind) */
};

/* A Python string literal in double quotes. */
static void py_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* The entry's key as written in its parallelize block's dict. */
static const char *entry_key(const tp_style *s)
{
    return s->entry->kids[0]->str;
}

typedef struct writer {
    FILE *f;
    unsigned uses;
    int nargs;                  /* of the style being written: a ", " before each but the first */
} writer;

/* "name=" of the style's next argument. */
static void put_arg(writer *w, const char *name)
{
    fprintf(w->f, "%s%s=", w->nargs++ ? ", " : "", name);
}

static void put_layout(writer *w, const tp_io_layout *l)
{
    char buf[32];
    if (l->none) {
        fputs("None", w->f);
        return;
    }
    w->uses |= l->pl.kind == TP_SHARD ? USES_SHARD : l->pl.kind == TP_REPLICATE ? USES_REPLICATE : USES_PARTIAL;
    fputs(tp_placement_str(l->pl, buf, sizeof buf), w->f);
}

/* (a, b) or (a,): PyTorch keeps every layouts argument as a tuple. */
static void put_tuple(writer *w, const char *name, const tp_io_layout *l, int n)
{
    put_arg(w, name);
    fputc('(', w->f);
    for (int i = 0; i < n; i++) {
        if (i)
            fputs(", ", w->f);
        put_layout(w, &l[i]);
    }
    fputs(n == 1 ? ",)" : ")", w->f);
}

static void put_kw_dict(writer *w, const char *name, char *const *kw, const tp_io_layout *l, int n)
{
    put_arg(w, name);
    fputc('{', w->f);
    for (int i = 0; i < n; i++) {
        if (i)
            fputs(", ", w->f);
        py_str(w->f, kw[i]);
        fputs(": ", w->f);
        put_layout(w, &l[i]);
    }
    fputc('}', w->f);
}

static void put_inputs(writer *w, const tp_io_spec *in)
{
    if (in->n >= 0) {
        put_tuple(w, "input_layouts", in->layout, in->n);
        put_tuple(w, "desired_input_layouts", in->desired, in->n);
    }
    if (in->nkw > 0) {
        put_kw_dict(w, "input_kwarg_layouts", in->kw, in->kw_layout, in->nkw);
        put_kw_dict(w, "desired_input_kwarg_layouts", in->kw, in->kw_desired, in->nkw);
    }
}

static void put_outputs(writer *w, const tp_io_spec *out)
{
    put_tuple(w, "output_layouts", out->layout, out->n);
    put_tuple(w, "desired_output_layouts", out->desired, out->n);
}

static void put_bool(writer *w, const char *name, bool b)
{
    put_arg(w, name);
    fputs(b ? "True" : "False", w->f);
}

/* One argument of the style's row (plan/styles.def, exports). */
static void put_style_arg(writer *w, const tp_style *s, tp_style_arg a)
{
    switch (a) {
    case TP_ARG_INPUT_LAYOUT:       /* one placement: the constructors wrap it in a tuple themselves */
        put_arg(w, "input_layouts");
        put_layout(w, &s->input);
        break;
    case TP_ARG_OUTPUT_LAYOUT:
        put_arg(w, "output_layouts");
        put_layout(w, &s->output);
        break;
    case TP_ARG_USE_LOCAL_OUTPUT: put_bool(w, "use_local_output", s->use_local_output); break;
    case TP_ARG_SEQUENCE_DIM:
        put_arg(w, "sequence_dim");
        fprintf(w->f, "%d", s->sequence_dim);
        break;
    case TP_ARG_INPUTS: put_inputs(w, &s->in); break;
    case TP_ARG_INPUTS_USE_LOCAL_OUTPUT: put_bool(w, "use_local_output", s->in.use_local); break;
    case TP_ARG_INPUTS_USE_LOCAL_INPUT: put_bool(w, "use_local_input", s->in.use_local); break;
    case TP_ARG_OUTPUTS: put_outputs(w, &s->out); break;
    case TP_ARG_OUTPUTS_USE_LOCAL_OUTPUT: put_bool(w, "use_local_output", s->out.use_local); break;
    case TP_ARG_END: break;
    }
}

/* One style as its constructor call with every argument; false (reported)
 * when it is not PyTorch's. */
static bool put_style(writer *w, tp_diags *d, const tp_style *s)
{
    if (s->packed || s->replicate_heads) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, s->entry->span, "export",
                                 "'%s' has no PyTorch equivalent: %s is %s, not a torch ParallelStyle",
                                 s->pattern, !s->packed ? "tpcc_replicate_heads" : s->hf ? s->name : "tpcc_packed=True",
                                 s->packed && s->hf ? "transformers' PackedColwiseParallel" : "tpcc's own keyword");
        tp_diag_help(g, "%s", !s->packed ? "drop tpcc_replicate_heads (tp at most kv_heads) to export to PyTorch"
                              : s->hf    ? "export it with --export=hf, or shard the fused projection's pieces "
                                           "as separate ColwiseParallel() Linears"
                                         : "shard the fused projection's pieces as separate ColwiseParallel() "
                                           "Linears");
        return false;
    }
    if (s->hf && (s->kind == TP_STYLE_IDENTITY || s->hf->no_hooks)) {
        tp_diag *g = tp_diag_add(d, TP_ERROR, s->entry->span, "export",
                                 "'%s' has no PyTorch equivalent: \"%s\" is transformers %s's %s, which no torch "
                                 "ParallelStyle does (%s)", s->pattern, s->name, s->hf->version,
                                 s->hf->transformers, s->hf->does);
        tp_diag_help(g, "export it with --export=hf, or leave the module out of a PyTorch plan");
        return false;
    }
    w->uses |= USES_STYLE << s->kind;
    fprintf(w->f, "%s(", tp_style_class_names[s->kind]);
    w->nargs = 0;
    for (const tp_style_arg *a = tp_style_rows[s->kind].exports; *a != TP_ARG_END; a++)
        put_style_arg(w, s, *a);
    fputs(")", w->f);
    return true;
}

/* PLAN = [(path, {key: style, ...}), ...] in the plan's order. */
static bool put_blocks(writer *w, const tp_export_unit *u)
{
    const tp_plan *p = u->plan;
    bool ok = true;
    fputs("PLAN = [\n", w->f);
    for (int i = 0; i < p->nstyles; i++) {
        const tp_style *s = p->styles[i];
        if (i == 0 || p->styles[i - 1]->item != s->item) {
            fputs("    (", w->f);
            py_str(w->f, s->base);
            fputs(", {\n", w->f);
        }
        fputs("        ", w->f);
        py_str(w->f, entry_key(s));
        fputs(": ", w->f);
        ok &= put_style(w, u->diags, s);
        fputs(",\n", w->f);
        if (i + 1 == p->nstyles || p->styles[i + 1]->item != s->item)
            fputs("    }),\n", w->f);
    }
    fputs("]\n", w->f);
    return ok;
}

static void put_imports(FILE *f, unsigned uses)
{
    static const char *const placements[] = {"Partial", "Replicate", "Shard"};
    static const unsigned placement_use[] = {USES_PARTIAL, USES_REPLICATE, USES_SHARD};
    fputs("import fnmatch\n\n", f);
    const char *sep = "from torch.distributed.tensor import ";
    for (int i = 0; i < 3; i++)
        if (uses & placement_use[i]) {
            fprintf(f, "%s%s", sep, placements[i]);
            sep = ", ";
        }
    if (uses & (USES_PARTIAL | USES_REPLICATE | USES_SHARD))
        fputc('\n', f);
    fputs("from torch.distributed.tensor.parallel import (\n", f);
    /* alphabetical, as an import sorter would keep them */
    const char *names[TP_STYLE_NCLASSES + 1];
    int n = 0;
    for (int k = 0; k < TP_STYLE_NCLASSES; k++)
        if (uses & (USES_STYLE << k))
            names[n++] = tp_style_class_names[k];
    names[n++] = "parallelize_module";
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (int i = 0; i < n; i++)
        fprintf(f, "    %s,\n", names[i]);
    fputs(")\n", f);
}

static const char modules_at_fn[] =
    "def modules_at(model, path):\n"
    "    \"\"\"The modules `path` names: \"\" is the model itself; otherwise every\n"
    "    submodule whose dotted name matches it one component at a time with\n"
    "    fnmatch, as parallelize_module matches its plan's keys.\"\"\"\n"
    "    if not path:\n"
    "        return [model]\n"
    "    atoms = path.split(\".\")\n"
    "    found = []\n"
    "    for name, module in model.named_modules():\n"
    "        parts = name.split(\".\") if name else []\n"
    "        if len(parts) == len(atoms) and all(fnmatch.fnmatch(n, a) for n, a in zip(parts, atoms)):\n"
    "            found.append(module)\n"
    "    return found\n";

char *tp_export_pytorch(const tp_export_unit *u, const char *plan_path)
{
    char *body = NULL, *text = NULL;
    size_t body_len = 0, text_len = 0;
    writer w = {open_memstream(&body, &body_len), 0, 0};
    if (!w.f)
        return NULL;
    bool ok = put_blocks(&w, u);
    fclose(w.f);
    if (!ok) {
        free(body);
        return NULL;
    }
    const tp_plan *p = u->plan;
    FILE *f = open_memstream(&text, &text_len);
    if (!f) {
        free(body);
        return NULL;
    }
    fprintf(f, "# Generated by tpcc %s --export=pytorch from %s, which checks without\n"
               "# errors on a tp mesh of %lld. parallelize(model, mesh) applies it with PyTorch's\n"
               "# parallelize_module; every style is written with all its arguments.\n",
            TPCC_VERSION, plan_path, (long long)tp_plan_tp_size(p));
    put_imports(f, w.uses);
    fputs("\n# (module path, plan): parallelize_module(module, mesh, plan) for every module\n"
          "# the path names, in this order (the plan's parallelize blocks)\n", f);
    fputs(body, f);
    free(body);
    fprintf(f, "\n# %s\nLOSS_PARALLEL = %s\n\n\n",
            p->loss_parallel ? "The plan computes the loss under loss_parallel(): run the loss inside\n"
                               "# `with torch.distributed.tensor.parallel.loss_parallel():`."
                             : "The plan computes an ordinary loss (no loss_parallel()).",
            p->loss_parallel ? "True" : "False");
    fputs(modules_at_fn, f);
    fputs("\n\ndef parallelize(model, mesh):\n", f);
    if (p->mesh_ndim > 1) {
        fputs("    \"\"\"Apply PLAN to `model` on the mesh dimension ", f);
        py_str(f, p->mesh_name[p->tp_dim]);
        fputs(" of `mesh`.\"\"\"\n    tp_mesh = mesh[", f);
        py_str(f, p->mesh_name[p->tp_dim]);
        fputs("]\n", f);
    } else {
        fputs("    \"\"\"Apply PLAN to `model` on the 1-D tp `mesh`.\"\"\"\n    tp_mesh = mesh\n", f);
    }
    fputs("    for path, plan in PLAN:\n"
          "        for module in modules_at(model, path):\n"
          "            parallelize_module(module, tp_mesh, plan)\n"
          "    return model\n", f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
