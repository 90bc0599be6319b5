/* ce_rows.h: which rows and columns of the logits the cross-entropy reads,
 * and a row's softmax statistics, shared by the loss (backend_cpu.c) and
 * its gradient (backward.c) so that the two can never disagree about them.
 *
 * Hugging Face's causal-LM loss shifts (rule.shift 1): position t predicts
 * token t+1, so the label of row (b, t) is labels[b, t+1] and the last
 * position of each sequence has none. Labels already shifted (rule.shift 0)
 * are read in place. Labels equal to -100 are ignored. */
#ifndef TPRUN_CPU_CE_ROWS_H
#define TPRUN_CPU_CE_ROWS_H

#include <stdint.h>

#include "runtime/backends/backend.h"
#include "runtime/backends/cpu/vec.h"

#define CE_IGNORE (-100)

static inline int32_t row_label(const int32_t *labels, int64_t bi, int64_t t, int64_t s, int shift)
{
    return t + shift < s ? labels[bi * s + t + shift] : CE_IGNORE;
}

/* What the loss's sum is divided by: the rule's divisor when it gives one
 * (a training step's share of the global batch's labelled tokens), else
 * the rows labelled here. */
static inline double ce_denominator(tp_ce_rule rule, int64_t labelled)
{
    return rule.divisor > 0 ? rule.divisor : (double)labelled;
}

/* Columns [vocab_start, vocab_start + v) are local; those at or beyond
 * `vocab` are padding (a vocabulary padded to a multiple of tp) and must not
 * take part in the softmax. Returns how many local columns are real. */
static inline int64_t real_columns(int64_t v, int64_t vocab_start, int64_t vocab)
{
    int64_t n = vocab - vocab_start;
    return n < 0 ? 0 : n > v ? v : n;
}

/* A row's softmax over its first n (real) columns: the max, and the sum of
 * exp(l - max), fp32 exps summed in double (vec.h). */
typedef struct ce_row {
    double max, sumexp;
} ce_row;

static inline ce_row ce_row_of(const float *row, int64_t n)
{
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    const float max = vec->max(row, n);
    return (ce_row){max, vec->exp_sum(NULL, row, n, max)};
}

#endif /* TPRUN_CPU_CE_ROWS_H */
