/* check_impl.h: internals shared by the files of compiler/sema/ that walk,
 * propagate and record, in three layers (docs/architecture.md): the walk
 * (interp.c) on top, the handlers it calls for each step (the styles'
 * hooks, the op rules, the leaf modules, the outputs, the parameters), and
 * the services at the bottom that they share (values, findings, recording,
 * redistribution, ...). Not a public interface. */
#ifndef TPCC_CHECK_IMPL_H
#define TPCC_CHECK_IMPL_H

#include "compiler/sema/check.h"

/* A tensor as the symbolic forward pass sees it. */
typedef struct tp_val {
    int id;
    int rank;
    int64_t shape[TP_MAX_RANK];   /* global shape, as PyTorch believes it */
    const char *dimname[TP_MAX_RANK];
    tp_placement pl;              /* the truth: what each rank holds */
    bool dtensor;                 /* DTensor, or plain torch.Tensor */
    bool poisoned;                /* derived from a reported error: stay quiet */
    bool is_index;                /* token ids / labels / positions */
    bool is_position;             /* positions (positions(), arange()): not token ids */
    tp_span span;                 /* model expression that produced it */
    tp_module *producer;          /* module whose output it is (NULL: an op) */
    const tp_style *shard_cause;  /* plan entry whose sharding it inherits */
    const tp_style *partial_cause;/* plan entry that made it a partial sum */
    /* set when the value is the result of a redistribution */
    int redist_src;               /* id of the source value, or -1 */
    tp_placement redist_from;
    const tp_style *redist_cause;
    /* gather-then-slice tracking: the all-gather this value flows from
     * through ops independent along the gathered dimension */
    int gather_comm;              /* index in tp_analysis.comms, or -1 */
    int gather_dim;
    int gv;                       /* its value in the graph, or -1 before an op uses it */
    int64_t logical_last;         /* real entries of the last dim (vocab padding), 0: all */
    /* the ColwiseParallel(tpcc_replicate_heads=H) whose output features
     * these are, until view_heads() splits them into heads and checks H */
    const tp_style *replicated_heads;
    /* index in diags->items of this value's kv-heads divisibility error,
     * whose help attention() completes once it sees the query heads; -1 */
    int heads_diag;
    /* packed: the output of a fused projection under packed_colwise, its
     * sharded dim holding each rank's share of every segment one after
     * another; only split()/chunk() into these segments may read it */
    int nsegments;                /* 0: a contiguous shard (or none) */
    int64_t segments[TP_MAX_SEGMENTS];
} tp_val;

/* Interpreter values: tensors, modules, integers (booleans too), floats,
 * None, and the tuple of tensors split() and chunk() return. */
typedef enum { IV_NONE, IV_TENSOR, IV_MODULE, IV_INT, IV_FLOAT, IV_STR, IV_TUPLE } iv_kind;
typedef struct iv {
    iv_kind kind;
    tp_val *t;
    tp_module *mod;
    int64_t i;             /* IV_INT; IV_TUPLE: the number of items */
    double f;
    const char *s;         /* IV_STR, borrowed from the configuration */
    tp_val *items[TP_MAX_SEGMENTS];   /* IV_TUPLE */
} iv;

/* None (also what a step that failed returns), and a tensor. */
extern const iv tp_none_iv;   /* values.c */
static inline iv tp_tensor_iv(tp_val *v) { return (iv){IV_TENSOR, v, NULL, 0, 0, NULL, {NULL}}; }

typedef struct seen_diag {
    const char *check;
    int file, offset;
    int index;            /* in diags->items */
    int repeats;
    char *first_fqn, *last_fqn;
} seen_diag;

/* A relabel that grew a dimension tp-fold: its diagnostic says what
 * happens downstream once the walk meets the first op that sees the grown
 * length next to the true one (grown.c). */
typedef struct grown_dim {
    int diag;                 /* the relabel diagnostic, index in diags->items */
    int64_t true_len, grown_len;
    bool ids;                 /* the token ids grew: the positions derived from them grew with them */
    bool met;
} grown_dim;

