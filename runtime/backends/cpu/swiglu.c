/* swiglu.c: silu(a) * b in one pass over memory, and its gradient.
 *
 * A SwiGLU MLP's act(gate) * up, which tpcc -O1 fuses from a silu and a
 * mul. Each element is computed as the two unfused kernels compute it
 * (vec.h's SiLU, then a float product; the gradient of a through the
 * float dy * b and vec.h's silu_grad), so the fused schedule's numbers are
 * the unfused one's bit for bit. Elements go in blocks through buffers on
 * the stack: a block is read whole before any of it is written, so an
 * output may be exactly one of the inputs. Parts are runs of elements, so
 * any --threads gives the same bits. */
#include "runtime/backends/cpu/swiglu.h"

#include "runtime/backends/cpu/pool.h"
#include "runtime/backends/cpu/vec.h"

/* elements per part at least */
#define ELEMENT_GRAIN 4096
/* elements per block: small enough for the stack, long enough for the
 * vector loops */
#define BLOCK 512

typedef struct swiglu_args {
    float *out, *da, *db;
    const float *a, *b, *dy;
} swiglu_args;

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

static void silu_mul_part(void *ctx, int64_t i0, int64_t i1)
{
    const swiglu_args *p = ctx;
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    float s[BLOCK];
    for (int64_t j0 = i0; j0 < i1; j0 += BLOCK) {
        const int64_t n = min64(BLOCK, i1 - j0);
        vec->silu(s, p->a + j0, n);
        for (int64_t j = 0; j < n; j++)
            s[j] *= p->b[j0 + j];
        for (int64_t j = 0; j < n; j++)
            p->out[j0 + j] = s[j];
    }
}

void tp_cpu_silu_mul(float *out, const float *a, const float *b, int64_t n)
{
    swiglu_args p = {.out = out, .a = a, .b = b};
    tp_cpu_parallel(n, ELEMENT_GRAIN, silu_mul_part, &p);
}

/* da = silu'(a) * (dy * b), db = dy * silu(a); either may be NULL */
static void silu_mul_grad_part(void *ctx, int64_t i0, int64_t i1)
{
    const swiglu_args *p = ctx;
    const tp_cpu_vec *vec = tp_cpu_vec_host();
    float da[BLOCK], db[BLOCK];
    for (int64_t j0 = i0; j0 < i1; j0 += BLOCK) {
        const int64_t n = min64(BLOCK, i1 - j0);
        if (p->da) {
            for (int64_t j = 0; j < n; j++)
                da[j] = p->dy[j0 + j] * p->b[j0 + j];
            vec->silu_grad(da, p->a + j0, da, n);
        }
        if (p->db) {
            vec->silu(db, p->a + j0, n);
            for (int64_t j = 0; j < n; j++)
                db[j] *= p->dy[j0 + j];
        }
        for (int64_t j = 0; p->da && j < n; j++)
            p->da[j0 + j] = da[j];
        for (int64_t j = 0; p->db && j < n; j++)
            p->db[j0 + j] = db[j];
    }
}

void tp_cpu_silu_mul_grad(float *da, float *db, const float *a, const float *b, const float *dy, int64_t n)
{
    if (!da && !db)
        return;
    swiglu_args p = {.da = da, .db = db, .a = a, .b = b, .dy = dy};
    tp_cpu_parallel(n, ELEMENT_GRAIN, silu_mul_grad_part, &p);
}
