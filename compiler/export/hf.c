/* hf.c: --export=hf. The plan as a Hugging Face tp_plan dict (JSON: keys
 * relative to the model root, values the strings transformers 5.23
 * registers in ALL_PARALLEL_STYLES, transformers/distributed/
 * tensor_parallel.py). Each PyTorch style maps to the string whose style
 * has the same semantics on the module it is applied to; one with none is
 * an `export` error naming the entry. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/export/export.h"
#include "util/xalloc.h"

static const char hf_strings[] =
    "colwise, colwise_gather_output, rowwise, rowwise_split_input, embedding_rowwise, "
    "embedding_colwise, sequence_parallel, packed_colwise";

static bool is_replicate(tp_io_layout l) { return !l.none && l.pl.kind == TP_REPLICATE; }
static bool is_last_shard(tp_io_layout l) { return !l.none && l.pl.kind == TP_SHARD && l.pl.dim == -1; }

/* The kind of the modules the entry matched; Linear when it matched none. */
static tp_module_kind matched_kind(const tp_export_unit *u, const tp_style *s)
{
    for (int i = 0; i < u->model->count; i++)
        if (u->model->all[i]->style == s)
            return u->model->all[i]->kind;
    return TP_MOD_LINEAR;
}

/* transformers' registrations, with the PyTorch style each equals:
 *   colwise                ColwiseParallel()                       on a Linear
 *   colwise_gather_output  ColwiseParallel(output_layouts=Replicate())  (colwise_rep is the same)
 *   rowwise                RowwiseParallel()
 *   rowwise_split_input    RowwiseParallel(input_layouts=Replicate())   (rowwise_rep is the same)
 *   embedding_rowwise      RowwiseParallel(input_layouts=Replicate())   on an Embedding (vocab-sharded,
 *                          the partial lookups all-reduced)
 *   embedding_colwise      ColwiseParallel(output_layouts=Replicate())  on an Embedding
 *   sequence_parallel      SequenceParallel(use_local_output=True)
 *   packed_colwise         itself (ColwiseParallel(tpcc_packed=True) has no string)
 * every one with use_local_output=True. */
static const char *hf_style(const tp_export_unit *u, const tp_style *s)
{
    /* a string transformers 5.23 registers is itself; 4.56's are gone there */
    if (s->hf)
        return strcmp(s->hf->version, "5.23") ? NULL : s->hf->name;
    /* tpcc_packed=True shards any segments; transformers' packed_colwise
     * only two equal halves */
    if (s->packed || s->replicate_heads)
        return NULL;
    bool embedding = matched_kind(u, s) == TP_MOD_EMBEDDING;
    switch (s->kind) {
    case TP_STYLE_COLWISE:
        if (!s->use_local_output || !is_replicate(s->input))
            return NULL;
        if (embedding)
            return is_replicate(s->output) ? "embedding_colwise" : NULL;
        return is_last_shard(s->output) ? "colwise" : is_replicate(s->output) ? "colwise_gather_output" : NULL;
    case TP_STYLE_ROWWISE:
        if (!s->use_local_output || !is_replicate(s->output))
            return NULL;
        if (embedding)
            return is_replicate(s->input) ? "embedding_rowwise" : NULL;
        return is_last_shard(s->input) ? "rowwise" : is_replicate(s->input) ? "rowwise_split_input" : NULL;
    case TP_STYLE_SEQUENCE:
        return s->sequence_dim == 1 && s->use_local_output ? "sequence_parallel" : NULL;
    default:
        return NULL;
    }
}

static void no_equivalent(const tp_export_unit *u, const tp_style *s)
{
    char in[32], out[32], layouts[128];
    snprintf(layouts, sizeof layouts, "no registered style takes input_layouts=%s with output_layouts=%s on a%s",
             tp_placement_str(s->input.pl, in, sizeof in), tp_placement_str(s->output.pl, out, sizeof out),
             matched_kind(u, s) == TP_MOD_EMBEDDING ? "n Embedding" : " Linear");
    const char *why = s->hf ? "transformers 4.56 registered it; 5.23 no longer does"
                    : s->replicate_heads ? "tpcc_replicate_heads is tpcc's own keyword"
                    : s->kind == TP_STYLE_PREPARE_INPUT || s->kind == TP_STYLE_PREPARE_OUTPUT ||
                      s->kind == TP_STYLE_PREPARE_INPUT_OUTPUT ? "transformers registers no PrepareModule* style"
                    : !s->use_local_output ? "every transformers style hands on a plain tensor (use_local_output=True)"
                    : s->kind == TP_STYLE_SEQUENCE ? "transformers' sequence_parallel shards dimension 1"
                    : layouts;
    tp_diag *g = tp_diag_add(u->diags, TP_ERROR, s->entry->span, "export",
                             "'%s': %s has no Hugging Face tp_plan equivalent: %s", s->pattern, s->name, why);
    tp_diag_help(g, "transformers 5.23 registers %s (see README, Python); export this plan with --export=pytorch",
                 hf_strings);
}

char *tp_export_hf(const tp_export_unit *u)
{
    const tp_plan *p = u->plan;
    json_t *plan = json_object();
    bool ok = plan != NULL;
    for (int i = 0; ok && i < p->nstyles; i++) {
        const char *style = hf_style(u, p->styles[i]);
        if (!style) {
            no_equivalent(u, p->styles[i]);
            continue;
        }
        if (json_object_set_new(plan, p->styles[i]->pattern, json_string(style)) != 0)
            ok = false;
    }
    if (p->loss_parallel)
        tp_diag_add(u->diags, TP_WARNING, p->loss_parallel_span, "export",
                    "a tp_plan does not say the loss runs under loss_parallel(): run it inside "
                    "`with torch.distributed.tensor.parallel.loss_parallel():` yourself");
    char *text = ok && !u->diags->errors ? json_dumps(plan, JSON_INDENT(4) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(plan);
    if (!text)
        return NULL;
    char *out = tp_xasprintf("%s\n", text);
    free(text);
    return out;
}
