/* swiglu.h: the CPU backend's fused SwiGLU kernels (swiglu.c), which
 * backend_cpu.c puts in its table. Signatures and semantics are the
 * tp_backend entries of the same name (backend.h). */
#ifndef TPRUN_CPU_SWIGLU_H
#define TPRUN_CPU_SWIGLU_H

#include <stdint.h>

void tp_cpu_silu_mul(float *out, const float *a, const float *b, int64_t n);
void tp_cpu_silu_mul_grad(float *da, float *db, const float *a, const float *b, const float *dy, int64_t n);

#endif /* TPRUN_CPU_SWIGLU_H */
