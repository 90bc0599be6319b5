/* silu.h: SiLU and its derivative, element by element, as every CPU kernel
 * that computes them (the activation and its gradient, the fused silu_mul
 * and its gradient) must compute them: one definition, so a fused op gives
 * the bits of the ops it replaces. */
#ifndef TPRUN_CPU_SILU_H
#define TPRUN_CPU_SILU_H

#include <math.h>

/* x / (1 + e^-x): for x << 0, e^-x overflows to inf and the result is -0,
 * the correct limit, rather than inf * 0 = NaN from x * sigmoid. */
static inline float tp_cpu_silu(float x) { return (float)((double)x / (1.0 + exp(-(double)x))); }

/* silu' = s (1 + x (1 - s)), s = sigmoid(x), in double; for x << 0,
 * e^-x = inf gives s = 0 and the limit 0 rather than NaN */
static inline double tp_cpu_silu_grad(double x)
{
    double s = 1.0 / (1.0 + exp(-x));
    return s * (1.0 + x * (1.0 - s));
}

#endif /* TPRUN_CPU_SILU_H */
