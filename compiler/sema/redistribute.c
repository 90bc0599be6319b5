/* redistribute.c: layout changes. A value moved to another placement is
 * recorded twice: as a collective with the plan entry that caused it (the
 * --explain table) and as the node PyTorch's redistribute_local_tensor
 * runs; on the way the smells of a wasteful plan are reported (a change
 * undone, a gather repeated, a gather sliced again). Also the check every
 * new shard makes: its dimension splits evenly. */
#include <string.h>
#include "compiler/sema/check_impl.h"
#include "compiler/front/window.h"
#include "util/xalloc.h"

/* A layout change as the --explain table and the smells read it. */
static int record_comm(interp *I, tp_redist_record c)
{
    tp_analysis *a = I->a;
    a->comms = tp_xgrow(a->comms, a->ncomms, &a->capcomms, sizeof *a->comms, 256);
    a->comms[a->ncomms] = c;
    return a->ncomms++;
}

void tp_check_shard_divisible(interp *I, tp_val *v, const tp_style *cause, tp_span span)
{
    tp_placement p = tp_placement_norm(v->pl, v->rank);
    if (p.kind != TP_SHARD || p.dim >= v->rank || v->shape[p.dim] % I->tp == 0)
        return;
    int64_t n = v->shape[p.dim], padded = (n + I->tp - 1) / I->tp * I->tp;
    tp_diag *g = tp_finding(I, TP_ERROR, cause ? tp_entry_span(cause) : span, "divisibility", v, NULL,
                            "dimension %d (%s = %lld) does not split evenly over %lld ranks",
                            p.dim, v->dimname[p.dim], (long long)n, (long long)I->tp);
    if (!g)
        return;
    if (span.file >= 0)
        tp_diag_note_at(g, span, "the tensor is sharded here");
    int64_t within = tp_seq_within_window(I->c->seq_window, I->tp);
    if (!strcmp(v->dimname[p.dim], "seq") && I->c->seq_window && padded > I->c->seq_window && within > 0)
        /* padding would pass the window, which is unsupported: the one seq
         * both findings name (window.h) */
        tp_diag_help(g, "cut seq to %lld (-D seq=%lld): padding it to %lld would pass config.json's sliding_window "
                        "%lld, which tpcc does not compute yet; or use a tp that divides %lld", (long long)within,
                     (long long)within, (long long)padded, (long long)I->c->seq_window, (long long)n);
    else if (v->dimname[p.dim][0] && tp_config_has(I->c, v->dimname[p.dim]))
        tp_diag_help(g, "pad %s to %lld (-D %s=%lld), or use a tp that divides %lld",
                     v->dimname[p.dim], (long long)padded, v->dimname[p.dim], (long long)padded, (long long)n);
    else
        tp_diag_help(g, "pad this dimension to %lld, or use a tp that divides %lld", (long long)padded, (long long)n);
    v->poisoned = true;
}

/* Returns true when it fired: the more general gather-then-slice smell is
 * then the same finding. */
static bool smell_undone(interp *I, const tp_val *v, tp_placement to, const tp_style *cause, tp_span span)
{
    if (v->redist_src < 0 || !tp_placement_eq(v->redist_from, to, v->rank))
        return false;
    char a[24], b[24];
    tp_diag *g = tp_finding(I, TP_WARNING, cause ? tp_entry_span(cause) : span, "redundant-redistribute", v, NULL,
                            "this redistribution %s -> %s undoes the one just before it",
                            tp_pl_str(v->pl, v->rank, a), tp_pl_str(to, v->rank, b));
    if (g && v->redist_cause && v->redist_cause != cause)
        tp_diag_note_at(g, tp_entry_span(v->redist_cause), "which redistributed %s -> %s",
                        tp_pl_str(to, v->rank, a), tp_pl_str(v->pl, v->rank, b));
    if (g)
        tp_diag_help(g, "keep the tensor %s: drop both redistributions", tp_pl_str(to, v->rank, a));
    return true;
}

/* Chains collective idx (of the tensor with id value) to that tensor's
 * earlier ones. */
