/* plan.h: a plan's mesh, its parallel styles with PyTorch's defaults filled
 * in, and which module each style applies to.
 *
 * `parallelize "model.layers.*" { "self_attn.q_proj": ColwiseParallel() }`
 * is parallelize_module(model.layers.N, mesh, {...}) for every N: the
 * entry's absolute pattern is the path and the key joined by '.', matched
 * one dot-separated component at a time with fnmatch, as PyTorch does. */
#ifndef TPCC_PLAN_H
#define TPCC_PLAN_H

#include <stdbool.h>
#include "grammar/ast.h"
#include "compiler/front/config.h"
#include "sched/layout.h"
#include "compiler/front/model.h"
#include "compiler/plan/hf_styles.h"
#include "compiler/plan/styles.h"
#include "compiler/plan/train_block.h"


#define TP_MAX_IO 8

/* One element of a layouts tuple: a placement, or None (leave it alone). */
typedef struct tp_io_layout {
    bool none;
    tp_placement pl;
    const tp_node *node;        /* where it is written (NULL: a default) */
} tp_io_layout;

typedef struct tp_io_spec {
    int n;                      /* tuple length; -1 when the argument was not given */
    tp_io_layout layout[TP_MAX_IO];
    tp_io_layout desired[TP_MAX_IO];
    /* keyword inputs (PrepareModuleInput's input_kwarg_layouts) */
    int nkw;
    char *kw[TP_MAX_IO];
    tp_io_layout kw_layout[TP_MAX_IO];
    tp_io_layout kw_desired[TP_MAX_IO];
    bool use_local;
} tp_io_spec;

typedef struct tp_style {
    tp_style_kind kind;
    const char *name;           /* "ColwiseParallel" */
    const tp_node *entry;       /* the N_PAIR in the plan dict */
    const tp_node *call;        /* the constructor call, or the N_STR of a Hugging Face style */
    const tp_node *dict;        /* the dict it sits in */
    const tp_node *item;        /* the parallelize item */
    char *pattern;              /* absolute pattern, e.g. "model.layers.*.self_attn.q_proj" */
    char *base;                 /* the parallelize path */
    /* Colwise/Rowwise: input_layouts (one), output_layouts (one);
     * PyTorch's defaults where not given. */
    tp_io_layout input, output;
    bool use_local_output;
    /* ColwiseParallel(tpcc_replicate_heads=H), not PyTorch's: the output
     * holds H heads, each replicated over tp / H ranks when tp > H; 0 when
     * not given */
    int64_t replicate_heads;
    /* a Hugging Face string style: its row (plan/hf_styles.c); NULL for
     * PyTorch's constructors */
    const tp_hf_style *hf;
    /* "packed_colwise" (two equal segments: transformers' strided halves)
     * or ColwiseParallel(tpcc_packed=True) (any segments): ColwiseParallel's
     * hooks, each segment of the Linear's packed= output sharded separately */
    bool packed;
    int sequence_dim;           /* SequenceParallel */
    tp_io_spec in, out;         /* PrepareModule*; "all_reduce" and "gather" (out) */
    int nmatched;
} tp_style;

typedef struct tp_plan {
    const tp_node *file;        /* the plan's N_FILE */
    int file_id;
    int mesh_ndim;
    char *mesh_name[TP_MAX_MESH_DIMS];
    int64_t mesh_size[TP_MAX_MESH_DIMS];
    const tp_node *mesh_arg[TP_MAX_MESH_DIMS];  /* `dp = 2` in mesh(...); NULL when no mesh is declared */
    tp_span mesh_span;          /* the mesh(...) statement, for notes pointing at it */
    int tp_dim;                 /* the mesh dimension the styles act on */
    int dp_dim;                 /* the first dimension of size > 1 no block is on; -1: none */
    int64_t data_parallel;      /* replicas: the product of those dimensions' sizes (1: none) */
    bool loss_parallel;
    tp_span loss_parallel_span;
    tp_train_spec train;        /* train { }: the training script around the model */
    tp_style **styles; int nstyles, capstyles;
    /* an entry tpcc cannot read yet was left out (unsupported): the
     * layouts without it are not the plan's, so they are not checked */
    bool incomplete;
    /* plan values with their Python names resolved and conditions
     * evaluated (plan/pynames.h); styles point into them */
    tp_node **values; int nvalues, capvalues;
} tp_plan;

/* Read the mesh and styles of a plan file and resolve them against the
 * model: sets module->style, reports unmatched entries, modules matched
 * twice, styles on unsupported module types and uncovered parameters. */
bool tp_plan_build(tp_plan *p, const tp_node *file, int file_id, tp_model *m, tp_config *c);
void tp_plan_free(tp_plan *p);

/* The unsupported finding for a data-parallel dimension (p->dp_dim >= 0)
 * where the schedule is not a training one. */
void tp_plan_refuse_data_parallel(const tp_plan *p, tp_diags *d);

/* The size of the dimension the styles act on: the world size of one
 * replica. Every other dimension holds one device or is data parallel
 * (dp_dim, data_parallel). */
int64_t tp_plan_tp_size(const tp_plan *p);

/* Whether transformers' "packed_colwise" shards m right: its
 * _StridedShard(split_factor=2) halves are m's packed= segments (two equal
 * ones, no bias). */
bool tp_packed_halves(const tp_module *m);

/* The style that shards each packed= segment of m separately:
 * "\"packed_colwise\"" where tp_packed_halves(m), else
 * "ColwiseParallel(tpcc_packed=True)". */
const char *tp_packed_style_for(const tp_module *m);

/* The key of a plan entry, where its findings point. */
tp_span tp_entry_span(const tp_style *s);

/* Component-wise fnmatch of a dotted pattern against a dotted name. */
bool tp_pattern_match(const char *pattern, const char *fqn);

#endif /* TPCC_PLAN_H */
