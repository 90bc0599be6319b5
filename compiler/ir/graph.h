/* graph.h: the global SPMD graph, between checking and lowering.
 *
 * The symbolic forward pass (sema/) checks the plan and records what the
 * model computes as a graph: values, each with its global shape, its
 * placement on every mesh dimension, whether PyTorch holds it as a DTensor
 * and where it came from; and nodes, the ops that compute them in program
 * order, every layout change an explicit redistribution node with the plan
 * entry that asked for it. The passes (passes/) then work on the graph:
 * merging redistributions (-O1), removing dead nodes, and lowering to the
 * per-rank program a schedule describes (sched/program.h). A value here is storage:
 * PyTorch's views and relabels of a tensor (to_local, a layout label,
 * view_heads) share their source's value or alias it. */
#ifndef TP_IR_GRAPH_H
#define TP_IR_GRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include "sched/program.h"
#include "sched/layout.h"

struct tp_module;
struct tp_style;
struct tp_param;

typedef struct tp_gvalue {
    int rank;
    int64_t shape[TP_MAX_RANK];         /* global shape */
    int64_t local[TP_MAX_RANK];         /* what each rank holds (shards are even) */
    int nmesh;                          /* mesh dimensions placed */
    tp_placement pl[TP_MAX_MESH_DIMS];  /* per mesh dimension */
    bool dtensor;                       /* a DTensor in PyTorch, else a plain tensor */
    tp_dtype dtype;                     /* f32 (the schedule's dtype later) or i32 ids */
    bool f32_only;                      /* the loss and its per-token pieces stay float32 */
    bool input, output;                 /* a model input; the logits or the loss */
    int alias_of;                       /* >= 0: a view of that value (same storage) */
    int redirect;                       /* >= 0: replaced by that value (merge pass) */
    char *name;                         /* "model.layers.0.self_attn.q_proj.out" */
} tp_gvalue;

typedef enum tp_gnode_kind {
    TP_GNODE_OP,          /* a model op: op.kind is a compute op */
    TP_GNODE_REDIST,      /* a layout change: op.kind is a collective, slice or scale */
} tp_gnode_kind;

typedef struct tp_gnode {
    tp_gnode_kind kind;
    /* kind and attributes; in[] and out are value indices, weight and
     * bias indices in the graph's parameter table; the provenance strings
     * are filled in by lowering from the two fields below */
    tp_ir_op op;
    const struct tp_module *module;   /* the module that ran it (NULL: none) */
    const struct tp_style *entry;     /* the plan entry that caused it (NULL: the model) */
    /* TP_GNODE_REDIST: the layout change, and the forward pass's ids of
     * the tensor it changes and of the result (the merge pass matches
     * redistributions of the same tensor by them) */
    tp_placement from, to;
    int src_id, result_id;
    bool removed;         /* merged into an earlier node (-O1) */
} tp_gnode;

typedef struct tp_graph {
    tp_gvalue *values; int nvalues, capvalues;
    tp_gnode *nodes; int nnodes, capnodes;
    tp_ir_param *params; int nparams, capparams;   /* in order of first use */
    int64_t world;             /* devices on the mesh dimension the plan shards over */
    int loss, logits;          /* value indices, -1 when absent */
    int label_shift;           /* 1: the loss shifts its labels (a model's own cross_entropy, as
                                  Hugging Face's); 0: they are the next tokens already (--loss
                                  cross_entropy, torchtitan's trainer) */
    int *param_grad;           /* per parameter: the value of its gradient (autodiff), or NULL */
    /* per parameter: the first forward node whose contribution to its
     * gradient is each rank's share only (autodiff), -1 when none is; NULL
     * without --train. The unreduced-grad check reads it. */
    int *param_partial_at;
    tp_placement logits_pl;    /* how the logits are laid out across ranks */
    int64_t logits_vocab;      /* a returned logits' real columns (padding dropped); 0: unknown */
    /* the transformer layers, for the report's per-layer bound: the largest
     * repeat() list and the tensor flowing between its modules */
    int nlayers;
    int layer_input_rank;
    int64_t layer_input_shape[TP_MAX_RANK];
    int64_t layer_input_elems;
} tp_graph;

void tp_graph_init(tp_graph *g, int64_t world);
void tp_graph_free(tp_graph *g);
/* Takes v->name. Returns the new value's index. */
int tp_graph_add_value(tp_graph *g, const tp_gvalue *v);
int tp_graph_add_param(tp_graph *g, const tp_ir_param *p);
/* Returns the new node (valid until the next tp_graph_add_node). */
tp_gnode *tp_graph_add_node(tp_graph *g, tp_gnode_kind kind, tp_op_kind op);
/* The value v stands for after merging: follows redirects. */
int tp_graph_resolve(const tp_graph *g, int v);
/* The value whose storage v uses: follows redirects and aliases. */
int tp_graph_storage(const tp_graph *g, int v);
int64_t tp_gvalue_local_elems(const tp_gvalue *v);
/* The transformer layer module m belongs to: its ancestor whose parent is
 * the largest repeat() list (model.layers.3), or NULL outside the layers. */
const struct tp_module *tp_graph_layer_of(const tp_graph *g, const struct tp_module *m);

#endif /* TP_IR_GRAPH_H */