static void index_comm(interp *I, int value, int idx)
{
    if (value >= I->caplast) {
        int cap = I->caplast;
        while (I->caplast <= value)
            I->last_comm_of = tp_xgrow(I->last_comm_of, I->caplast, &I->caplast, sizeof *I->last_comm_of, 1024);
        for (int i = cap; i < I->caplast; i++)
            I->last_comm_of[i] = -1;
    }
    I->prev_comm_of = tp_xgrow(I->prev_comm_of, idx, &I->capprev, sizeof *I->prev_comm_of, 1024);
    I->prev_comm_of[idx] = I->last_comm_of[value];
    I->last_comm_of[value] = idx;
}

/* The first earlier collective that moved the same tensor the same way
 * as comms[self], or -1. */
static int earlier_same_move(const interp *I, const tp_redist_record *c, int self)
{
    int first = -1;
    for (int i = I->prev_comm_of[self]; i >= 0; i = I->prev_comm_of[i]) {
        const tp_redist_record *o = &I->a->comms[i];
        if (o->kind == c->kind && tp_placement_eq(o->to, c->to, c->rank))
            first = i;
    }
    return first;
}

static void smell_repeated_gather(interp *I, const tp_val *v, tp_redist_record *c, int self)
{
    int i = earlier_same_move(I, c, self);
    if (i < 0)
        return;
    tp_redist_record *o = &I->a->comms[i];
    tp_diag *g = tp_finding(I, TP_WARNING, c->cause ? tp_entry_span(c->cause) : c->span, "repeated-gather", v, NULL,
                            "the same tensor is %s again (%s already did)",
                            c->kind == TP_REDIST_ALL_GATHER ? "all-gathered" : "redistributed",
                            o->module ? o->module->fqn : "an earlier op");
    if (g && o->cause)
        tp_diag_note_at(g, tp_entry_span(o->cause), "first %s here", tp_redist_name(o->kind));
    if (g)
        tp_diag_help(g, "gather once: put PrepareModuleInput(...) on the parent module with the Shard -> Replicate "
                        "redistribution and keep these entries at their defaults");
}

static void smell_gather_then_slice(interp *I, const tp_val *v, int dim, const tp_style *cause, tp_span span)
{
    if (v->gather_comm < 0 || v->gather_dim != dim)
        return;
    tp_redist_record *g0 = &I->a->comms[v->gather_comm];
    tp_diag *g = tp_finding(I, TP_WARNING, cause ? tp_entry_span(cause) : span, "gather-then-slice", v, NULL,
                            "'%s' slices dimension %d again after '%s' all-gathered it: the ops in between act on "
                            "each slice independently, so the gather and the replicated compute are wasted",
                            tp_cur_fqn(I), dim, g0->module ? g0->module->fqn : "an earlier op");
    if (g && g0->cause && g0->cause != cause)
        tp_diag_note_at(g, tp_entry_span(g0->cause), "gathered here");
    if (g) {
        /* what keeping it sharded saves: the gather's ring traffic, per rank */
        double saved = (double)g0->elems * 4 * (double)(I->tp - 1) / (double)I->tp;
        tp_diag_help(g, "keep the tensor sharded: use the defaults (ColwiseParallel() output Shard(-1), "
                        "RowwiseParallel() input Shard(-1)); this saves the all-gather (%.1f MiB sent per rank in "
                        "fp32, per module) and the replicated compute", saved / (1 << 20));
    }
}

/* The node of a layout change: the op PyTorch's redistribute_local_tensor
 * runs for it. */
static void record_reshard(interp *I, tp_redist_kind k, tp_val *v, tp_val *r, tp_placement from, tp_placement to,
                           const tp_style *cause, bool implicit)
{
    static const tp_op_kind ops[] = {
        [TP_REDIST_ALL_GATHER] = TP_OP_ALL_GATHER, [TP_REDIST_ALL_REDUCE] = TP_OP_ALL_REDUCE,
        [TP_REDIST_REDUCE_SCATTER] = TP_OP_REDUCE_SCATTER, [TP_REDIST_ALL_TO_ALL] = TP_OP_ALL_TO_ALL,
        [TP_REDIST_LOCAL_SLICE] = TP_OP_SLICE, [TP_REDIST_LOCAL_DIVIDE] = TP_OP_SCALE,
    };
    tp_gnode *n = tp_record_redist(I, ops[k], v, r, tp_redist_name(k));
    n->from = from;
    n->to = to;
    n->op.dim = from.kind == TP_SHARD ? from.dim : to.kind == TP_SHARD ? to.dim : 0;
    n->op.dim2 = to.kind == TP_SHARD ? to.dim : 0;
    n->op.parts = (int)I->tp;
    n->op.scale = k == TP_REDIST_LOCAL_DIVIDE ? 1.0 / (double)I->tp : 1.0;
    n->op.elems = tp_val_elems(v);
    n->entry = cause;
    n->op.implicit = implicit;
}

