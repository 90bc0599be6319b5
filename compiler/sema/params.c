/* params.c: the parameters under the plan, checked before the forward
 * pass: tied weights placed alike, every sharded dimension divisible (or
 * padded), and tpcc_replicate_heads's expanded weights. Their placements
 * are param_placement.c's. */
#include <stdlib.h>
#include <string.h>
#include "compiler/front/astutil.h"
#include "compiler/sema/check_impl.h"
#include "util/xalloc.h"

/* The style giving a weight of `mod` the placement `want`, if any. */
static const char *style_for(const tp_module *mod, tp_placement want)
{
    if (want.kind != TP_SHARD || (mod->kind != TP_MOD_LINEAR && mod->kind != TP_MOD_EMBEDDING))
        return NULL;
    for (int k = 0; k < TP_STYLE_NCLASSES; k++)
        if (tp_placement_eq(tp_style_partition(tp_style_rows[k].params, mod, false), want, 2))
            return tp_style_class_names[k];
    return NULL;
}

static void check_tie(interp *I, tp_param *prm)
{
    tp_param *twin = prm->tied_to;
    tp_placement a = tp_param_placement(prm), b = tp_param_placement(twin);
    if (tp_placement_eq(a, b, 2) || I->tp == 1)
        return;
    const tp_style *sa = prm->owner->style, *sb = twin->owner->style;
    char pa[24], pb[24];
    tp_span at = sa ? tp_entry_span(sa) : sb ? tp_entry_span(sb) : prm->tie_span;
    tp_diag *g = tp_finding(I, TP_ERROR, at, "tied-weights", NULL, NULL,
                            "'%s' is tied to '%s', but the plan places them differently: %s vs %s",
                            prm->fqn, twin->fqn, tp_pl_str(a, 2, pa), tp_pl_str(b, 2, pb));
    if (!g)
        return;
    if (sb)
        tp_diag_note_at(g, tp_entry_span(sb), "'%s' is %s here", twin->owner->fqn, sb->name);
    tp_diag_note_at(g, prm->tie_span, "the weights are tied here");
    /* Prefer changing the embedding's style: its input is replicated token
     * ids, so Colwise <-> Rowwise keeps the rest of the plan valid. */
    tp_module *emb = prm->owner->kind == TP_MOD_EMBEDDING ? prm->owner : twin->owner;
    tp_module *other = emb == prm->owner ? twin->owner : prm->owner;
    tp_param *other_w = tp_module_param(other, "weight");
    const char *fix = style_for(emb, tp_param_placement(other_w));
    if (emb->style && fix && emb->kind == TP_MOD_EMBEDDING && strcmp(fix, emb->style->name)) {
        tp_diag_help(g, "make '%s' %s so both hold %s; a vocab-sharded embedding (RowwiseParallel) with a "
                        "column-parallel head keeps sequence parallelism with tied weights",
                     emb->fqn, fix, tp_pl_str(tp_param_placement(other_w), 2, pa));
        tp_fix_rename_style(g, emb->style, fix);
    } else {
        tp_diag_help(g, "give both modules styles that shard the shared weight the same way: Embedding RowwiseParallel "
                        "(vocab rows, Shard(0)) pairs with Linear ColwiseParallel (Shard(0))");
    }
}

/* The model declares this dimension paddable (pad_to=: a vocabulary, the
 * rows of an Embedding or of a Linear's output), its padding zero and
 * dropped from the outputs. */
static bool paddable(const tp_param *prm, int dim)
{
    const tp_module *mod = prm->owner;
    const tp_node *ctor = mod->decl ? mod->decl->kids[0] : NULL;
    return dim == 0 && (mod->kind == TP_MOD_LINEAR || mod->kind == TP_MOD_EMBEDDING) && ctor &&
           ctor->kind == N_CALL && tp_call_kw(ctor, "pad_to");
}

/* PyTorch shards a vocabulary tp does not divide unevenly (Shard(0) gives
 * the first ranks a row more) and computes the right logits; the schedule
 * holds equal shards, so the rows are padded to a multiple of tp, as
 * pad_to= pads them. The shape is the model's own: tp_check runs once per
 * unit, at one tp. */
static void pad_for_tp(interp *I, tp_param *prm, int dim)
{
    int64_t n = prm->shape[dim], padded = (n + I->tp - 1) / I->tp * I->tp;
    prm->shape[dim] = padded;
    tp_diag *g = tp_finding(I, TP_NOTE, tp_entry_span(prm->owner->style), "divisibility", NULL, NULL,
                            "%s shards '%s' on dimension %d (%s = %lld), which does not split over %lld ranks: "
                            "PyTorch shards it unevenly; the schedule pads it to %lld (zero rows, dropped from "
                            "the outputs)", prm->owner->style->name, prm->fqn, dim, prm->dimname[dim], (long long)n,
                            (long long)I->tp, (long long)padded);
    if (g && prm->owner->decl)
        tp_diag_note_at(g, prm->owner->decl->span, "'%s' is declared here", prm->owner->fqn);
}

