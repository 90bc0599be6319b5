/* suggest.c: did-you-mean suggestions (see suggest.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "compiler/diag/suggest.h"

int tp_edit_distance_within(const char *a, const char *b, int k)
{
    size_t la = strlen(a), lb = strlen(b), band = (size_t)k;
    int far = k + 1;
    if (la > TP_SUGGEST_MAX_LENGTH || lb > TP_SUGGEST_MAX_LENGTH || (la > lb ? la - lb : lb - la) > band)
        return far;
    /* Levenshtein's rows, only the cells within k of the diagonal: a path
     * through any other cell costs more than k. Cells outside hold far.
     * On the stack: a plan of many unmatched keys asks for many distances. */
    int row[TP_SUGGEST_MAX_LENGTH + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j <= band ? (int)j : far;
    for (size_t i = 1; i <= la; i++) {
        size_t lo = i > band ? i - band : 1, hi = i + band < lb ? i + band : lb;
        int diag = row[lo - 1];
        row[lo - 1] = lo == 1 && i <= band ? (int)i : far;
        for (size_t j = lo; j <= hi; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best < far ? best : far;
            diag = up;
        }
    }
    return row[lb];
}

const char *tp_suggest(const char *word, const char *const *candidates, int n)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 1) limit = 1;
    if (limit > 4) limit = 4;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        int d = tp_edit_distance_within(word, candidates[i], limit);
        if (d < best_d) { best_d = d; best = candidates[i]; }
    }
    return best;
}

bool tp_same_folded(const char *a, const char *b)
{
    for (;;) {
        while (*a == '_') a++;
        while (*b == '_') b++;
        if (!*a || !*b)
            return !*a && !*b;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
        a++, b++;
    }
}

static int components(const char *s)
{
    int n = 1;
    for (; *s; s++)
        n += *s == '.';
    return n;
}

/* The one distinct candidate that folds to word, or NULL (none, or two). */
static const char *folded_match(const char *word, const char *const *candidates, int n)
{
    const char *found = NULL;
    for (int i = 0; i < n; i++) {
        if (!tp_same_folded(word, candidates[i]) || (found && !strcmp(found, candidates[i])))
            continue;
        if (found)
            return NULL;
        found = candidates[i];
    }
    return found;
}

const char *tp_suggest_sure(const char *word, const char *const *candidates, int n)
{
    const char *folded = folded_match(word, candidates, n);
    if (folded)
        return strcmp(folded, word) ? folded : NULL;
    int limit = (int)strlen(word) / 4;
    if (limit < 1) limit = 1;
    if (limit > 3) limit = 3;
    const char *best = NULL;
    int best_d = -1, second_d = -1;
    for (int i = 0; i < n; i++) {
        if (best && !strcmp(best, candidates[i]))
            continue;
        int d = tp_edit_distance_within(word, candidates[i], limit);
        if (!best || d < best_d) {
            second_d = best_d;
            best_d = d;
            best = candidates[i];
        } else if (second_d < 0 || d < second_d) {
            second_d = d;
        }
    }
    if (!best || best_d < 1 || best_d > limit || (second_d >= 0 && second_d <= best_d) ||
        components(best) != components(word))
        return NULL;
    return best;
}
