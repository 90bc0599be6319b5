/* op_view.c: see op_view.h. */
#include <stdio.h>
#include "runtime/exec/op_view.h"

int64_t tr_op_in_elems(const tr_schedule *s, const tr_op *op, int i) { return tr_buf_elems(&s->bufs[op->in[i]]); }

int64_t tr_op_tokens(const tr_schedule *s, const tr_op *op)
{
    const int64_t *shape = s->bufs[op->in[0]].shape;
    return shape[0] * shape[1];
}

int64_t tr_op_vocab_rows(const tr_schedule *s, const tr_op *op) { return tr_op_in_elems(s, op, 0) / op->vocab_local; }

/* the size rule: at least one id, and dy a whole number of rows */
int64_t tr_op_embedding_grad_dim(const tr_schedule *s, const tr_op *op)
{
    return tr_op_in_elems(s, op, 1) / tr_op_in_elems(s, op, 0);
}

const char *tr_op_describe(const tr_schedule *s, int i, char *buf, size_t len)
{
    const tr_op *op = &s->ops[i];
    snprintf(buf, len, "op %d (%s in '%s'%s%s)", i, tp_op_names[op->kind],
             op->module[0] ? op->module : "(root)", op->entry ? ", plan entry " : "", op->entry ? op->entry : "");
    return buf;
}
