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
#include "compiler/front/config.h"
#include "compiler/ir/graph.h"
#include "compiler/diag/diag.h"
#include "compiler/front/model.h"
#include "compiler/plan/plan.h"

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

/* A to_local(x, grad_placements=...) in a forward body: what its backward
 * labels the local gradient (PyTorch's _ToTorchTensor), for the
 * grad-placements check (grad_placements.c). */
typedef struct tp_to_local {
    int view;                    /* the plain local tensor's graph value (a view of x's) */
    int rank;
    tp_placement forward;        /* x's placement */
    tp_placement declared;       /* grad_placements, else forward with Partial made Replicate */
    bool given;                  /* grad_placements= was written */
    tp_span span;                /* the to_local call */
    const char *module;          /* the module whose forward calls it ("" at the root) */
} tp_to_local;

typedef struct tp_analysis {
    tp_redist_record *comms; int ncomms, capcomms;
    tp_boundary *rows; int nrows, caprows;
    tp_to_local *to_locals; int nto_locals, capto_locals;
    tp_graph graph;              /* what the model computes (meaningful without errors) */
} tp_analysis;

/* The loss a training loop computes on the logits a model returns
 * (tpcc --loss): none (the model computes its own, or none), PyTorch's
 * tests' output.sum(), or torchtitan's trainer's cross-entropy. */
typedef enum tp_outer_loss { TP_LOSS_NONE, TP_LOSS_SUM, TP_LOSS_CROSS_ENTROPY } tp_outer_loss;

/* Propagate layouts through the model's forward pass under the plan,
 * reporting every finding to c->diags, and record the global graph; with
 * an outer loss, the loss on the logits the model returns. */
void tp_check(tp_model *m, tp_plan *p, tp_config *c, tp_outer_loss loss, tp_analysis *out);
void tp_analysis_free(tp_analysis *a);

/* The --explain table. */
void tp_explain_print(const tp_analysis *a, const tp_plan *p, FILE *out);

#endif /* TPCC_CHECK_H */
