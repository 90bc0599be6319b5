/* lr.c: see lr.h. */
#include "runtime/train/lr.h"
#include <math.h>

static double max1(int64_t n) { return n > 1 ? (double)n : 1.0; }

double tr_lr_lambda(tr_lr_schedule kind, int64_t step, int64_t warmup, int64_t total)
{
    if (step < warmup)
        return (double)step / max1(warmup);
    if (kind == TR_LR_CONSTANT)
        return 1.0;
    double progress = (double)(step - warmup) / max1(total - warmup);
    double f = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress));
    return f > 0 ? f : 0.0;
}
