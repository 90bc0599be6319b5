/* check.h: layout propagation and the checks.
 *
 * The forward pass is executed symbolically, the way PyTorch runs it:
 * module calls fire the styles' input and output hooks, ops apply their
 * layout rules, and every value carries its true placement and whether
 * PyTorch holds it as a DTensor or a plain tensor. Each layout change is
 * recorded as a collective with the plan entry that caused it. */
#ifndef TPCC_CHECK_H
#define TPCC_CHECK_H

#include <stdio.h>
#include "config.h"
#include "ir.h"
#include "diag.h"
#include "model.h"
#include "plan.h"

typedef struct tp_redist_record {
    tp_redist_kind kind;
    int dim;                     /* gathered / scattered tensor dimension */
    int64_t elems;               /* elements of the full (global) tensor */
    const tp_style *cause;       /* plan entry that asked for it (NULL: implicit) */
    const tp_module *module;     /* module whose hook or op ran it */
    tp_span span;                /* model location */
    int value;                   /* id of the value redistributed */
    tp_placement from, to;
    int rank;                    /* tensor rank, for printing placements */
    bool implicit;               /* DTensor sharding propagation inserted it */
} tp_redist_record;

typedef struct tp_boundary {
    char *fqn, *type;
    const tp_style *style;
    char *inputs, *outputs;      /* rendered "Shard(1) DTensor [1, 1024, 4096]" */
} tp_boundary;

typedef struct tp_analysis {
    tp_redist_record *comms; int ncomms, capcomms;
    tp_boundary *rows; int nrows, caprows;
    tp_ir ir;                    /* the lowered program (meaningful without errors) */
} tp_analysis;

/* Propagate layouts through the model's forward pass under the plan,
 * reporting every finding to c->diags, and record the lowered program.
 * optimize: reuse a redistribution of the same tensor to the same layout
 * and drop redistributions that are immediately undone (-O1). */
void tp_check(tp_model *m, tp_plan *p, tp_config *c, bool optimize, tp_analysis *out);
void tp_analysis_free(tp_analysis *a);

/* The --explain table. */
void tp_explain_print(const tp_analysis *a, const tp_plan *p, FILE *out);

#endif /* TPCC_CHECK_H */
