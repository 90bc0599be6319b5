/* cpu_training.h: the CPU backend's training kernels — the backward of
 * each forward kernel (backward.c, attention_grad.c) and the optimizer
 * (optimizer.c) — which backend_cpu.c puts in its table. Signatures and
 * semantics are the tp_backend entries of the same name (backend.h). */
#ifndef TPRUN_CPU_TRAINING_H
#define TPRUN_CPU_TRAINING_H

#include "runtime/backends/backend.h"

void tp_cpu_matmul_tn(float *out, const float *a, const float *b, int64_t m, int64_t n, int64_t k);
void tp_cpu_sum_rows(float *out, const float *x, int64_t m, int64_t n, float scale);
void tp_cpu_rmsnorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps,
                       bool unit_offset, const float *add);
void tp_cpu_rmsnorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps);
void tp_cpu_layernorm_dx(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps);
void tp_cpu_layernorm_dw(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps);
void tp_cpu_attention_grad(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                           const float *dy, const float *o, const float *lse, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d, double scale,
                           double softcap, const int32_t *segments);
void tp_cpu_unary_grad(tp_unary op, float *dx, const float *x, const float *dy, int64_t n);
void tp_cpu_softcap_grad(float *dx, const float *x, const float *dy, int64_t n, float cap);
void tp_cpu_embedding_grad(float *dw, const int32_t *ids, const float *dy, int64_t ntok, int64_t rows, int64_t dim,
                           int64_t vocab_start, bool masked);
void tp_cpu_narrow_grad(float *out, const float *dy, const int64_t *shape, int rank, int dim, int64_t start,
                        int64_t length);
void tp_cpu_cross_entropy_grad(float *dlogits, const float *logits, const int32_t *labels, int64_t b, int64_t s,
                               int64_t v, int64_t vocab, tp_ce_rule rule);
void tp_cpu_ce_grad(float *dlogits, const float *logits, const float *max, const float *sumexp,
                    const int32_t *labels, int64_t b, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab,
                    tp_ce_rule rule);
void tp_cpu_ones(float *out, int64_t n);
void tp_cpu_adamw(const tp_adamw_part *parts, int nparts, float grad_scale, const tp_adamw_step *step);
void tp_cpu_accumulate_grad(float *acc, float *g, int64_t n, tp_grad_accum phase);
double tp_cpu_sum_squares(const tp_run *runs, int nruns);

#endif /* TPRUN_CPU_TRAINING_H */
