/* lr.c: see lr.h. */
#include "runtime/train/lr.h"
#include <math.h>

const char *const tr_lr_schedule_names[TR_LR_NSCHEDULES] = {
    [TR_LR_COSINE] = "cosine", [TR_LR_CONSTANT] = "constant", [TR_LR_LINEAR] = "linear"};

static double max1(int64_t n) { return n > 1 ? (double)n : 1.0; }

double tr_lr_lambda(const tr_lr_shape *s, int64_t step)
{
    if (step < s->warmup)
        return s->start_factor + (1.0 - s->start_factor) * (double)step / max1(s->warmup);
    if (s->kind == TR_LR_CONSTANT)
        return 1.0;
    double progress = (double)(step - s->warmup) / max1(s->total - s->warmup);
    double f = s->kind == TR_LR_LINEAR ? 1.0 - progress : 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress));
    return s->floor + (1.0 - s->floor) * (f > 0 ? f : 0.0);
}
