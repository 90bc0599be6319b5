/* op_table.c: the ops a forward body may call (op_table.h), one row each.
 * An op is added here: its name, how it is called, the function applying
 * its layout rule and the facts the rule reads. */
#include <string.h>
#include "compiler/sema/op_table.h"

static const char *const rope_kw[] = {"theta", "scaling", "factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings", "partial_rotary_factor", "beta_fast",
                                      "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate",
                                      "max_position_embeddings", NULL};
/* scale= as SDPA's (default head_dim ** -0.5); softcap= as FlashAttention's
 * (0 or absent: none); sliding_window= as transformers' (checked against seq) */
static const char *const attention_kw[] = {"causal", "scale", "softcap", "sliding_window", NULL};
static const char *const gelu_kw[] = {"approximate", NULL};
static const char *const split_kw[] = {"split_size_or_sections", "dim", NULL};   /* torch.split */
static const char *const chunk_kw[] = {"chunks", "dim", NULL};                   /* torch.chunk */

static const tp_op_row rows[] = {
    /* name, call, apply, tensors, linear, dtensor_ok, whole {dims, check, why}, lowers_to, keywords */
    {"silu", TP_CALL_FUNCTION, tp_op_pointwise, 1, false, true, {{0}, NULL, NULL}, TP_OP_SILU, NULL},
    {"gelu", TP_CALL_FUNCTION, tp_op_gelu, 1, false, true, {{0}, NULL, NULL}, TP_OP_GELU, gelu_kw},
    {"relu", TP_CALL_FUNCTION, tp_op_pointwise, 1, false, true, {{0}, NULL, NULL}, TP_OP_RELU, NULL},
    {"dropout", TP_CALL_FUNCTION, tp_op_pointwise, 1, true, true, {{0}, NULL, NULL}, TP_OP_COUNT, NULL},   /* inference: identity */
    {"view_heads", TP_CALL_FUNCTION, tp_op_view_heads, 1, true, true, {{0}, NULL, NULL}, TP_OP_COUNT, NULL},
    {"merge_heads", TP_CALL_FUNCTION, tp_op_merge_heads, 1, true, true,
     {{-1}, "layout-mismatch", "heads can only be merged with whole head_dim"}, TP_OP_COUNT, NULL},
    {"rope", TP_CALL_FUNCTION, tp_op_rope, 1, true, false,
     {{-3, -1}, "layout-mismatch",
      "RoPE needs per-rank positions for a sequence shard (its cos/sin cover the global positions) and whole head_dim pairs"},
     TP_OP_ROPE, rope_kw},
    {"attention", TP_CALL_FUNCTION, tp_op_attention, 3, false, true,
     {{-3, -1}, "layout-mismatch", "attention over a sequence shard only sees its own keys"}, TP_OP_ATTENTION,
     attention_kw},
    {"positions", TP_CALL_FUNCTION, tp_op_positions, 1, false, false,
     {{-1}, "layout-mismatch", "positions of a sequence shard would restart at 0 on every rank"}, TP_OP_POSITIONS,
     NULL},
    {"arange", TP_CALL_FUNCTION, tp_op_arange, 0, false, false, {{0}, NULL, NULL}, TP_OP_POSITIONS, NULL},
    /* whole logits: cross_entropy.c's own rule */
    {"cross_entropy", TP_CALL_FUNCTION, tp_op_cross_entropy, 2, false, false, {{0}, NULL, NULL}, TP_OP_CROSS_ENTROPY, NULL},
    /* activation(x, name): the op of HF's ACT2FN[name] (op_rules.c) */
    {"activation", TP_CALL_FUNCTION, tp_op_activation, 1, false, true, {{0}, NULL, NULL}, TP_OP_COUNT, NULL},
    /* softcap(x, cap): cap * tanh(x / cap); cap 0 is none (x itself) */
    {"softcap", TP_CALL_FUNCTION, tp_op_softcap, 1, false, true, {{0}, NULL, NULL}, TP_OP_SOFTCAP, NULL},
    /* pieces of the local tensor, narrowed */
    {"split", TP_CALL_METHOD, tp_split_apply, 1, true, true, {{0}, NULL, NULL}, TP_OP_NARROW, split_kw},
    {"chunk", TP_CALL_METHOD, tp_split_apply, 1, true, true, {{0}, NULL, NULL}, TP_OP_NARROW, chunk_kw},
    /* the local tensor, a view of the DTensor's */
    {"to_local", TP_CALL_METHOD, tp_to_local_apply, 1, true, true, {{0}, NULL, NULL}, TP_OP_COUNT, NULL},
};
#define NROWS ((int)(sizeof rows / sizeof *rows))

const tp_op_row *tp_op_find(const char *name)
{
    for (int i = 0; i < NROWS; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    return NULL;
}
