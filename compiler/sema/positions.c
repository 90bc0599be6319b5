/* positions.c: transformers' models number the positions from the length
 * of their embedding's output when the caller passes no position_ids
 * (LlamaModel and GPT2Model in transformers 5: position_ids =
 * torch.arange(inputs_embeds.shape[1]) + past_seen_tokens). A plan whose
 * embedding hands each rank a plain tensor of its slice of the sequence (sequence parallelism's Shard(1) output) makes that
 * length seq / tp: every rank numbers its slice from 0, the causal mask
 * covers seq / tp positions while attention, after the gather, runs over
 * seq, and the forward fails ("The size of tensor a (16) must match the
 * size of tensor b (8)"), or, where nothing meets the two lengths (GPT-2's
 * learned positions), every rank but the first adds the wrong ones. It
 * works when the caller passes the global position_ids, which tprun does
 * and the plan cannot know: a warning at the entry that shards. A DTensor
 * output keeps the global shape and is not this hazard. */
#include "compiler/sema/check_impl.h"

void tp_check_positions_source(interp *I, const tp_module *mod, const tp_val *out, tp_span span)
{
    if (mod != I->m->positions_from || out->dtensor || out->pl.kind != TP_SHARD || out->pl.dim != 1 ||
        out->rank < 2)
        return;
    const tp_style *s = mod->style;
    tp_diag *g = tp_finding(I, TP_WARNING, s ? tp_entry_span(s) : tp_cause_span(out, span), "position-ids", out,
                            NULL, "transformers numbers the positions from the length of the output of '%s' "
                            "when the caller passes no position_ids, and this plan makes it a plain tensor of each "
                            "rank's 1/%lld of the sequence (%lld of %lld positions): the forward fails at the attention "
                            "mask, or numbers every rank's slice from 0",
                            mod->fqn, (long long)I->tp, (long long)tp_local_size(I, out, 1), (long long)out->shape[1]);
    if (!g)
        return;
    tp_diag_help(g, "pass the global positions to the model: model(input_ids, position_ids=torch.arange(%lld)"
                    ".unsqueeze(0)); tprun does", (long long)out->shape[1]);
}
