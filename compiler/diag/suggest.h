/* suggest.h: "did you mean" by edit distance, and when a suggestion is
 * sure enough for --fix to apply it. */
#ifndef TPCC_SUGGEST_H
#define TPCC_SUGGEST_H

#include <stdbool.h>

/* The candidate closest to `word` by Levenshtein distance, if that distance
 * is at most a third of the word's length (at least 1, at most 4);
 * NULL otherwise. For help text: a human reads it and decides. */
const char *tp_suggest(const char *word, const char *const *candidates, int n);

/* Words longer than this get no suggestion (no name in a model or plan is
 * that long; it bounds the work an adversarial input can ask for). */
#define TP_SUGGEST_MAX_LENGTH 256

/* The Levenshtein distance of a and b when it is at most k, else k + 1
 * (also when either is longer than TP_SUGGEST_MAX_LENGTH): O(k * length)
 * time, O(length) memory. */
int tp_edit_distance_within(const char *a, const char *b, int k);

/* a and b are equal once case and underscores are ignored
 * (colwise_parallel and ColwiseParallel). */
bool tp_same_folded(const char *a, const char *b);

/* The candidate a machine may put in the place of `word`, or NULL. Sure
 * means one of:
 *   - exactly one distinct candidate equals `word` once case and
 *     underscores are ignored (colwise_parallel -> ColwiseParallel);
 *   - the closest distinct candidate is at distance d1 with
 *     1 <= d1 <= max(1, min(3, strlen(word) / 4)), every other distinct
 *     candidate is strictly farther (no tie), and it has as many
 *     '.'-separated components as `word` (a typo inside a name, never a
 *     rename to a module at another depth: attention.q_norm is not a
 *     misspelt attention_norm).
 * Candidates may repeat (the same name under every layer): equal strings
 * count as one. */
const char *tp_suggest_sure(const char *word, const char *const *candidates, int n);

#endif /* TPCC_SUGGEST_H */
