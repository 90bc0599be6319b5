/* backend.h: the table of kernels a backend provides to the executor.
 *
 * One table per backend (CPU: OpenBLAS + C; CUDA: kernels + cuBLAS). The
 * executor walks the schedule and calls these with pointers into the
 * activation arena and the weight region; every shape comes from the
 * schedule. Tensors are row-major and contiguous. Semantics follow the op
 * kinds of sched/ops.def and docs/schedule.md.
 *
 * Which ops a backend runs is its table: each op kind names the members
 * it calls (sched/ops.def's kernels column), and a member a backend leaves
 * NULL is a kernel it lacks. tprun refuses a schedule with an op whose
 * kernel the chosen backend lacks before anything runs
 * (runtime/exec/kernels_check.h).
 *
 * Element types. A backend stores the floating-point tensors of a schedule
 * in one dtype, `dtype`: TP_F32 (the CPU backend; the zero value, so a
 * table that leaves it out is fp32), or TP_BF16 (the CUDA backend of a bf16
 * schedule, accumulating in fp32). The `float *` parameters below point to
 * tensors in that storage dtype: a bf16 backend passes them on to its
 * kernels and never dereferences them as float. Three kinds of operand
 * keep their own type whatever `dtype` is: token ids, labels and positions
 * (int32), and the loss with its per-token pieces — the outputs of
 * cross_entropy and ce_*, and every input of ce_loss — which are float32
 * (the compiler marks those buffers f32 in a bf16 schedule). The executor
 * converts between float32 host data and the storage dtype
 * (tr_exec_write_buf, tr_exec_read_buf, tr_exec_write_weights,
 * tr_weights_load), so to_device
 * and to_host move bytes unchanged. */
#ifndef TPRUN_BACKEND_H
#define TPRUN_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "runtime/backends/backend_limits.h"
#include "runtime/backends/optim_parts.h"
#include "sched/ops.h"     /* tp_dtype */

typedef enum tp_unary { TP_UNARY_SILU, TP_UNARY_GELU_TANH, TP_UNARY_RELU, TP_UNARY_GELU_ERF } tp_unary;
typedef enum tp_binary { TP_BINARY_ADD, TP_BINARY_MUL } tp_binary;

/* One AdamW step as torch.optim.AdamW takes it (decoupled weight decay,
 * bias-corrected moments; step counts from 1). */
typedef struct tp_adamw_step {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
} tp_adamw_step;

/* How a cross-entropy reads its labels and what its mean divides by.
 * shift 1: Hugging Face's causal-LM loss, row (b, t) against
 * labels[b, t+1], the last position of each sequence without one; shift 0:
 * the labels are already the next tokens (torchtitan's trainer, PyTorch's
 * CrossEntropyLoss), row (b, t) against labels[b, t]. Labels equal to -100
 * are ignored either way. divisor 0: the loss is the mean over the call's
 * labelled rows; > 0: their sum over `divisor`, which a training step sets
 * so that the mean is over the labelled tokens of the whole global batch
 * (every replica and micro-batch), not a mean of per-rank means. */
typedef struct tp_ce_rule {
    int shift;
    double divisor;
} tp_ce_rule;

/* Gradient accumulation over the micro-batches of one optimizer step, in
 * fp32 whatever the storage dtype: the first micro-batch's gradient g is
 * copied into acc, each later one but the last added to it, and the last
 * one's becomes acc + g, rounded once to the storage dtype, for the
 * optimizer to read where it always does. */
typedef enum tp_grad_accum { TP_ACCUM_FIRST, TP_ACCUM_ADD, TP_ACCUM_LAST } tp_grad_accum;

/* The rotation rope_attention applies to q and k (sched/ops.def): the
 * rope member's arguments. */
typedef struct tp_rope_args {
    int64_t rotary;            /* the leading dims of each head that rotate: even, at most d */
    int64_t pos_offset;        /* token j's position is pos_offset + j */
    const double *inv_freq;    /* rotary / 2 frequencies, host memory */
    const double *inv_freq_back; /* their negations: rope's inverse, which rotates dq and dk back */
    double scale;              /* cos and sin are multiplied by it */
    const int32_t *pos;        /* [b, s] positions by document (device memory), or NULL */
} tp_rope_args;

