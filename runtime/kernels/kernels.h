/* kernels.h: the CUDA kernels' launchers, one per op family
 * (runtime/kernels/<family>.cu). The backend (runtime/backends/cuda/backend_cuda.c)
 * calls these on its compute stream.
 *
 * Every launcher takes device pointers and the schedule's sizes, checks
 * its preconditions, launches through TP_LAUNCH (kernels/launch.h) on
 * `stream` and checks the launch. Storage is T = float or bfloat16 (the
 * schedule's dtype: TP_KERNEL_F32 / TP_KERNEL_BF16); accumulation is always
 * fp32. Semantics are exactly those of the CPU backend (runtime/backends/backend.h),
 * which is the reference every kernel is tested against.
 *
 * The same sources compile for the host under the test-only emulation
 * header (tests/runtime/cuda_emu/cuda_emu.h), so the kernels run in CI without a
 * GPU. */
#ifndef TPRUN_KERNELS_H
#define TPRUN_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backends/optim_parts.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tp_kernel_dtype { TP_KERNEL_F32, TP_KERNEL_BF16 } tp_kernel_dtype;

/* An opaque cudaStream_t (void* so C code needs no CUDA headers). */
typedef void *tp_stream;

/* embedding.cu */
void tp_k_embedding(tp_stream s, tp_kernel_dtype t, void *out, const int32_t *ids, int64_t ntok, const void *w,
                    int64_t rows, int64_t dim, int64_t vocab_start, bool masked);
/* norms.cu */
void tp_k_rmsnorm(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const void *w, int64_t m, int64_t n,
                  float eps, bool unit_offset);
void tp_k_add_rmsnorm(tp_stream st, tp_kernel_dtype t, void *s, void *out, const void *a, const void *b, const void *w,
                      int64_t m, int64_t n, float eps, bool unit_offset);
void tp_k_layernorm(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const void *w, const void *b, int64_t m,
                    int64_t n, float eps);
/* rope.cu: the first `rotary` dims of each head rotate, the rest pass
 * through; inv_freq, rotary/2 doubles in host memory (<= 256), travels
 * with the launch; cos and sin are multiplied by scale (yarn) */
void tp_k_rope(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t b, int64_t seq, int64_t h, int64_t d,
               int64_t rotary, int64_t pos_offset, const double *inv_freq, double scale, const int32_t *pos);
/* rope's cos and sin, as tp_k_rope computes them, for attention to rotate
 * q and k as it reads them: (cos, sin) float pairs [b, seq, rotary / 2]
 * at the positions pos, or [seq, rotary / 2] from pos_offset without;
 * table (device) 16-byte aligned */
void tp_k_rope_table(tp_stream s, float *table, int64_t b, int64_t seq, int64_t rotary, int64_t pos_offset,
                     const double *inv_freq, double scale, const int32_t *pos);
/* The rotation attention and its gradient apply to q and k as they read
 * them (tp_k_rope's of the same arguments), and the gradient's inverse to
 * dq and dk as it stores them: bf16, where tp_cuda_rope_in_attention
 * (sched/workspace.h) holds */
typedef struct tp_k_rope_in {
    const float *table; /* tp_k_rope_table's */
    int64_t rotary;
    bool by_batch; /* the table's positions are pos's, a row per batch row */
} tp_k_rope_in;
/* attention.cu: causal, GQA, scores times scale, capped when softcap > 0;
 * lse (fp32 [b, h, seq]) and segments (device, [b, seq]), either NULL, as
 * backend.h's attention; of rope(q) and rope(k) with rope (NULL: none) */
void tp_k_attention(tp_stream s, tp_kernel_dtype t, void *out, float *lse, const void *q, const void *k, const void *v,
                    int64_t b, int64_t seq, int64_t h, int64_t g, int64_t d, float scale, float softcap,
                    const int32_t *segments, const tp_k_rope_in *rope);
