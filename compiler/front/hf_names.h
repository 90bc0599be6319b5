/* hf_names.h: names transformers defines, for telling what tpcc does not
 * compute yet (unsupported) from what transformers itself refuses (an
 * error). */
#ifndef TPCC_HF_NAMES_H
#define TPCC_HF_NAMES_H

#include <stdbool.h>

/* A RoPE type transformers computes (ROPE_INIT_FUNCTIONS, with "default",
 * and "su", Phi3Config's old name of longrope): a config.json naming
 * another one fails in transformers too. */
bool tp_hf_rope_type_defined(const char *type);

/* An activation transformers computes (ACT2FN); another name is a
 * KeyError there. */
bool tp_hf_activation_defined(const char *name);

/* A mixture-of-experts family: tpcc has no expert layers yet. */
bool tp_hf_moe_model_type(const char *model_type);

#endif /* TPCC_HF_NAMES_H */
