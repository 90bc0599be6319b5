/* styles.h: PyTorch's parallel styles as data, one row per class
 * (compiler/plan/styles.def). */
#ifndef TPCC_STYLES_H
#define TPCC_STYLES_H

#include <stdbool.h>
#include "compiler/plan/hf_styles.h"
#include "sched/layout.h"

typedef enum tp_style_kind {
#define STYLE(NAME, class, keywords, modules, params, hf, input, output, local_in, local_out, exports) TP_STYLE_##NAME,
#include "compiler/plan/styles.def"
#undef STYLE
    TP_STYLE_NCLASSES,          /* the rows above: PyTorch's classes */
    TP_STYLE_IDENTITY = TP_STYLE_NCLASSES,  /* Hugging Face styles with no forward hook of their own
                                             * ("replicate"): no PyTorch class */
} tp_style_kind;

/* The modules a style takes. */
typedef enum tp_style_takes {
    TP_STYLE_TAKES_LINEAR_OR_EMBEDDING,
    TP_STYLE_TAKES_NORM,        /* RMSNorm, LayerNorm */
    TP_STYLE_TAKES_ANY,
} tp_style_takes;

/* What a style does to its module's parameters. */
typedef enum tp_style_params {
    TP_STYLE_PARAMS_OUT_FEATURES,   /* Linear: weight and bias Shard(0); Embedding: weight Shard(1) */
    TP_STYLE_PARAMS_IN_FEATURES,    /* Linear: weight Shard(1), bias Replicate; Embedding: weight Shard(0) */
    TP_STYLE_PARAMS_REPLICATED,     /* replicated DTensors */
    TP_STYLE_PARAMS_UNTOUCHED,      /* plain tensors, as the model made them */
} tp_style_params;

/* An argument the PyTorch exporter writes (export/pytorch.c), from a field
 * of tp_style (plan.h). */
typedef enum tp_style_arg {
    TP_ARG_END,
    TP_ARG_INPUT_LAYOUT,            /* input_layouts=<input>: one placement */
    TP_ARG_OUTPUT_LAYOUT,           /* output_layouts=<output> */
    TP_ARG_USE_LOCAL_OUTPUT,        /* use_local_output=<use_local_output> */
    TP_ARG_SEQUENCE_DIM,            /* sequence_dim=<sequence_dim> */
    TP_ARG_INPUTS,                  /* in: (desired_)input_layouts and (desired_)input_kwarg_layouts as given */
    TP_ARG_INPUTS_USE_LOCAL_OUTPUT, /* use_local_output=<in.use_local>: PrepareModuleInput's name for it */
    TP_ARG_INPUTS_USE_LOCAL_INPUT,  /* use_local_input=<in.use_local> */
    TP_ARG_OUTPUTS,                 /* out: output_layouts, desired_output_layouts */
    TP_ARG_OUTPUTS_USE_LOCAL_OUTPUT,/* use_local_output=<out.use_local> */
} tp_style_arg;

typedef struct tp_style_row {
    const char *class_name;         /* "ColwiseParallel" */
    const char *const *keywords;    /* NULL-terminated */
    int nkeywords;
    tp_style_takes takes;
    tp_style_params params;
    int hf;                         /* tp_hf_hooks that are these hooks, or -1 */
    tp_placement input, output;     /* default input_layouts, output_layouts */
    bool local_in, local_out;       /* default use_local_input, use_local_output */
    const tp_style_arg *exports;    /* ends with TP_ARG_END */
} tp_style_row;

/* Indexed by tp_style_kind, below TP_STYLE_NCLASSES. */
extern const tp_style_row tp_style_rows[TP_STYLE_NCLASSES];

/* The class names in table order, for lookups and did-you-mean. */
extern const char *const tp_style_class_names[TP_STYLE_NCLASSES];

/* The kind whose class is `name`, or -1. */
int tp_style_find_class(const char *name);

/* The style whose hooks Hugging Face's `hooks` are (TP_STYLE_IDENTITY for
 * hook-less strings). */
tp_style_kind tp_style_of_hf(tp_hf_hooks hooks);

/* Whether the style makes its module's parameters DTensors (PyTorch's
 * distribute_module with a partition function): their gradients are then
 * summed over the ranks and clipped as one tensor. */
bool tp_style_distributes_params(tp_style_kind kind);

#endif /* TPCC_STYLES_H */
