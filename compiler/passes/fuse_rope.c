/* fuse_rope.c: -O1 on the lowered program, after --segments: the rope ops
 * of an attention's q and k go into the attention, which rotates them as it
 * reads them (rope_attention, sched/ops.def), and into its gradient, which
 * reads q and k before the rotation too and rotates dq and dk back as
 * rope's inverse ops did (rope_attention_grad). The schedule then holds
 * neither the rotated q and k nor their gradients: the CUDA backend's
 * tensor-core kernels rotate in their loads and stores, which saves four
 * passes over q and k and the rotated copies' memory (the CPU backend, and
 * the CUDA backend elsewhere, rotate into copies of their own).
 *
 * On the program rather than the graph, as fuse_pairs.c: the backward is
 * autodiff's, and the checks see the model's own ops at -O0 and -O1 alike.
 * A backend computes what the ops computed (backend.h), so -O0 and -O1
 * give the same numbers. An attention whose q and k come otherwise (no
 * rope, rotations that differ, a rotated q another op reads too) is left
 * as it is. */
#include <stdbool.h>
#include "compiler/passes/passes.h"

/* The live op that writes buffer b, or -1. */
static int writer_of(const tp_ir *ir, int b)
{
    for (int i = 0; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        for (int o = 0; !op->dead && o < tp_ops[op->kind].nout; o++)
            if (op->outs[o] == b)
                return i;
    }
    return -1;
}

/* Whether the program hands root buffer root out: an output, the loss,
 * the logits, a parameter's gradient. */
static bool handed_out(const tp_ir *ir, int root)
{
    if (ir->bufs[root].output || (ir->loss_buf >= 0 && tp_ir_alias_root(ir, ir->loss_buf) == root) ||
        (ir->logits_buf >= 0 && tp_ir_alias_root(ir, ir->logits_buf) == root))
        return true;
    for (int p = 0; ir->grad_buf && p < ir->nparams; p++)
        if (ir->grad_buf[p] >= 0 && tp_ir_alias_root(ir, ir->grad_buf[p]) == root)
            return true;
    return false;
}

/* Whether buffer b's storage is read only by the live ops a and c (-1:
 * none) and not handed out: whether those ops may stop reading it. */
static bool read_only_by(const tp_ir *ir, int b, int a, int c)
{
    const int root = tp_ir_alias_root(ir, b);
    if (handed_out(ir, root))
        return false;
    for (int i = 0; i < ir->nops; i++)
        if (i != a && i != c && !ir->ops[i].dead && tp_ir_op_reads(ir, &ir->ops[i], root))
            return false;
    return true;
}

/* Whether no live op in (from, to) touches buffer b's storage: reads it,
 * when `reading`, and writes it. */
static bool untouched_between(const tp_ir *ir, int b, int from, int to, bool reading)
{
    const int root = tp_ir_alias_root(ir, b);
    for (int i = from + 1; i < to; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (!op->dead && (tp_ir_op_writes(ir, op, root) || (reading && tp_ir_op_reads(ir, op, root))))
            return false;
    }
    return true;
}

/* The rotary dims of rope op r: its own, or the whole head. */
static int64_t rotary_of(const tp_ir *ir, const tp_ir_op *r)
{
    if (r->rotary > 0)
        return r->rotary;
    return r->k > 0 ? r->k : ir->bufs[r->in[0]].shape[ir->bufs[r->in[0]].rank - 1];
}

/* Whether rope ops a and b rotate alike: the same frequencies, offset and
 * positions (documents). */
static bool same_rotation(const tp_ir *ir, const tp_ir_op *a, const tp_ir_op *b)
{
    const tp_rope_scaling *x = &a->rope, *y = &b->rope;
    return a->theta == b->theta && a->pos_chunk == b->pos_chunk && rotary_of(ir, a) == rotary_of(ir, b) &&
           a->nin == b->nin && (a->nin < 2 || a->in[1] == b->in[1]) && x->type == y->type &&
           x->factor == y->factor && x->low_freq_factor == y->low_freq_factor &&
           x->high_freq_factor == y->high_freq_factor && x->original_max_positions == y->original_max_positions &&
           x->beta_fast == y->beta_fast && x->beta_slow == y->beta_slow &&
           x->attention_factor == y->attention_factor && x->truncate == y->truncate;
}

/* The rope op (forward, or its inverse) that writes buffer b, or -1. */
static int rope_writing(const tp_ir *ir, int b, bool inverse)
{
    const int i = b >= 0 ? writer_of(ir, b) : -1;
    return i >= 0 && ir->ops[i].kind == TP_OP_ROPE && ir->ops[i].inverse == inverse ? i : -1;
}

/* The inverse rope op that is the one reader of gradient g (of a rotated
 * q or k, written at op at), rotating like `like`: its index, or -1. -2
 * when g is not computed (nothing to rotate back). */
