/* hf_check.h: a Hugging Face config.json (--hf-config) against the model
 * file it configures.
 *
 * A model file says what it implements in an `hf { }` block:
 *
 *     hf {
 *         architectures = ("LlamaForCausalLM",)
 *         model_types   = ("llama",)
 *         understands   = ("torch_dtype", "bos_token_id", ...)   # change nothing tpcc computes
 *         requires      = {"hidden_act": "silu"}                 # the only value it computes
 *         positions_from = "model.embed_tokens"                  # see model.h
 *     }
 *
 * config.json must name one of those architectures, and every key in it
 * must be read by an hf() call of the model's config block, be understood,
 * or hold the value the model requires; a key known to change the math
 * (softcapping, a RoPE scaling, ...) is an error unless it holds the value
 * that changes nothing, and any other key is a warning: nothing config.json
 * says is ignored silently. What no model file can compute yet (MoE
 * experts, a sliding window shorter than seq, longrope) is unsupported,
 * not an error. */
#ifndef TPCC_HF_CHECK_H
#define TPCC_HF_CHECK_H

#include <stdbool.h>
#include "grammar/ast.h"
#include "compiler/front/config.h"
#include "compiler/diag/source.h"

/* Check the hf { } block of a model file: known fields, each a tuple of
 * strings (requires: a dict keyed by strings). Errors go to c->diags. */
void tp_hf_check_block(tp_config *c, const tp_node *model_ast);

/* Whether the model file at model_path lists model_type in its
 * hf { model_types }. */
bool tp_hf_model_implements_type(const char *model_path, const char *model_type);

/* An hf { } block in a plan is an error: it describes a model file. */
void tp_hf_check_plan(tp_config *c, const tp_node *plan_ast);

/* Check c's config.json against the model file at model_path (as loaded
 * into src): the architecture (reported at model_ref, the plan's `model`
 * line) and every key; sets c->seq_window. Call after all config blocks
 * and -D are bound: it reads `seq` and `tp`. Returns false when config.json is another architecture,
 * where every later finding would be noise. */
bool tp_hf_check_config(tp_config *c, tp_sources *src, const tp_node *model_ast,
                        const tp_node *plan_ast, const char *model_path, tp_span model_ref);

/* Before the plan's config block is bound: warn (check config-override)
 * at each of its assignments that replaces a value config.json gives. */
void tp_hf_check_overrides(tp_config *c, const tp_node *plan_block);

#endif /* TPCC_HF_CHECK_H */