/* elementwise.cu: op 0 silu, 1 gelu (tanh), 2 relu, 3 gelu (erf); binary 0 add, 1 mul (b broadcasts) */
void tp_k_unary(tp_stream s, tp_kernel_dtype t, int op, void *out, const void *x, int64_t n);
void tp_k_binary(tp_stream s, tp_kernel_dtype t, int op, void *out, const void *a, int64_t n, const void *b, int64_t nb);
void tp_k_scale(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t n, float scale);
void tp_k_softcap(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t n, float cap);
void tp_k_bias_add(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const void *b, int64_t m, int64_t n,
                   float scale);
/* h = x + scale * b as tp_k_bias_add, out = op(h) as tp_k_unary of the
 * stored h; either output may be NULL, and each may be exactly x */
void tp_k_bias_unary(tp_stream s, tp_kernel_dtype t, int op, void *h, void *out, const void *x, const void *b,
                     int64_t m, int64_t n, float scale);
/* swiglu.cu: out = silu(a) * b; out may be exactly a or b */
void tp_k_silu_mul(tp_stream s, tp_kernel_dtype t, void *out, const void *a, const void *b, int64_t n);
/* reshard.cu: chunk copies for R -> S and for collectives along inner dims */
void tp_k_slice(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const int64_t *shape, int rank, int dim,
                int index, int parts);
void tp_k_narrow(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const int64_t *shape, int rank, int dim,
                 int64_t start, int64_t length);
void tp_k_split_blocks(tp_stream s, tp_kernel_dtype t, void *out, const void *x, const int64_t *shape, int rank, int dim,
                       int parts);
void tp_k_join_blocks(tp_stream s, tp_kernel_dtype t, void *out, const void *blocks, const int64_t *shape, int rank,
                      int dim, int parts);
void tp_k_positions(tp_stream s, int32_t *out, int64_t b, int64_t seq, int64_t pos_offset, const int32_t *segments);
/* cross_entropy.cu: loss outputs are float32 scalars / per-token floats;
 * shift and divisor as tp_ce_rule (runtime/backends/backend.h) */
void tp_k_cross_entropy(tp_stream s, tp_kernel_dtype t, float *loss, const void *logits, const int32_t *labels, int64_t b,
                        int64_t seq, int64_t v, int64_t vocab, int shift, float divisor);
void tp_k_ce_max(tp_stream s, tp_kernel_dtype t, float *out, const void *logits, int64_t rows, int64_t v,
                 int64_t vocab_start, int64_t vocab);
void tp_k_ce_sumexp(tp_stream s, tp_kernel_dtype t, float *out, const void *logits, const float *max, int64_t rows,
                    int64_t v, int64_t vocab_start, int64_t vocab);
void tp_k_ce_target(tp_stream s, tp_kernel_dtype t, float *out, const void *logits, const int32_t *labels, int64_t b,
                    int64_t seq, int64_t v, int64_t vocab_start, int shift);
void tp_k_ce_loss(tp_stream s, float *loss, const float *sumexp, const float *max, const float *target,
                  const int32_t *labels, int64_t b, int64_t seq, int shift, float divisor);

/* ---- training: the gradients of the kernels above and the optimizer. A
 * `scratch` argument is device memory the launcher's kernels pass data
 * through, of the size given; the caller owns it. */

/* norms_grad.cu: scratch tp_cuda_norm_grad_scratch floats (sched/workspace.h) */
/* rmsnorm_dx with add (else NULL): dx = add + the gradient stored in the
 * dtype, added in fp32 and stored again, as an add op after it would */
void tp_k_rmsnorm_dx(tp_stream s, tp_kernel_dtype t, void *dx, const void *x, const void *dy, const void *w, int64_t m,
                     int64_t n, float eps, bool unit_offset, const void *add);
void tp_k_rmsnorm_dw(tp_stream s, tp_kernel_dtype t, void *dw, const void *x, const void *dy, float *scratch, int64_t m,
                     int64_t n, float eps);
void tp_k_layernorm_dx(tp_stream s, tp_kernel_dtype t, void *dx, const void *x, const void *dy, const void *w, int64_t m,
                       int64_t n, float eps);
