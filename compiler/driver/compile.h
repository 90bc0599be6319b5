/* compile.h: one plan through the front end: parse the plan and its model,
 * configure, instantiate, resolve the plan, propagate and check. */
#ifndef TPCC_COMPILE_H
#define TPCC_COMPILE_H

#include "compiler/sema/check.h"
#include "compiler/front/config.h"
#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/plan/plan.h"
#include "compiler/front/source.h"

typedef struct tp_compile_opts {
    const char *const *defines; int ndefines;   /* "name=value" from -D */
    const char *hf_config;                      /* --hf-config FILE or NULL */
    bool optimize;                              /* -O1 (merge and drop redistributions) */
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
    bool built;          /* model and plan were built (analysis is valid) */
    bool io_error;       /* a file could not be read or a flag was bad: exit 2 */
} tp_unit;

/* Run the front end on `plan_path`. Findings are in u->diags. */
void tp_compile(tp_unit *u, const char *plan_path, const tp_compile_opts *opts);
void tp_unit_free(tp_unit *u);

#endif /* TPCC_COMPILE_H */
