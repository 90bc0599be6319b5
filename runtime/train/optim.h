/* optim.h: the optimizer step after a training schedule's backward: the
 * global gradient norm, clipping, and AdamW, on the gradient buffers and
 * the weight region in backend memory, as torch does it:
 *   norm = sqrt(sum over every parameter of sum(g^2))     (clip_grad_norm_)
 *   g *= max_norm / (norm + 1e-6)   when that factor is below 1
 *   AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight_decay) per parameter,
 * the last two in one backend call over every parameter of the rank
 * (backend.h's adamw, multi-tensor), which multiplies each gradient by
 * clipping's factor in fp32 as it reads it.
 *
 * Across ranks each parameter counts once: a rank adds its slice of a
 * sharded weight, and a weight held whole (replicated) or by several ranks
 * (replicated kv heads) is counted on the first rank of each group holding
 * the same slice only; the sum is then all-reduced.
 *
 * Mixed precision. A backend storing bf16 (a tpcc --train --dtype bf16
 * schedule) computes the step in bf16, as torch AMP and Megatron do, but
 * the optimizer keeps an fp32 master copy of every local weight beside
 * fp32 m and v: the norm is summed in double from the bf16 gradients,
 * clipping's factor multiplies each gradient in fp32 inside the update
 * (not rounded to bf16 once more), AdamW updates the master, and the bf16
 * weight is the master rounded to nearest even. Updates below bf16's
 * resolution accumulate in the master, as they would not in bf16.
 *
 * ZeRO-1 (zero.h). With the state sharded over the data-parallel
 * replicas, masters and moments hold this rank's runs only, laid out as
 * the shard region; the norm adds each rank's runs of the reduced
 * gradients, all-reduced over tp and then dp; AdamW updates the runs, in
 * the weight region too, which zero.h then gathers. */
#ifndef TPRUN_TRAIN_OPTIM_H
#define TPRUN_TRAIN_OPTIM_H

#include <stdbool.h>
#include "runtime/exec/exec.h"
#include "runtime/train/zero.h"

typedef struct tr_optim {
    tr_exec *x;
    tr_zero *zero;         /* the state's runs over dp; NULL: replicated */
    float *master;         /* backend memory: fp32 master weights of a backend not storing fp32, laid out
                              like the weight region (or the shard region); NULL where the weights are fp32
                              themselves */
    float *m, *v;          /* backend memory: exp_avg, exp_avg_sq, laid out like the weights (fp32) */
    float grad_scale;      /* clipping's factor, applied in the update */
    float *sum;            /* backend memory: the 2-float all-reduce of the squared norm */
    int64_t step;          /* AdamW steps taken */
} tr_optim;

/* Allocates the zeroed moments, and for a backend not storing fp32 the
 * master weights, copied from `weights` (host float32, laid out like the
 * weight region); with `zero`, this rank's runs of them. Returns 0 or -1
 * with a message. */
int tr_optim_init(tr_optim *o, tr_exec *x, tr_zero *zero, const float *weights, char *err, size_t errlen);

/* Optimizer state k (0: the fp32 weights it updates, the masters or the
 * weight region itself; 1, 2: the two moments) of weight i, its local
 * elements, in host memory: one weight at a time, so that saving holds
 * no whole region. Collective over dp when the state is sharded. Returns
 * 0 or -1 with a message. */
int tr_optim_weight_to_host(tr_optim *o, int k, int i, float *host, char *err, size_t errlen);

void tr_optim_free(tr_optim *o);

/* How many ranks hold the same slice of weight w (1 for a plain shard, the
 * world for a replicated weight). */
int tr_weight_replicas(const tr_weight *w, int world);

/* The global L2 norm of the gradients; `dp` the replicas, over which
 * sharded runs are summed too. Returns 0 or -1 with a message. */
int tr_optim_grad_norm(tr_optim *o, tp_comm *dp, double *norm, char *err, size_t errlen);

/* After a non-finite norm: in *first the first weight (in the schedule's
 * order) whose gradient holds a NaN or an infinity on some rank, -1 when
 * none does (a norm past float32's range). Each rank sums the squares of
 * its parts of each weight; one all-reduce over tp (and over dp where
 * the state is sharded) tells every rank which. Returns 0 or -1 with a
 * message. */
int tr_optim_first_nonfinite(tr_optim *o, tp_comm *dp, int *first, char *err, size_t errlen);

/* Clipping as clip_grad_norm_(max_norm) does, given the gradients' norm:
 * sets the factor the next tr_optim_adamw multiplies each gradient by, in
 * fp32 (1 with max_norm 0 or a norm within it); the gradient buffers are
 * left as they are. */
void tr_optim_clip(tr_optim *o, double norm, double max_norm);

/* AdamW's settings besides the rate: torch.optim.AdamW's betas and eps,
 * and which parameters take its weight decay: those of rank >= 2 (norms
 * and biases get none), or all with decay_all, or with no_decay every one
 * whose name holds none of its comma-separated parts (transformers'
 * Trainer excludes "bias" and the norms' weights by name this way). */
typedef struct tr_adamw_hparams {
    double beta1, beta2, eps, weight_decay;
    bool decay_all;             /* decay norms and biases too, not only weights of rank >= 2 */
    const char *no_decay;       /* "bias,norm": the names that take none; NULL: by rank */
} tr_adamw_hparams;

/* Whether weight w takes h's weight decay. */
bool tr_adamw_decays(const tr_adamw_hparams *h, const tr_weight *w);

/* One AdamW step at learning rate lr. */

void tr_optim_adamw(tr_optim *o, double lr, const tr_adamw_hparams *h);

#endif /* TPRUN_TRAIN_OPTIM_H */
