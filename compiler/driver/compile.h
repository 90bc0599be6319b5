/* compile.h: one plan through the compiler: parse the plan and its model,
 * configure, instantiate, resolve the plan, propagate and check (the
 * global graph), then the passes (the per-rank program). */
#ifndef TPCC_COMPILE_H
#define TPCC_COMPILE_H

#include "compiler/passes/passes.h"
#include "compiler/sema/check.h"
#include "compiler/front/config.h"
#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/plan/plan.h"
#include "compiler/diag/source.h"

typedef struct tp_compile_opts {
    const char *const *defines; int ndefines;   /* "name=value": a settings file's defines, then -D's */
    const char *hf_config;                      /* --hf-config FILE or NULL */
    bool optimize;                              /* -O1 (merge and drop redistributions) */
    tp_dtype dtype;                             /* element type of the program (--dtype) */
    bool program;                               /* run the passes: the per-rank program (ir) */
    bool train;                                 /* --train: the backward pass and the weights' gradients */
    tp_outer_loss loss;                         /* --loss: the loss on logits the model returns */
    char *const *allow_outside;                 /* allow-outside, --allow-outside, resolved (input_roots.h) */
    int nallow_outside;
    bool recompute_given;                       /* --recompute: overrides the plan's train { recompute } */
    tp_recompute recompute;
    bool segments;                              /* --segments: attention within documents (passes.h) */
    const char *const *define_at;               /* per define: "FILE:LINE:COL" of a settings file's, NULL for -D's */
    char *const *model_path;                    /* the settings' model-path, absolute (model_path.h) */
    int nmodel_path;
} tp_compile_opts;

typedef struct tp_unit {
    tp_sources src;
    tp_diags diags;
    tp_config config;
    tp_node *plan_ast, *model_ast;
    int plan_file, model_file;
    tp_model model;
    tp_plan plan;
    tp_analysis analysis;
    tp_ir ir;            /* the per-rank program the passes made of analysis.graph (opts.program) */
    bool built;          /* model and plan were built (analysis and ir are valid) */
    bool io_error;       /* a file could not be read or a flag was bad: exit 2 */
} tp_unit;

/* Run the front end on `plan_path`. Findings are in u->diags. */
void tp_compile(tp_unit *u, const char *plan_path, const tp_compile_opts *opts);
void tp_unit_free(tp_unit *u);

#endif /* TPCC_COMPILE_H */
