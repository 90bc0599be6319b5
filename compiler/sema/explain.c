/* explain.c: the --explain table: every module boundary with the placement
 * and kind (DTensor or plain) of what goes in and what comes out, then the
 * collectives of the forward pass. */
#include <string.h>
#include "compiler/sema/check.h"

/* What each Hugging Face string the plan uses is in transformers, and
 * what it does, once per string. */
static void print_hf_styles(const tp_plan *p, FILE *out)
{
    bool header = false;
    for (int i = 0; i < p->nstyles; i++) {
        const tp_hf_style *h = p->styles[i]->hf;
        bool seen = !h;
        for (int k = 0; k < i && !seen; k++)
            seen = p->styles[k]->hf == h;
        if (seen)
            continue;
        if (!header)
            fprintf(out, "\nHugging Face string styles:\n");
        header = true;
        fprintf(out, "  \"%s\" (transformers %s: %s): %s\n", h->name, h->version, h->transformers, h->does);
    }
}

void tp_explain_print(const tp_analysis *a, const tp_plan *p, FILE *out)
{
    fprintf(out, "mesh:");
    for (int i = 0; i < p->mesh_ndim; i++)
        fprintf(out, " %s=%lld", p->mesh_name[i], (long long)p->mesh_size[i]);
    fprintf(out, "%s\n\n", p->loss_parallel ? ", loss_parallel" : "");
    int w = 6;
    for (int i = 0; i < a->nrows; i++) {
        int n = (int)strlen(a->rows[i].fqn);
        if (n > w) w = n;
    }
    fprintf(out, "%-*s  %-24s  %s\n", w, "module", "style", "inputs as they arrive -> output as it leaves");
    for (int i = 0; i < a->nrows; i++) {
        const tp_boundary *r = &a->rows[i];
        fprintf(out, "%-*s  %-24s  %s -> %s\n", w, r->fqn, r->style ? r->style->name : "-",
                r->inputs, r->outputs ? r->outputs : "(not reached)");
    }
    print_hf_styles(p, out);
    fprintf(out, "\ncollectives and local reshards (forward):\n");
    for (int i = 0; i < a->ncomms; i++) {
        const tp_redist_record *c = &a->comms[i];
        char f[24], t[24];
        fprintf(out, "  %-15s %-12s -> %-12s %12lld elements  %s%s%s\n", tp_redist_name(c->kind),
                tp_placement_str(c->from, f, sizeof f), tp_placement_str(c->to, t, sizeof t),
                (long long)c->elems, c->module ? c->module->fqn : "", c->cause ? "  <- " : "",
                c->cause ? c->cause->pattern : (c->implicit ? "  (implicit, DTensor)" : ""));
    }
}
