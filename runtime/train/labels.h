/* labels.h: the labels a cross-entropy loss is scored against, as tprun
 * builds them from its inputs, for a forward run (--labels) and for each
 * training step (batches.h).
 *
 * The loss kernels ignore one value, -100 (PyTorch's default
 * ignore_index). A run's --ignore-index N (seed scripts pass their pad id,
 * CrossEntropyLoss(ignore_index=PAD)) names the value the data marks
 * ignored; it is checked and then rewritten to -100 before the kernels see
 * it. As in PyTorch, a label is the ignore index or a class of the
 * vocabulary: -100 is an error when the ignore index is another value. */
#ifndef TPRUN_TRAIN_LABELS_H
#define TPRUN_TRAIN_LABELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_IGNORE_INDEX (-100)   /* the loss kernels' ignored label, PyTorch's default */

/* Each row's next tokens: out[r, t] = ids[r, t + 1], the last position of
 * each of the rows (which has no next token) ignored; what a loss over
 * pre-shifted labels (label_shift 0) is scored against when the labels
 * are the input ids themselves. */
void tr_labels_next_tokens(int32_t *out, const int32_t *ids, int64_t rows, int64_t seq);

/* The position of the first label that is neither ignore_index nor in
 * [0, vocab), or -1 when every one is. */
int64_t tr_labels_first_invalid(const int32_t *labels, int64_t n, int64_t vocab, int32_t ignore_index);

/* Labels equal to ignore_index become -100, in place. */
void tr_labels_map_ignored(int32_t *labels, int64_t n, int32_t ignore_index);

/* How many of rows x seq positions have a label the loss scores: with
 * shift 1 position t of a row takes labels[t + 1] (the last none), with 0
 * labels[t]; labels equal to ignore_index do not count. */
int64_t tr_labels_counted(const int32_t *labels, int64_t rows, int64_t seq, int shift, int32_t ignore_index);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_LABELS_H */