tp_val *tp_redistribute(interp *I, tp_val *v, tp_placement to, const tp_style *cause, tp_span span, bool implicit)
{
    to = tp_placement_norm(to, v->rank);
    tp_redist_kind k = tp_redist_classify(v->pl, to, v->rank);
    if (k == TP_REDIST_NONE)
        return v;
    if (I->tp == 1 && k != TP_REDIST_INVALID) {
        /* one device: every placement holds the whole tensor, nothing moves */
        tp_val *r = tp_val_copy(I, v);
        r->pl = to;
        return r;
    }

    char a[24], b[24];
    if (k == TP_REDIST_INVALID) {
        tp_diag *g = tp_finding(I, TP_ERROR, cause ? tp_entry_span(cause) : span, "layout-mismatch", v, NULL,
                                "redistribute from %s to %s is not supported (PyTorch raises at the first forward)",
                                tp_pl_str(v->pl, v->rank, a), tp_pl_str(to, v->rank, b));
        if (g)
            tp_diag_help(g, "a Shard can become Replicate or another Shard, never Partial");
        tp_val *r = tp_val_copy(I, v);
        r->pl = to;
        r->poisoned = true;
        return r;
    }
    if (v->is_index) {
        /* PyTorch moves ids like any tensor; a schedule's slices and
         * collectives carry floats only (sched/ops.def) */
        tp_diag *g = tp_finding(I, TP_UNSUPPORTED, cause ? tp_entry_span(cause) : span, "unsupported", v, NULL,
                                "the %s of integer %s (%s -> %s): tprun moves only float tensors between layouts, "
                                "and would need integer slices and collectives", tp_redist_name(k),
                                v->is_position ? "positions" : "token ids", tp_pl_str(v->pl, v->rank, a),
                                tp_pl_str(to, v->rank, b));
        if (g)
            tp_diag_help(g, "keep the ids in the layout they come in (Replicate()): redistribute the embedding's "
                            "output instead, which moves the same rows as floats");
        tp_val *r = tp_val_copy(I, v);
        r->pl = to;
        r->poisoned = true;
        return r;
    }
    bool undone = smell_undone(I, v, to, cause, span);
    tp_placement from = tp_placement_norm(v->pl, v->rank);
    int dim = to.kind == TP_SHARD ? to.dim : from.kind == TP_SHARD ? from.dim : -1;
    if (k == TP_REDIST_LOCAL_SLICE && !undone)
        smell_gather_then_slice(I, v, to.dim, cause, span);
    tp_redist_record c = {k, dim, tp_val_elems(v), cause, NULL, span, v->id, from, to, v->rank, implicit};
    c.module = I->cur;
    int idx = record_comm(I, c);
    index_comm(I, v->id, idx);
    if (tp_redist_communicates(k))
        smell_repeated_gather(I, v, &I->a->comms[idx], idx);
    if (implicit && tp_redist_communicates(k)) {
        tp_diag *g = tp_finding(I, TP_WARNING, span, "implicit-redistribute", v, NULL,
                                "DTensor sharding propagation inserts an %s here (%s -> %s)",
                                tp_redist_name(k), tp_pl_str(from, v->rank, a), tp_pl_str(to, v->rank, b));
        if (g)
            tp_diag_help(g, "redistribute explicitly in the plan so the cost is visible");
    }
    tp_val *r = tp_val_copy(I, v);
    r->pl = to;
    r->redist_src = v->id;
    r->redist_from = from;
    r->redist_cause = cause;
    r->gv = -1;
    record_reshard(I, k, v, r, from, to, cause, implicit);
    if (to.kind == TP_SHARD)
        r->shard_cause = cause;
    if (tp_placement_is_partial(to))
        r->partial_cause = cause;
    r->gather_comm = k == TP_REDIST_ALL_GATHER ? idx : -1;
    r->gather_dim = dim;
    if (to.kind == TP_SHARD)
        tp_check_shard_divisible(I, r, cause, span);
    return r;
}