typedef struct interp {
    tp_model *m;
    tp_plan *p;
    tp_config *c;
    tp_diags *d;
    tp_analysis *a;
    tp_outer_loss loss;           /* the loss outside the model (tpcc --loss) */
    int64_t tp;
    int next_id;
    tp_val **vals; int nvals, capvals;
    seen_diag *seen; int nseen, capseen;
    grown_dim *grown; int ngrown, capgrown;
    tp_module *cur;               /* module being executed, or NULL */
    char **strings; int nstrings;  /* interned dimension names */
    /* the recorded collectives by the tensor they move, so a repeated
     * gather is looked up among one tensor's moves, not all of them:
     * value id -> its latest collective (index in tp_analysis.comms, or
     * -1), and each collective -> the same tensor's one before it, or -1 */
    int *last_comm_of; int caplast;
    int *prev_comm_of; int capprev;
    int depth;
    bool stop;                    /* stop the walk: continuing would be nonsense */
} interp;

static inline const char *tp_cur_fqn(const interp *I) { return I->cur ? I->cur->fqn : ""; }

/* Dimensions an op needs whole on every rank, counted from the end (-1 =
 * the last; 0 ends the list), and the check and reason a shard of one is
 * reported with. */
typedef struct tp_op_whole {
    int dims[3];
    const char *check;
    const char *why;
} tp_op_whole;

/* ==== services ==============================================================
 * What the handlers and the walk share, each file one job. A service calls
 * only the services listed before it. */

/* values (values.c) */
const char *tp_intern(interp *I, const char *s);   /* lives until the walk ends */
tp_val *tp_val_new(interp *I, int rank, const int64_t *shape, const char *const *names);
tp_val *tp_val_copy(interp *I, const tp_val *v);
char *tp_val_describe(const tp_val *v);     /* "Shard(1) DTensor [1, 2048, 4096]" */
const char *tp_pl_str(tp_placement p, int rank, char *buf);   /* normalised, buf >= 24 */
int64_t tp_local_size(const interp *I, const tp_val *v, int d);
int64_t tp_val_elems(const tp_val *v);                         /* of the global tensor */
int64_t tp_local_rows(const interp *I, const tp_val *x);       /* [..., k] as a matrix on one rank */

/* diagnostics with per-entry dedupe (findings.c): the same check at the
 * same plan entry for another layer adds to a count instead of a new
 * diagnostic. Returns NULL when the diagnostic was folded or suppressed
 * (poisoned operand). */