/* packed_colwise shards every segment of the fused output (its rows). */
static void check_segments_divisible(interp *I, tp_param *prm)
{
    const tp_module *mod = prm->owner;
    for (int i = 0; i < mod->nsegments; i++) {
        if (mod->segments[i] % I->tp == 0)
            continue;
        tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(mod->style), "divisibility", NULL, NULL,
                                "%s shards each segment of '%s' separately, but segment %d (%lld rows) does not split "
                                "over %lld ranks", mod->style->name, prm->fqn, i, (long long)mod->segments[i],
                                (long long)I->tp);
        if (g && mod->decl)
            tp_diag_note_at(g, mod->decl->span, "'%s' is declared here", mod->fqn);
        if (g)
            tp_diag_help(g, "use a tp that divides every segment, or leave '%s' replicated", mod->fqn);
        return;
    }
}

static void check_param_divisible(interp *I, tp_param *prm)
{
    tp_placement p = tp_param_placement(prm);
    if (prm->owner->style->packed) {
        check_segments_divisible(I, prm);
        return;
    }
    if (p.kind != TP_SHARD || prm->shape[p.dim] % I->tp == 0)
        return;
    if (paddable(prm, p.dim)) {
        pad_for_tp(I, prm, p.dim);
        return;
    }
    const tp_style *s = prm->owner->style;
    int64_t n = prm->shape[p.dim];
    tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(s), "divisibility", NULL, NULL,
                            "%s shards '%s' on dimension %d (%s = %lld), which does not split over %lld ranks",
                            s->name, prm->fqn, p.dim, prm->dimname[p.dim], (long long)n, (long long)I->tp);
    if (!g)
        return;
    if (prm->owner->decl)
        tp_diag_note_at(g, prm->owner->decl->span, "'%s' is declared here", prm->owner->fqn);
    tp_diag_help(g, "use a tp that divides %lld, or leave '%s' replicated", (long long)n, prm->owner->fqn);
}

/* ColwiseParallel(tpcc_replicate_heads=H) at tp > H: each of the H heads
 * of the output is replicated over tp / H ranks, as Megatron and vLLM do
 * with kv heads, so rank r holds head r / (tp / H). The parameters become
 * the expanded tensor of tp heads (head j is the checkpoint's head
 * j / (tp / H)), sharded as usual: every layout rule after it sees tp
 * heads split one per rank, and attention's grouping of query heads on a
 * rank meets the kv head the checkpoint gives them. The schedule's slice
 * names the checkpoint rows each rank reads (tp_head_replicas). At
 * tp <= H the option changes nothing. */
static bool replicate_heads(interp *I, tp_module *mod)
{
    const tp_style *s = mod->style;
    int64_t heads = s->replicate_heads;
    if (I->tp <= heads)
        return true;
    if (mod->kind != TP_MOD_LINEAR) {
        tp_diag_add(I->d, TP_ERROR, tp_entry_span(s), "plan",
                    "tpcc_replicate_heads replicates the heads of a Linear's output; '%s' is a %s", mod->fqn,
                    mod->type);
        return false;
    }
    if (I->tp % heads) {
        tp_diag *g = tp_finding(I, TP_ERROR, tp_entry_span(s), "divisibility", NULL, NULL,
                                "the %lld heads of '%s' cannot be replicated evenly over %lld ranks: each head "
                                "goes to tp / heads ranks, so tp must be a multiple of %lld",
                                (long long)heads, mod->fqn, (long long)I->tp, (long long)heads);
        if (g)
            tp_diag_help(g, "use a tp that divides %lld or is a multiple of it", (long long)heads);
        return false;
    }
    for (int k = 0; k < mod->nparams; k++) {
        tp_param *prm = &mod->params[k];
        if (prm->shape[0] % heads) {
            tp_diag_add(I->d, TP_ERROR, tp_entry_span(s), "plan",
                        "tpcc_replicate_heads=%lld: '%s' has %lld output features, not a whole number of %lld heads",
                        (long long)heads, prm->fqn, (long long)prm->shape[0], (long long)heads);
            return false;
        }
    }
    for (int k = 0; k < mod->nparams; k++)
        mod->params[k].shape[0] = mod->params[k].shape[0] / heads * I->tp;
    return true;
}

void tp_check_params(interp *I)
{
    for (int i = 0; i < I->m->count; i++) {
        tp_module *mod = I->m->all[i];
        I->cur = mod;
        if (mod->style && mod->style->replicate_heads && !replicate_heads(I, mod))
            continue;
        for (int k = 0; k < mod->nparams; k++) {
            tp_param *prm = &mod->params[k];
            if (prm->tied_to)
                check_tie(I, prm);
            if (mod->style)
                check_param_divisible(I, prm);
        }
    }
    I->cur = NULL;
}
