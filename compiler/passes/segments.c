/* segments.c: tpcc --segments, attention within documents (see passes.h).
 *
 * The schedule gains an input, segments [batch, seq] (i32), which tprun
 * fills from the data: each position's document within its row, -1 for
 * padding (docs/training.md, "Attention masks"). Every attention and its
 * gradient read it, so a query sees only the keys of its own document;
 * the positions a model numbers restart at each document, as Hugging
 * Face's packed batches (DataCollatorWithFlattening's position_ids): a
 * positions op reads it, and every rope, which otherwise numbers tokens
 * by their place in the row, reads one positions op's output, written
 * once before the first op. The change is on the lowered program rather
 * than the graph, so the backward (and its recomputation) is the same
 * walk as the forward: every op of a kind gets the extra input. */
#include <stdio.h>
#include <string.h>
#include "compiler/passes/passes.h"
#include "util/xalloc.h"

static int new_buf(tp_ir *ir, const tp_ir_buf *like, const char *name, bool segments)
{
    tp_ir_buf b = {.rank = like->rank, .dtype = TP_I32, .name = tp_xstrdup(name), .offset = -1,
                   .input = segments, .segments = segments, .alias_of = -1};
    memcpy(b.shape, like->shape, sizeof b.shape);
    return tp_ir_add_buf(ir, &b);
}

/* The positions of every token by its document, as op 0. */
static int document_positions(tp_ir *ir, int ids, int segments)
{
    int out = new_buf(ir, &ir->bufs[ids], "positions_in_document", false);
    tp_ir_op op = {.kind = TP_OP_POSITIONS, .in = {ids, segments}, .nin = 2, .out = out, .weight = -1,
                   .bias = -1, .phase = TP_PHASE_FORWARD};
    tp_ir_add_op(ir, &op);
    memmove(ir->ops + 1, ir->ops, (size_t)(ir->nops - 1) * sizeof *ir->ops);
    ir->ops[0] = op;
    return out;
}

int tp_pass_segments(tp_ir *ir, char *err, size_t errlen)
{
    int ids = -1;
    for (int b = 0; b < ir->nbufs && ids < 0; b++)
        if (ir->bufs[b].input)
            ids = b;
    if (ids < 0 || ir->bufs[ids].rank != 2) {
        snprintf(err, errlen, "--segments numbers the documents of [batch, seq] input ids, and the model takes %s",
                 ids < 0 ? "none" : "other inputs");
        return -1;
    }
    int segments = new_buf(ir, &ir->bufs[ids], "segments", true), positions = -1;
    for (int i = 0; i < ir->nops; i++) {
        tp_ir_op *op = &ir->ops[i];
        switch (op->kind) {
        case TP_OP_ATTENTION:
        case TP_OP_ATTENTION_GRAD:
        case TP_OP_POSITIONS:
            if (op->kind == TP_OP_POSITIONS && op->nin == 0) {
                snprintf(err, errlen, "--segments restarts the positions at each document of a row, and arange() "
                                      "numbers one sequence for every row: number them with positions(input_ids)");
                return -1;
            }
            op->in[op->nin++] = segments;
            break;
        case TP_OP_ROPE:
            if (op->nin > 1)
                break;
            if (positions < 0) {
                positions = document_positions(ir, ids, segments);
                op = &ir->ops[++i];   /* moved down by the op put first */
            }
            op->in[op->nin++] = positions;
            break;
        default: break;
        }
    }
    return 0;
}