tp_diag *tp_finding(interp *I, tp_diag_level lvl, tp_span span, const char *check,
                    const tp_val *a, const tp_val *b, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
void tp_findings_finish(interp *I);

/* dimensions a relabel grew tp-fold (grown.c): g, the relabel's
 * diagnostic, says where the grown length first meets the true one */
void tp_grown_track(interp *I, const tp_diag *g, const tp_val *x, int dim);
void tp_grown_meet(interp *I, int64_t len_a, int64_t len_b, tp_span span, const char *op, const char *with);
void tp_grown_meet_rope(interp *I, const tp_val *x, tp_span span);
void tp_grown_finish(interp *I);

/* parameter placements (param_placement.c) */
tp_placement tp_param_placement(const tp_param *prm);
/* The placement a style's partition (its styles.def params column) gives
 * a weight (bias false) or bias of m. */
tp_placement tp_style_partition(tp_style_params params, const tp_module *m, bool bias);
/* ranks that hold each slice of prm: tp / H under tpcc_replicate_heads=H
 * at tp > H, else 1 */
int64_t tp_head_replicas(const interp *I, const tp_param *prm);

/* fix-its on the plan (fixit_plan.c) */
void tp_fix_set_kwarg(tp_diag *g, const tp_node *call, const char *kw, const char *text);
void tp_fix_add_root_entry(tp_diag *g, const tp_plan *p, const char *fqn, const char *style_text);
void tp_fix_rename_style(tp_diag *g, const tp_style *s, const char *new_name);
void tp_fix_append_item(tp_diag *g, const tp_plan *p, const char *text);   /* a new top-level line */

/* recording the graph and the --explain rows (record.c) */
int tp_record_value(interp *I, tp_val *v, const char *what);        /* v's graph value, made on first use */
void tp_record_view(interp *I, tp_val *view, const tp_val *of);     /* view aliases of's storage */
/* an op node; the result is valid until the next node is recorded */
tp_gnode *tp_record_op(interp *I, tp_op_kind kind, tp_val *out, const char *what, tp_val *a, tp_val *b, tp_val *c);
/* a layout change of v into r, lowered to `kind` */
tp_gnode *tp_record_redist(interp *I, tp_op_kind kind, tp_val *v, tp_val *r, const char *what);
int tp_record_param(interp *I, tp_param *p);                        /* index in the graph's weight table */
int tp_record_boundary(interp *I, tp_module *mod, char *inputs);   /* takes inputs */

/* layout changes (redistribute.c) */
tp_val *tp_redistribute(interp *I, tp_val *v, tp_placement to, const tp_style *cause, tp_span span,
                        bool implicit);
void tp_check_shard_divisible(interp *I, tp_val *v, const tp_style *cause, tp_span span);

/* transformers' rowwise strings add a Linear's bias after the reduction
 * (bias.c): the Linear's recording leaves it out and the output hook adds
 * it. */
bool tp_bias_after_reduce(const tp_module *mod);
void tp_record_bias_add(interp *I, tp_module *mod, tp_val *v);

/* A packed value reaching anything but split()/chunk() (`what`): an error
 * (packed.c). */
void tp_packed_misuse(interp *I, tp_val *x, const char *what, tp_span span);

/* what every op rule does to a layout (layout.c) */
int tp_shard_dim(const tp_val *v);                   /* -1: not sharded */
tp_val *tp_result_like(interp *I, const tp_val *x, int rank, const int64_t *shape, const char *const *names,
                       tp_span span);                /* with x's layout facts */
tp_span tp_cause_span(const tp_val *x, tp_span span);   /* the plan entry behind x's layout, else span */
tp_val *tp_resolve_partial(interp *I, tp_val *x, const char *op, tp_span span);
bool tp_check_whole(interp *I, const char *op, const tp_op_whole *whole, tp_val *x, tp_span span);

/* cross_entropy(logits, labels), in the forward or the loss outside the
 * model (cross_entropy.c) */
tp_val *tp_cross_entropy(interp *I, tp_val *logits, tp_val *labels, tp_span span);

/* ==== handlers ==============================================================
 * What the walk calls at each step of the forward pass. A handler calls
 * services only: never another handler, nor the walk. The primitive ops'
 * handlers are the rows of the op table (op_table.h). */

/* the styles' hooks (hooks.c) */
void tp_hook_inputs(interp *I, tp_module *mod, iv *args, int nargs, char **kwnames, iv *kwargs,
                    int nkw, tp_span call_span);
iv tp_hook_output(interp *I, tp_module *mod, iv out, tp_span call_span);

/* a leaf module's forward: Linear, Conv1D, Embedding, the norms (leaf.c) */
iv tp_leaf_forward(interp *I, tp_module *mod, iv *args, int nargs, tp_span call_span);

/* tensor operators (operators.c) */
iv tp_op_binary(interp *I, const tp_node *e, int op, tp_val *a, tp_val *b);
/* x * factor: linear, so any layout passes through */
iv tp_op_scale(interp *I, const tp_node *e, tp_val *x, double factor);

/* the root forward's result: the loss, or the logits, or with an outer
 * loss the loss on them (outputs.c) */
void tp_model_output(interp *I, iv out, const tp_val *ids, tp_span span);

/* a module's output the model numbers its positions by, sharded over the
 * sequence as a plain tensor: the position-ids warning (positions.c) */
void tp_check_positions_source(interp *I, const tp_module *mod, const tp_val *out, tp_span span);

/* the parameters under the plan, before the walk (params.c) */
void tp_check_params(interp *I);

#endif /* TPCC_CHECK_IMPL_H */
