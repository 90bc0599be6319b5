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
 * with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step, and g the gradient
 * after clipping (its factor is applied here, as backend.h's adamw
 * says). One call takes every part of a rank's weights, each part as
 * torch takes one tensor. The tests compare three steps with torch's own
 * numbers. */
#include "runtime/backends/cpu/cpu_training.h"
#include "runtime/backends/cpu/pool.h"

#include <assert.h>
#include <math.h>

/* torch's lerp (start + weight (end - start)) as its vectorised kernel
 * computes it: one fused multiply-add, from whichever end is nearer, so
 * m's update is rounded once, as torch's is. */
static float lerp(float start, float end, float weight)
{
    return fabsf(weight) < 0.5f ? fmaf(weight, end - start, start) : fmaf(weight - 1.0f, end - start, end);
}

/* One part's step: its buffers, and the scalars torch computes once per
 * tensor. */
typedef struct adamw_args {
    float *w, *m, *v;
    float *copy;           /* where w is the part's master, its stored weights, set to w; else NULL */
    const float *g;
    float grad_scale, decay, m_weight, beta2, v_weight, bc2_sqrt, eps, neg_step_size;
    bool decays;
} adamw_args;

/* elements per part at least */
#define ADAMW_GRAIN 4096

static void adamw_range(void *ctx, int64_t i0, int64_t i1)
{
    const adamw_args *a = ctx;
    for (int64_t i = i0; i < i1; i++) {
        float wi = a->w[i];
        if (a->decays)
            wi *= a->decay;
        /* rounded to float, as clip_grad_norm_'s g.mul_(coef) leaves it;
         * times 1 without clipping, exactly g */
        const float gi = a->g[i] * a->grad_scale;
        const float mi = lerp(a->m[i], gi, a->m_weight);
        const float vi = a->v[i] * a->beta2 + a->v_weight * gi * gi;
        const float denom = sqrtf(vi) / a->bc2_sqrt + a->eps;
        a->w[i] = wi + a->neg_step_size * mi / denom;
        a->m[i] = mi;
        a->v[i] = vi;
        if (a->copy)
            a->copy[i] = a->w[i];
    }
}

/* The backend stores fp32: a part with a master updates it and copies it
 * to w unchanged; one without updates w. */
void tp_cpu_adamw(const tp_adamw_part *parts, int nparts, float grad_scale, const tp_adamw_step *step)
{
    assert(step->step >= 1 && "AdamW counts steps from 1");
    const double bc1 = 1.0 - pow(step->beta1, (double)step->step);
    const double bc2 = 1.0 - pow(step->beta2, (double)step->step);
    adamw_args a = {
        .grad_scale = grad_scale,
        .decay = (float)(1.0 - step->lr * step->weight_decay),
        .m_weight = (float)(1.0 - step->beta1),
        .beta2 = (float)step->beta2, .v_weight = (float)(1.0 - step->beta2),
        .bc2_sqrt = (float)sqrt(bc2), .eps = (float)step->eps,
        .neg_step_size = (float)(-(step->lr / bc1)),
    };
    for (int p = 0; p < nparts; p++) {
        const tp_adamw_part *q = &parts[p];
        a.w = q->master ? q->master : q->w;
        a.copy = q->master ? q->w : NULL;
        a.m = q->m;
        a.v = q->v;
        a.g = q->g;
        a.decays = q->decay && step->weight_decay != 0.0;
        tp_cpu_parallel(q->n, ADAMW_GRAIN, adamw_range, &a);
    }
}

/* fp32 storage: the sums are the fp32 sums of the micro-batches'
 * gradients in their order. */
void tp_cpu_accumulate_grad(float *acc, float *g, int64_t n, tp_grad_accum phase)
{
    for (int64_t i = 0; i < n; i++) {
        if (phase == TP_ACCUM_FIRST)
            acc[i] = g[i];
        else if (phase == TP_ACCUM_ADD)
            acc[i] += g[i];
        else
            g[i] += acc[i];
    }
}

/* The squared L2 norm of the gradients of the runs: the global norm that
 * clipping divides by, summed over ranks by the caller. */
double tp_cpu_sum_squares(const tp_run *runs, int nruns)
{
    double acc = 0.0;
    for (int r = 0; r < nruns; r++)
        for (int64_t i = 0; i < runs[r].n; i++)
            acc += (double)runs[r].x[i] * runs[r].x[i];
    return acc;
}
