/* suggest.c: did-you-mean suggestions (see suggest.h). */
#include <stdlib.h>
#include <string.h>
#include "compiler/diag/suggest.h"
#include "util/xalloc.h"

int tp_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int *row = tp_xmalloc((lb + 1) * sizeof *row);
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    int d = row[lb];
    free(row);
    return d;
}

const char *tp_suggest(const char *word, const char *const *candidates, int n)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 1) limit = 1;
    if (limit > 4) limit = 4;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        int d = tp_edit_distance(word, candidates[i]);
        if (d < best_d) { best_d = d; best = candidates[i]; }
    }
    return best;
}
