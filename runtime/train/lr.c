/* lr.c: see lr.h. */
#include "runtime/train/lr.h"
#include <math.h>
#include <stdbool.h>

static double max1(int64_t n) { return n > 1 ? (double)n : 1.0; }

static double linear(double p) { return 1.0 - p; }
static double cosine(double p) { return 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * p)); }   /* num_cycles 0.5 */
static double one_sqrt(double p) { return 1.0 - sqrt(p); }

static double (*const decays[TP_DECAY_COUNT])(double) = {
    [TP_DECAY_LINEAR] = linear, [TP_DECAY_COSINE] = cosine, [TP_DECAY_1_SQRT] = one_sqrt};

/* How each schedule goes on after the warm-up: the shape it decays by
 * (HOLDS: none; GIVEN: the shape's decay, wsd's decay_type), over every
 * step left or over the last decay_steps only, holding 1 before them. */
enum { HOLDS = -1, GIVEN = -2 };
static const struct {
    int decay;
    bool last_steps_only;
} after_warmup[TP_LR_COUNT] = {
    [TP_LR_COSINE] = {TP_DECAY_COSINE, false}, [TP_LR_CONSTANT] = {HOLDS, false},
    [TP_LR_LINEAR] = {TP_DECAY_LINEAR, false}, [TP_LR_WSD] = {GIVEN, true}};

double tr_lr_lambda(const tr_lr_shape *s, int64_t step)
{
    if (step < s->warmup)
        return s->start_factor + (1.0 - s->start_factor) * (double)step / max1(s->warmup);
    int decay = after_warmup[s->kind].decay;
    if (decay == HOLDS)
        return 1.0;
    int64_t steps = after_warmup[s->kind].last_steps_only ? s->decay_steps : s->total - s->warmup;
    int64_t from = s->total - steps;
    if (step < from)
        return 1.0;
    double f = decays[decay == GIVEN ? (int)s->decay : decay]((double)(step - from) / max1(steps));
    return s->floor + (1.0 - s->floor) * (f > 0 ? f : 0.0);
}