static int rotation_back(const tp_ir *ir, int g, int at, const tp_ir_op *like)
{
    if (g < 0)
        return -2;
    for (int i = at + 1; i < ir->nops; i++) {
        const tp_ir_op *op = &ir->ops[i];
        if (op->dead || !tp_ir_op_reads(ir, op, tp_ir_alias_root(ir, g)))
            continue;
        bool fits = op->kind == TP_OP_ROPE && op->inverse && op->in[0] == g && same_rotation(ir, op, like) &&
                    read_only_by(ir, g, i, -1) && untouched_between(ir, op->out, at, i, true);
        return fits ? i : -1;
    }
    return -1;
}

/* The attention gradient reading attention a's output (attention_stats.c
 * links them so), or -1. */
static int gradient_of(const tp_ir *ir, const tp_ir_op *a)
{
    for (int i = 0; i < ir->nops; i++)
        if (!ir->ops[i].dead && ir->ops[i].kind == TP_OP_ATTENTION_GRAD && ir->ops[i].in[4] == a->outs[0])
            return i;
    return -1;
}

/* op (an attention or its gradient) reads q and k before the rotation of
 * rope op r and rotates them itself; docs_in: where its segments are, the
 * positions following them. */
static void take_rotation(tp_ir_op *op, const tp_ir_op *rq, const tp_ir_op *rk, int docs_in, int64_t rotary)
{
    op->kind = op->kind == TP_OP_ATTENTION ? TP_OP_ROPE_ATTENTION : TP_OP_ROPE_ATTENTION_GRAD;
    op->in[0] = rq->in[0];
    op->in[1] = rk->in[0];
    if (op->nin > docs_in)
        op->in[op->nin++] = rq->in[1];
    op->theta = rq->theta;
    op->rope = rq->rope;
    op->rotary = rotary;
    op->pos_chunk = rq->pos_chunk;
}

/* Fuses the attention at index ia with its q's and k's rope ops, and its
 * gradient with their inverses, where every condition holds. */
static void fuse_attention(tp_ir *ir, int ia)
{
    tp_ir_op *a = &ir->ops[ia];
    const int iq = rope_writing(ir, a->in[0], false), ik = rope_writing(ir, a->in[1], false);
    if (iq < 0 || ik < 0 || iq == ik)
        return;
    tp_ir_op *rq = &ir->ops[iq], *rk = &ir->ops[ik];
    /* documents: the attention's segments and the rotation's positions
     * come together; and a rotation in place leaves no q to read */
    if (!same_rotation(ir, rq, rk) || (rq->nin > 1) != (a->nin > 3) ||
        tp_ir_alias_root(ir, rq->in[0]) == tp_ir_alias_root(ir, rq->out) ||
        tp_ir_alias_root(ir, rk->in[0]) == tp_ir_alias_root(ir, rk->out))
        return;
    const int ig = gradient_of(ir, a), last = ig >= 0 ? ig : ia;
    /* the gradient reads the same q and k, and documents as the attention */
    if (ig >= 0 && (ir->ops[ig].in[0] != a->in[0] || ir->ops[ig].in[1] != a->in[1] ||
                    (ir->ops[ig].nin > 6) != (a->nin > 3)))
        return;
    /* nothing writes the rotated q and k after their rope ops (an op that
     * writes without reading them), nothing else reads them */
    if (!untouched_between(ir, a->in[0], iq, ia, false) || !untouched_between(ir, a->in[1], ik, ia, false) ||
        !read_only_by(ir, a->in[0], ia, ig) || !read_only_by(ir, a->in[1], ia, ig) ||
        !untouched_between(ir, rq->in[0], iq, last, false) || !untouched_between(ir, rk->in[0], ik, last, false))
        return;
    int bq = -2, bk = -2;
    if (ig >= 0) {
        const tp_ir_op *g = &ir->ops[ig];
        bq = rotation_back(ir, g->outs[0], ig, rq);
        bk = rotation_back(ir, g->outs[1], ig, rq);
        if (bq == -1 || bk == -1)
            return;
    }
    const int64_t rotary = rotary_of(ir, rq);
    if (ig >= 0) {
        tp_ir_op *g = &ir->ops[ig];
        take_rotation(g, rq, rk, 6, rotary);
        if (bq >= 0) {
            g->outs[0] = ir->ops[bq].out;
            ir->ops[bq].dead = true;
        }
        if (bk >= 0) {
            g->outs[1] = ir->ops[bk].out;
            ir->ops[bk].dead = true;
        }
    }
    take_rotation(a, rq, rk, 3, rotary);
    rq->dead = true;
    rk->dead = true;
}

void tp_pass_fuse_rope(tp_ir *ir)
{
    for (int i = 0; i < ir->nops; i++)
        if (!ir->ops[i].dead && ir->ops[i].kind == TP_OP_ATTENTION)
            fuse_attention(ir, i);
}
