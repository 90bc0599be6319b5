/* profile.c: the step a profile reports when several were run (--repeat,
 * a training run's --steps); see exec.h. */
#include <stdlib.h>
#include "runtime/exec/exec.h"

static int by_total(const void *a, const void *b)
{
    const tr_profile *x = a, *y = b;
    return (x->total_seconds > y->total_seconds) - (x->total_seconds < y->total_seconds);
}

void tr_profile_keep_median(tr_profile *kept, tr_profile *steps, int n, double *seconds)
{
    for (int i = 0; i < n; i++)
        seconds[i] = steps[i].total_seconds;
    if (n == 0)
        return;
    qsort(steps, (size_t)n, sizeof *steps, by_total);
    *kept = steps[(n - 1) / 2];
}
