/* optimizer.c: the CPU backend's optimizer kernels: AdamW's update and the
 * sum of squares that global gradient-norm clipping adds up.
 *
 * AdamW follows torch.optim.AdamW on a float32 tensor on the CPU (its
 * single-tensor path, _single_tensor_adam with decoupled weight decay)
 * operation by operation: the scalars (bias corrections, step size) are
 * Python floats, i.e. double, and each is rounded to float where torch
 * passes it to a float tensor op; the per-element arithmetic is float, in
 * torch's order:
 *   w.mul_(1 - lr wd)                      (skipped when wd == 0)
 *   m.lerp_(g, 1 - beta1)                  m + (1 - beta1) (g - m), fused
 *   v.mul_(beta2).addcmul_(g, g, 1 - beta2)
 *   denom = (v.sqrt() / sqrt(bc2)).add_(eps)
 *   w.addcdiv_(m, denom, -lr / bc1)        w + (-lr / bc1) m / denom
 * with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step. The tests compare
 * three steps with torch's own numbers. */
#include "runtime/backends/cpu/cpu_training.h"

#include <assert.h>
#include <math.h>

/* torch's lerp (start + weight (end - start)) as its vectorised kernel
 * computes it: one fused multiply-add, from whichever end is nearer, so
 * m's update is rounded once, as torch's is. */
static float lerp(float start, float end, float weight)
{
    return fabsf(weight) < 0.5f ? fmaf(weight, end - start, start) : fmaf(weight - 1.0f, end - start, end);
}

void tp_cpu_adamw(float *w, const float *g, float *m, float *v, int64_t n, const tp_adamw_step *step)
{
    assert(step->step >= 1 && "AdamW counts steps from 1");
    const double bc1 = 1.0 - pow(step->beta1, (double)step->step);
    const double bc2 = 1.0 - pow(step->beta2, (double)step->step);
    const float decay = (float)(1.0 - step->lr * step->weight_decay);
    const float m_weight = (float)(1.0 - step->beta1);
    const float beta2 = (float)step->beta2, v_weight = (float)(1.0 - step->beta2);
    const float bc2_sqrt = (float)sqrt(bc2), eps = (float)step->eps;
    const float neg_step_size = (float)(-(step->lr / bc1));
    const bool decays = step->weight_decay != 0.0;
    for (int64_t i = 0; i < n; i++) {
        float wi = w[i];
        if (decays)
            wi *= decay;
        const float gi = g[i];
        const float mi = lerp(m[i], gi, m_weight);
        const float vi = v[i] * beta2 + v_weight * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        w[i] = wi + neg_step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

/* The squared L2 norm of a gradient: one term of the global norm that
 * clipping divides by, summed over tensors and ranks by the caller. */
double tp_cpu_sum_squares(const float *x, int64_t n)
{
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++)
        acc += (double)x[i] * x[i];
    return acc;
}
