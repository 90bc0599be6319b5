/* limits_check.c: see limits_check.h. The sizes are those the executor passes to the
 * kernels: attributes, or read from the buffers through op_view.h. */
#include <stdio.h>
#include "runtime/exec/limits_check.h"
#include "runtime/exec/op_view.h"

/* One size of an op that a limit bounds, and what makes it smaller. */
typedef struct bound {
    const char *what;
    int64_t size, limit;
    const char *smaller;
} bound;

#define MAX_BOUNDS 6   /* rope_attention's */

/* what makes each kind of size smaller */
#define SMALLER_HEAD_DIM "a model with a smaller head dimension"
#define SMALLER_HEADS "more tensor parallelism (tp) or fewer heads"
#define SMALLER_BATCH "a smaller batch"
#define SMALLER_TOKENS "a smaller batch or sequence"
#define SMALLER_WIDTH "a smaller hidden size, or a plan that shards it"

/* The bounded sizes of op under limits l, into b; how many. */
static int bounds_of(const tr_schedule *s, const tr_op *op, const tp_backend_limits *l, bound *b)
{
    int n = 0;
    switch (op->kind) {
    case TP_OP_ATTENTION:
    case TP_OP_ATTENTION_GRAD:
    case TP_OP_ROPE_ATTENTION:
    case TP_OP_ROPE_ATTENTION_GRAD:
        b[n++] = (bound){"head_dim", op->head_dim, l->head_dim, SMALLER_HEAD_DIM};
        b[n++] = (bound){"heads", op->heads, l->attn_heads, SMALLER_HEADS};
        b[n++] = (bound){"batch", op->batch, l->attn_batch, SMALLER_BATCH};
        b[n++] = (bound){"seq", op->seq, l->attn_seq, SMALLER_TOKENS};
        if (op->kind == TP_OP_ROPE_ATTENTION || op->kind == TP_OP_ROPE_ATTENTION_GRAD) {
            /* the rotation: rope's bounds */
            b[n++] = (bound){"rotary_dim", op->rotary_dim, l->rotary_dim, SMALLER_HEAD_DIM};
            b[n++] = (bound){"tokens (batch x seq)", tr_op_tokens(s, op), l->rows, SMALLER_TOKENS};
        }
        break;
    case TP_OP_ROPE:
        b[n++] = (bound){"rotary_dim", op->rotary_dim, l->rotary_dim, SMALLER_HEAD_DIM};
        b[n++] = (bound){"tokens (batch x seq)", tr_op_tokens(s, op), l->rows, SMALLER_TOKENS};
        break;
    case TP_OP_RMSNORM:
    case TP_OP_ADD_RMSNORM:
    case TP_OP_LAYERNORM:
        b[n++] = (bound){"rows (m)", op->m, l->rows, SMALLER_TOKENS};
        break;
    case TP_OP_RMSNORM_DX:
    case TP_OP_RMSNORM_DW:
    case TP_OP_LAYERNORM_DX:
    case TP_OP_LAYERNORM_DW:
    case TP_OP_SUM_ROWS:
        b[n++] = (bound){"rows (m)", op->m, l->rows, SMALLER_TOKENS};
        b[n++] = (bound){"columns (n)", op->n, l->norm_cols, SMALLER_WIDTH};
        break;
    case TP_OP_EMBEDDING:
        b[n++] = (bound){"tokens", tr_op_in_elems(s, op, 0), l->rows, SMALLER_TOKENS};
        break;
    case TP_OP_EMBEDDING_GRAD:
        b[n++] = (bound){"tokens", tr_op_in_elems(s, op, 0), l->rows, SMALLER_TOKENS};
        b[n++] = (bound){"the table's width", tr_op_embedding_grad_dim(s, op), l->embedding_grad_dim, SMALLER_WIDTH};
        break;
    case TP_OP_CE_MAX:
    case TP_OP_CE_SUMEXP:
        b[n++] = (bound){"rows", tr_op_vocab_rows(s, op), l->rows, SMALLER_TOKENS};
        break;
    case TP_OP_CROSS_ENTROPY_GRAD:
    case TP_OP_CE_GRAD:
        b[n++] = (bound){"rows (batch x seq)", tr_op_tokens(s, op), l->rows, SMALLER_TOKENS};
        break;
    default:
        break;
    }
    return n;
}

int tr_exec_check_limits(const tr_schedule *s, const tp_backend *be, char *err, size_t errlen)
{
    if (!be->limits)
        return 0;
    for (int i = 0; i < s->nops; i++) {
        bound b[MAX_BOUNDS];
        int n = bounds_of(s, &s->ops[i], be->limits, b);
        for (int k = 0; k < n; k++) {
            if (!b[k].limit || b[k].size <= b[k].limit)
                continue;
            char name[600];
            snprintf(err, errlen,
                     "%s: %s %lld is above the %s backend's limit of %lld; run the schedule with --backend cpu, or "
                     "compile it for %s", tr_op_describe(s, i, name, sizeof name), b[k].what, (long long)b[k].size,
                     be->name, (long long)b[k].limit, b[k].smaller);
            return -1;
        }
    }
    return 0;
}
