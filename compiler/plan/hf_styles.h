/* hf_styles.h: Hugging Face's tp_plan strings ("colwise", "rowwise", ...)
 * as transformers defines them, each with the PyTorch-style hooks tpcc
 * gives it or the reason it is refused.
 *
 * transformers 5.23 registers its styles in
 * transformers/distributed/tensor_parallel.py (ALL_PARALLEL_STYLES); the
 * names it no longer registers (local_colwise, local, gather, ...) are
 * those of transformers 4.56's integrations/tensor_parallel.py. */
#ifndef TPCC_HF_STYLES_H
#define TPCC_HF_STYLES_H

#include <stdbool.h>
#include "sched/layout.h"

/* The module kinds a string style takes. */
typedef enum tp_hf_modules {
    TP_HF_LINEAR,        /* needs out_features / in_features: nn.Linear */
    TP_HF_EMBEDDING,     /* EmbeddingParallel: nn.Embedding */
    TP_HF_PACKED,        /* a Linear declared with packed=(...) */
    TP_HF_NORM,          /* SequenceParallel: LayerNorm, RMSNorm */
    TP_HF_ANY,           /* installs no shape-dependent hooks */
    TP_HF_NO_PARAMS,     /* any module without parameters of its own */
} tp_hf_modules;

/* What the style does in the forward pass, as tpcc checks it. */
typedef enum tp_hf_hooks {
    TP_HF_COLWISE,       /* ColwiseParallel's hooks: weight rows sharded */
    TP_HF_ROWWISE,       /* RowwiseParallel's hooks: weight columns sharded */
    TP_HF_SEQUENCE,      /* SequenceParallel's hooks */
    TP_HF_IDENTITY,      /* no forward hook, parameters replicated */
    TP_HF_REFUSED,       /* an error: `refusal` says why */
} tp_hf_hooks;

typedef struct tp_hf_style {
    const char *name;               /* "colwise" */
    const char *version;            /* the transformers that defines it: "5.23" or "4.56" */
    const char *transformers;       /* its class and arguments there */
    const char *does;               /* what it does in the forward pass, for --explain and errors */
    tp_hf_hooks hooks;
    tp_hf_modules modules;
    tp_placement input, output;     /* Colwise/Rowwise: input_layouts, output_layouts */
    bool use_local_output;
    bool packed;                    /* each packed= segment sharded separately */
    bool no_hooks;                  /* 4.56's use_dtensor=False: plain local shards, no hooks at all */
    bool local_input;               /* a DTensor first input becomes its local tensor */
    bool first_input_only;          /* the pre-hook returns the first positional input alone, always
                                     * (local_input styles otherwise do so for a DTensor input) */
    bool reduce_output;             /* a plain output is all-reduced (labelled Partial, to Replicate) */
    bool bias_after_reduce;         /* a Linear's bias is added once, after the output's all-reduce */
    const char *needs_config;       /* a config value the style needs (mla_kv_a_proj's qk_rope_head_dim) */
    const char *refusal;            /* TP_HF_REFUSED: why, and what to do */
} tp_hf_style;

/* The style named `name`, or NULL. */
const tp_hf_style *tp_hf_style_find(const char *name);

/* Every name, for did-you-mean; returns the count. */
int tp_hf_style_names(const char ***names);

#endif /* TPCC_HF_STYLES_H */
