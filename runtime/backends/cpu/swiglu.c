/* swiglu.c: silu(a) * b in one pass over memory, and its gradient.
 *
 * A SwiGLU MLP's act(gate) * up, which tpcc -O1 fuses from a silu and a
 * mul. Each element is computed as the two unfused kernels compute it
 * (silu.h's SiLU rounded to float, then a float product; the gradient of
 * a through the float dy * b), so the fused schedule's numbers are the
 * unfused one's bit for bit. Every element is read before it is written,
 * by the part that writes it: an output may be exactly one of the inputs.
 * Parts are runs of elements, so any --threads gives the same bits. */
#include "runtime/backends/cpu/swiglu.h"

#include "runtime/backends/cpu/pool.h"
#include "runtime/backends/cpu/silu.h"

/* elements per part at least */
#define ELEMENT_GRAIN 4096

typedef struct swiglu_args {
    float *out, *da, *db;
    const float *a, *b, *dy;
} swiglu_args;

static void silu_mul_part(void *ctx, int64_t i0, int64_t i1)
{
    const swiglu_args *p = ctx;
    for (int64_t i = i0; i < i1; i++)
        p->out[i] = tp_cpu_silu(p->a[i]) * p->b[i];
}

void tp_cpu_silu_mul(float *out, const float *a, const float *b, int64_t n)
{
    swiglu_args p = {.out = out, .a = a, .b = b};
    tp_cpu_parallel(n, ELEMENT_GRAIN, silu_mul_part, &p);
}

/* da = dy * b * silu'(a), db = dy * silu(a); either may be NULL */
static void silu_mul_grad_part(void *ctx, int64_t i0, int64_t i1)
{
    const swiglu_args *p = ctx;
    for (int64_t i = i0; i < i1; i++) {
        const float a = p->a[i], b = p->b[i], dy = p->dy[i];
        if (p->da)
            p->da[i] = (float)((double)(dy * b) * tp_cpu_silu_grad(a));
        if (p->db)
            p->db[i] = dy * tp_cpu_silu(a);
    }
}

void tp_cpu_silu_mul_grad(float *da, float *db, const float *a, const float *b, const float *dy, int64_t n)
{
    if (!da && !db)
        return;
    swiglu_args p = {.da = da, .db = db, .a = a, .b = b, .dy = dy};
    tp_cpu_parallel(n, ELEMENT_GRAIN, silu_mul_grad_part, &p);
}
