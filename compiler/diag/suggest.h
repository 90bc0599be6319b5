/* suggest.h: "did you mean" by edit distance. */
#ifndef TPCC_SUGGEST_H
#define TPCC_SUGGEST_H

/* The candidate closest to `word` by Levenshtein distance, if that distance
 * is at most a third of the word's length (at least 1, at most 4);
 * NULL otherwise. */
const char *tp_suggest(const char *word, const char *const *candidates, int n);
int tp_edit_distance(const char *a, const char *b);

#endif /* TPCC_SUGGEST_H */