typedef struct tp_backend {
    const char *name;
    tp_dtype dtype;    /* storage of float tensors: TP_F32 (zero) or TP_BF16 */

    /* memory: the arena and weights live where the kernels read them */
    void *(*alloc)(size_t bytes);                     /* zeroed; NULL on failure */
    void (*release)(void *p);
    /* to_device and to_host return once src may be reused and dst read */
    void (*to_device)(void *dst, const void *src, size_t bytes);
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);   /* within backend memory */
    /* alloc's memory is host memory the CPU reads and writes in place (the
     * CPU backend): weights are read straight into it, and the executor
     * pre-faults its arena and staging at start-up */
    bool host_memory;
    /* (optional) host memory to_device copies from fastest (CUDA: pinned),
     * for a loader staging through a bounded buffer; NULL: malloc */
    void *(*alloc_staging)(size_t bytes);
    void (*release_staging)(void *p);
    /* threads a kernel may use (BLAS); (optional) */
    void (*set_threads)(int threads);
    /* (optional) a backend that queues work asynchronously (CUDA): wait
     * until everything queued is done. The executor calls it at the end of
     * a run, so its time is the forward's, and after every op when it
     * times ops (profile, trace). */
    void (*synchronize)(void);
    /* (optional) the op about to run, so a fatal error inside the backend
     * can name it (schedule index, op kind, module, plan entry or NULL) */
    void (*begin_op)(int index, const char *kind, const char *module, const char *entry);
    /* (optional) the largest sizes its kernels run (backend_limits.h); NULL: none */
    const tp_backend_limits *limits;

    /* out[t, :] = w[ids[t] - vocab_start, :] for t < ntok; rows outside
     * [vocab_start, vocab_start + rows) give zeros when masked; unmasked
     * lookups only see ids tprun checked against the vocabulary. */
    void (*embedding)(float *out, const int32_t *ids, int64_t ntok, const float *w, int64_t rows, int64_t dim,
                      int64_t vocab_start, bool masked);
    /* out[m, n] = x[m, k] . w[n, k]^T   (nn.Linear) */
    void (*matmul)(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k);
    /* out[m,n] = x[m,k] . w[k,n]: transformers' Conv1D, its weight [in, out] */
    void (*conv1d)(float *out, const float *x, const float *w, int64_t m, int64_t n, int64_t k);
    /* out[i, j] = x[i, j] + scale * b[j]   (out may equal x) */
    void (*bias_add)(float *out, const float *x, const float *b, int64_t m, int64_t n, float scale);
    /* h = x + scale * b (as bias_add), out = op(h) (as unary) of the stored
     * h: a bias and the activation reading it in one pass; either output
     * may be NULL (not wanted), and each may be exactly x */
    void (*bias_unary)(tp_unary op, float *h, float *out, const float *x, const float *b, int64_t m, int64_t n,
                       float scale);
    /* out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w, or * (1 + w) with unit_offset */
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t m, int64_t n, float eps, bool unit_offset);
    /* s = a + b, out = rmsnorm(s) as rmsnorm computes it from the stored s;
     * either output may be NULL (not wanted), and each may be exactly an
     * input (rows are read before they are written) */
    void (*add_rmsnorm)(float *s, float *out, const float *a, const float *b, const float *w, int64_t m, int64_t n,
                        float eps, bool unit_offset);
    /* out[i, :] = (x - mean) / sqrt(var + eps) * w + b   (b may be NULL) */
    void (*layernorm)(float *out, const float *x, const float *w, const float *b, int64_t m, int64_t n, float eps);
    /* Hugging Face Llama RoPE (rotate_half) on x[b, s, h, d], position of
     * token j is pos_offset + j, frequencies inv_freq[0 .. d/2) (host
     * memory; sched/rope.h computes them from theta and the scaling),
     * cos and sin multiplied by scale (yarn's attention_factor, else 1);
     * with pos (device memory, [b, s], each below pos_offset + s), token
     * j's position is pos[j] instead (positions by document) */
    /* the first `rotary` of each head's d rotate (partial rotary), the rest pass through */
    void (*rope)(float *out, const float *x, int64_t b, int64_t s, int64_t h, int64_t d, int64_t rotary,
                 int64_t pos_offset, const double *inv_freq, double scale, const int32_t *pos);
    /* causal softmax(q k^T * scale) v; q, out [b, s, h, d]; k, v [b, s, g, d];
     * with rope (NULL: none), of rope(q) and rope(k) as the rope member
     * computes them (tp_rope_args), rotated as they are read;
     * query head i reads kv head i / (h / g); softcap > 0 caps each score
     * as softcap * tanh(score / softcap); with segments ([b, s], NULL for
     * none), query t sees key u <= t only where segments[u] == segments[t]
     * >= 0, and a query that sees no key (padding) is 0; the documents are
     * numbered in order along each row (-1 anywhere), which lets a kernel
     * skip the keys before a query's document; lse (fp32 [b, h, s], in
     * every dtype; NULL: not wanted) gets each query's log-sum-exp of its
     * scores, mx + log(sum exp(score - mx)) over the keys it sees, +inf
     * for one that sees none, for the gradient */
    void (*attention)(float *out, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t s,
                      int64_t h, int64_t g, int64_t d, double scale, double softcap, const int32_t *segments,
                      const tp_rope_args *rope);
    /* out = cap * tanh(x / cap) */
    void (*softcap)(float *out, const float *x, int64_t n, float cap);
    /* silu(x) = x * sigmoid(x); gelu: the tanh approximation (GPT-2's gelu_new) or the exact
     * 0.5 x (1 + erf(x / sqrt(2))) */
    void (*unary)(tp_unary op, float *out, const float *x, int64_t n);
    /* out[i] = a[i] op b[i % nb]  (b broadcasts over leading dims) */
    void (*binary)(tp_binary op, float *out, const float *a, int64_t n, const float *b, int64_t nb);
    /* out[i] = silu(a[i]) * b[i] for i < n (a SwiGLU MLP's act(gate) * up);
     * out may be exactly a or b */
    void (*silu_mul)(float *out, const float *a, const float *b, int64_t n);
    void (*scale)(float *out, const float *x, int64_t n, float s);
    /* out = chunk `index` of `parts` of x (shape[rank]) along dim */
    void (*slice)(float *out, const float *x, const int64_t *shape, int rank, int dim, int index, int parts);
    /* out = x.narrow(dim, start, length) (x's shape[rank]) */
    void (*narrow)(float *out, const float *x, const int64_t *shape, int rank, int dim, int64_t start,
                   int64_t length);
    /* Reshards: the `parts` chunks of x (shape[rank]) along dim, laid out one
     * after another, and the inverse, from such blocks back to one tensor
     * whose dim is parts times the block's (out's shape given). Collectives
     * move whole blocks, so every gather or scatter along an inner dim goes
     * through these. */
    void (*split_blocks)(float *out, const float *x, const int64_t *shape, int rank, int dim, int parts);
    void (*join_blocks)(float *out, const float *blocks, const int64_t *shape, int rank, int dim, int parts);
    /* out[i, j] = pos_offset + j for a [b, s] tensor; with segments ([b, s],
     * NULL for none), pos_offset + j - the first j' of row i with
     * segments[i, j'] == segments[i, j] (positions restarting at each document) */
    void (*positions)(int32_t *out, int64_t b, int64_t s, int64_t pos_offset, const int32_t *segments);
    /* the cross-entropy loss (rule: tp_ce_rule): -log softmax(logits[b, t, :vocab])
     * of each labelled row's label, logits [b, s, v] with v >= vocab (padded
     * columns ignored) */
    void (*cross_entropy)(float *loss, const float *logits, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                          int64_t vocab, tp_ce_rule rule);
    /* vocab-parallel pieces over local columns [vocab_start, vocab_start + v);
     * columns at or beyond `vocab` (padding) are ignored */
    void (*ce_max)(float *out, const float *logits, int64_t rows, int64_t v, int64_t vocab_start, int64_t vocab);
    void (*ce_sumexp)(float *out, const float *logits, const float *max, int64_t rows, int64_t v,
                      int64_t vocab_start, int64_t vocab);
    /* out[b, t] = logits[b, t, label(b, t) - vocab_start] when that column is
     * local, else 0 (a row without a label is 0) */
    void (*ce_target)(float *out, const float *logits, const int32_t *labels, int64_t b, int64_t s, int64_t v,
                      int64_t vocab_start, tp_ce_rule rule);
    /* loss = the rule's mean over labelled rows of log(sumexp) + max - target */
    void (*ce_loss)(float *loss, const float *sumexp, const float *max, const float *target, const int32_t *labels,
                    int64_t b, int64_t s, tp_ce_rule rule);

    /* ---- training (tpcc --train): the backward kernels, each the gradient
     * of the forward kernel above it names, and the optimizer. Every one
     * writes its whole output. A backend without them (NULL) runs forward
     * schedules only. ---- */

    /* out[n, k] = a[m, n]^T . b[m, k] */
    void (*matmul_tn)(float *out, const float *a, const float *b, int64_t m, int64_t n, int64_t k);
    /* out[j] = scale * sum_i x[i, j] */
    void (*sum_rows)(float *out, const float *x, int64_t m, int64_t n, float scale);
    /* rmsnorm's gradients: dx (weight w, unit_offset as the forward) and dw.
     * With add (else NULL), dx = add + that gradient, as an add of the
     * gradient stored in the dtype would make it: the residual stream's
     * gradient joining the norm's (compiler/passes/fuse_pairs.c) */
    void (*rmsnorm_dx)(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps,
                       bool unit_offset, const float *add);
    void (*rmsnorm_dw)(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps);
    /* layernorm's gradients: dx (weight w) and dw (the bias's is sum_rows) */
    void (*layernorm_dx)(float *dx, const float *x, const float *dy, const float *w, int64_t m, int64_t n, float eps);
    void (*layernorm_dw)(float *dw, const float *x, const float *dy, int64_t m, int64_t n, float eps);
    /* the gradients of attention's q, k and v from its output's gradient dy
     * (shapes and arguments as attention): dq like q, dk and dv like k, in
     * one pass, with P = exp(score - lse) and D = dy . o from the
     * forward's output o and log-sum-exp lse (the attention's own, on this
     * backend, for these q, k, v); an output that is NULL is not computed;
     * segments as attention's; with rope, q and k are before the rotation
     * and so are dq and dk: the rotated ones' gradients rotated back, as
     * rope's inverse computes them */
    void (*attention_grad)(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                           const float *dy, const float *o, const float *lse, int64_t b, int64_t s, int64_t h,
                           int64_t g, int64_t d, double scale, double softcap, const int32_t *segments,
                           const tp_rope_args *rope);
    /* dx = dy * f'(x) */
    void (*unary_grad)(tp_unary op, float *dx, const float *x, const float *dy, int64_t n);
    void (*softcap_grad)(float *dx, const float *x, const float *dy, int64_t n, float cap);
    /* silu_mul's gradients: da = dy * b * silu'(a), db = dy * silu(a); an
     * output that is NULL is not computed; each may be exactly an input */
    void (*silu_mul_grad)(float *da, float *db, const float *a, const float *b, const float *dy, int64_t n);
    /* dw[r, :] = sum of dy[t, :] over the tokens t with ids[t] == vocab_start + r
     * (dw [rows, dim]; masked: other ids add nothing; unmasked ids are in range) */
    void (*embedding_grad)(float *dw, const int32_t *ids, const float *dy, int64_t ntok, int64_t rows, int64_t dim,
                           int64_t vocab_start, bool masked);
    /* out (shape[rank]) = zeros, with dy at [start, start + length) along dim */
    void (*narrow_grad)(float *out, const float *dy, const int64_t *shape, int rank, int dim, int64_t start,
                        int64_t length);
    /* d loss / d logits of cross_entropy (d loss = 1): (softmax - onehot(label))
     * / the rule's divisor at labelled rows, 0 elsewhere and in padded columns */
    void (*cross_entropy_grad)(float *dlogits, const float *logits, const int32_t *labels, int64_t b, int64_t s,
                               int64_t v, int64_t vocab, tp_ce_rule rule);
    /* the same over the rank's columns [vocab_start, vocab_start + v), with the
     * all-reduced max and sumexp of each row */
    void (*ce_grad)(float *dlogits, const float *logits, const float *max, const float *sumexp, const int32_t *labels,
                    int64_t b, int64_t s, int64_t v, int64_t vocab_start, int64_t vocab, tp_ce_rule rule);
    /* out[i] = 1 for i < n: d loss / d logits of a summed loss (tpcc --loss sum) */
    void (*ones)(float *out, int64_t n);
    /* the optimizer, on every part of a rank's weights at once (one call a
     * step, as torch's multi-tensor AdamW): m and v are float32 whatever
     * `dtype` is, w and g in the storage dtype. Each part's step reads g *
     * grad_scale (in fp32: clipping's factor, so the gradient is rounded
     * once only), takes step->weight_decay where the part decays, and
     * updates its fp32 weights: the part's master, after which w is the
     * master in the storage dtype, bf16 rounded to nearest even (mixed
     * precision, as torch AMP and Megatron train bf16 weights), or
     * without a master (NULL; fp32 storage only) w itself, in place. */
    void (*adamw)(const tp_adamw_part *parts, int nparts, float grad_scale, const tp_adamw_step *step);
    /* the sum of x[i]^2 over every element of the runs, in double,
     * returned to the host */
    double (*sum_squares)(const tp_run *runs, int nruns);
    /* one micro-batch's gradient g (storage dtype) into the fp32 acc, or
     * (TP_ACCUM_LAST) acc + g back into g: tp_grad_accum */
    void (*accumulate_grad)(float *acc, float *g, int64_t n, tp_grad_accum phase);
} tp_backend;

const tp_backend *tp_backend_cpu(void);

#endif /* TPRUN_BACKEND_H */
