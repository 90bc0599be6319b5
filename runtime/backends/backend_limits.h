/* backend_limits.h: the largest sizes a backend's kernels can run, as data.
 *
 * The schedule's validation (sched/validate.c) proves what every backend
 * relies on; a backend whose kernels launch fixed grids or hold rows in
 * registers has limits of its own besides (the CUDA backend:
 * runtime/kernels/launch_limits.h, the one place its kernels take
 * them from too). tprun compares every op of a schedule with them before
 * it allocates or loads anything (runtime/exec/limits_check.c), so a schedule
 * past one is refused with the op, the size and the limit instead of
 * stopping in a kernel. A field of 0 is no limit. */
#ifndef TPRUN_BACKEND_LIMITS_H
#define TPRUN_BACKEND_LIMITS_H

#include <stdint.h>

typedef struct tp_backend_limits {
    /* rows or tokens that each get a block of their own: the norms and
     * their gradients, sum_rows (m), RoPE's batch x seq tokens, the ids of
     * embedding and embedding_grad, the rows of ce_max, ce_sumexp,
     * cross_entropy_grad and ce_grad */
    int64_t rows;
    /* attention and attention_grad: seq, heads (query heads; the kv heads
     * divide them), batch, head_dim */
    int64_t attn_seq, attn_heads, attn_batch, head_dim;
    /* rope: the rotated dims of each head */
    int64_t rotary_dim;
    /* the norms' gradients and sum_rows: columns (n) */
    int64_t norm_cols;
    /* embedding_grad: the table's width */
    int64_t embedding_grad_dim;
} tp_backend_limits;

#endif /* TPRUN_BACKEND_LIMITS_H */
