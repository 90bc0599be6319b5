/* op_table.h: the ops a forward body may call, one row each (op_table.c),
 * as PyTorch registers an op's sharding strategy: the op's name in the
 * model language, how it is called, the function that applies its layout
 * rule, and the facts that rule reads. The walk (interp.c) looks the row
 * up by name and calls its apply function. Not a public interface. */
#ifndef TPCC_OP_TABLE_H
#define TPCC_OP_TABLE_H

#include "compiler/sema/check_impl.h"

typedef enum tp_op_call_kind {
    /* op(x, y, k=v): every argument is evaluated before the rule runs */
    TP_CALL_FUNCTION,
    /* a tensor's method, written op(x, ...) (PyTorch's x.split(...)): x is
     * evaluated, and the rule reads the rest from the call itself (sizes
     * from the configuration, placements) */
    TP_CALL_METHOD,
} tp_op_call_kind;

/* One call of an op: the call, and its arguments evaluated (a method's:
 * its tensor alone, args[0], without keywords). */
typedef struct tp_op_args {
    const tp_node *call;           /* the N_CALL */
    iv *args;
    int nargs;
    char **kwnames;
    iv *kwargs;
    int nkw;
} tp_op_args;

typedef struct tp_op_row tp_op_row;

/* The layout rule of an op: its result, or IV_NONE after an error that
 * stops the walk. */
typedef iv tp_op_apply_fn(interp *I, const tp_op_row *op, const tp_op_args *a);

struct tp_op_row {
    const char *name;              /* as the model language calls it */
    tp_op_call_kind call;
    tp_op_apply_fn *apply;
    int ntensors;                  /* tensor inputs, first */
    bool linear;                   /* f(sum of parts) = sum of f(parts): Partial passes through */
    bool dtensor_ok;               /* false: the op mixes its input with plain tensors (cos/sin, arange) */
    tp_op_whole whole;             /* dims that must not be sharded */
    tp_op_kind lowers_to;          /* the schedule op; TP_OP_COUNT: a view of its input */
    const char *const *keywords;   /* keyword arguments it takes; NULL: none */
};

/* The row of `name`, or NULL when no op is called so. */
const tp_op_row *tp_op_find(const char *name);

/* ---- the rows' apply functions ---- */

/* op_rules.c: the primitives */
tp_op_apply_fn tp_op_pointwise;      /* silu, relu, dropout: the row's op on each element */
tp_op_apply_fn tp_op_gelu;
tp_op_apply_fn tp_op_activation;     /* Hugging Face's activation by name */
tp_op_apply_fn tp_op_softcap;
tp_op_apply_fn tp_op_positions;
tp_op_apply_fn tp_op_arange;
tp_op_apply_fn tp_op_view_heads;
tp_op_apply_fn tp_op_merge_heads;
tp_op_apply_fn tp_op_rope;
tp_op_apply_fn tp_op_attention;
tp_op_apply_fn tp_op_cross_entropy;
/* split.c: split() and chunk(), a tuple of pieces */
tp_op_apply_fn tp_split_apply;
/* to_local.c: to_local(x, grad_placements=(...)) */
tp_op_apply_fn tp_to_local_apply;

#endif /* TPCC_OP_TABLE_H */
