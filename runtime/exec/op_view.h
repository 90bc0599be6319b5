/* op_view.h: an op as the executor hands it to a backend: the sizes that
 * are not its attributes but come from its buffers' shapes, and its name
 * in messages. The executor (exec.c) and the backend limits check
 * (limits_check.c) read them here, so the sizes checked are the sizes the
 * kernels get. The reader's size rules (sched/load.c) proved the shapes. */
#ifndef TPRUN_OP_VIEW_H
#define TPRUN_OP_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include "sched/load.h"

/* The elements of input i. */
int64_t tr_op_in_elems(const tr_schedule *s, const tr_op *op, int i);
/* batch x seq of input 0, [batch, seq, ...]: RoPE's tokens, a loss's logits rows. */
int64_t tr_op_tokens(const tr_schedule *s, const tr_op *op);
/* The rows of vocab_local logits columns in input 0 (ce_max, ce_sumexp). */
int64_t tr_op_vocab_rows(const tr_schedule *s, const tr_op *op);
/* embedding_grad: the width of a row of the table, dy's elements per id. */
int64_t tr_op_embedding_grad_dim(const tr_schedule *s, const tr_op *op);

/* "op 12 (rmsnorm in 'model.norm', plan entry ...)" for op i; the caller names the rank of a multi-rank run. */
const char *tr_op_describe(const tr_schedule *s, int i, char *buf, size_t len);

#endif /* TPRUN_OP_VIEW_H */