void tp_k_layernorm_dw(tp_stream s, tp_kernel_dtype t, void *dw, const void *x, const void *dy, float *scratch,
                       int64_t m, int64_t n, float eps);
void tp_k_sum_rows(tp_stream s, tp_kernel_dtype t, void *out, const void *x, int64_t m, int64_t n, float scale);
/* attention_grad.cu: dq, dk and dv in one launch, each NULL where it is not wanted (at least
 * one is), from the forward's output o and log-sum-exp lse; scratch
 * tp_cuda_attention_grad_scratch floats (sched/workspace.h); with rope, q
 * and k before the rotation, dq and dk of them */
void tp_k_attention_grad(tp_stream s, tp_kernel_dtype t, void *dq, void *dk, void *dv, const void *q, const void *k,
                         const void *v, const void *dy, const void *o, const float *lse, float *scratch, int64_t b,
                         int64_t seq, int64_t h, int64_t g, int64_t d, float scale, float softcap,
                         const int32_t *segments, const tp_k_rope_in *rope);
/* elementwise_grad.cu: op as tp_k_unary */
void tp_k_unary_grad(tp_stream s, tp_kernel_dtype t, int op, void *dx, const void *x, const void *dy, int64_t n);
/* swiglu.cu: da = dy * b * silu'(a), db = dy * silu(a); NULL: not computed */
void tp_k_silu_mul_grad(tp_stream s, tp_kernel_dtype t, void *da, void *db, const void *a, const void *b,
                        const void *dy, int64_t n);
void tp_k_softcap_grad(tp_stream s, tp_kernel_dtype t, void *dx, const void *x, const void *dy, int64_t n, float cap);
/* embedding_grad.cu */
void tp_k_embedding_grad(tp_stream s, tp_kernel_dtype t, void *dw, const int32_t *ids, const void *dy, int64_t ntok,
                         int64_t rows, int64_t dim, int64_t vocab_start, bool masked);
/* reshard.cu */
void tp_k_narrow_grad(tp_stream s, tp_kernel_dtype t, void *out, const void *dy, const int64_t *shape, int rank, int dim,
                      int64_t start, int64_t length);
/* cross_entropy_grad.cu: max and sumexp are float32 */
void tp_k_cross_entropy_grad(tp_stream s, tp_kernel_dtype t, void *dlogits, const void *logits, const int32_t *labels,
                             int64_t b, int64_t seq, int64_t v, int64_t vocab, int shift, float divisor);
void tp_k_ce_grad(tp_stream s, tp_kernel_dtype t, void *dlogits, const void *logits, const float *max,
                  const float *sumexp, const int32_t *labels, int64_t b, int64_t seq, int64_t v, int64_t vocab_start,
                  int64_t vocab, int shift, float divisor);
/* elementwise_grad.cu: the seed gradient of a summed loss */
void tp_k_ones(tp_stream s, tp_kernel_dtype t, void *out, int64_t n);
/* optimizer.cu: AdamW over many parts in one pass (a launch per
 * TP_K_ADAMW_PARTS of them; m and v fp32, w and g in the storage type):
 * each g is multiplied by grad_scale, and the part's master takes the
 * step, w becoming the master rounded to the storage type, or without a
 * master (fp32 only) w takes it in place */
#define TP_K_ADAMW_PARTS 32
void tp_k_adamw_parts(tp_stream s, tp_kernel_dtype t, const tp_adamw_part *parts, int nparts, float grad_scale,
                      double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step);
/* The sum of the squares of every element of the runs, in double, written
 * to *out (device memory), in an order that depends on the runs' sizes
 * only. */
void tp_k_sum_squares(tp_stream s, tp_kernel_dtype t, double *out, const tp_run *runs, int nruns);
/* phase: tp_grad_accum (runtime/backends/backend.h) as an int: 0 acc = g,
 * 1 acc += g, 2 g = acc + g; acc fp32, g in the storage type */
void tp_k_accumulate_grad(tp_stream s, tp_kernel_dtype t, float *acc, void *g, int64_t n, int phase);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_KERNELS_H */
