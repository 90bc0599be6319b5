/* weights_load.h: filling a region of backend memory laid out as a rank's
 * weights (s->weight_elems values, weight i's slices at its region_offset)
 * from a checkpoint or the seeded initialisation, without a host copy of
 * the region.
 *
 * A backend whose memory is host memory (the CPU backend, float32) is read
 * into in place: each slice goes from the file's mapping straight to its
 * place in the region. Any other backend or dtype stages through one
 * bounded buffer of the backend's staging memory (CUDA: pinned), a run of
 * rows of a slice at a time, converted there to the dtype and copied to the
 * backend. The checkpoint releases the file pages it read as it goes
 * (weights.h), so the peak is the region plus the staging buffer. */
#ifndef TPRUN_WEIGHTS_LOAD_H
#define TPRUN_WEIGHTS_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include "runtime/exec/exec.h"
#include "runtime/io/weights.h"

/* Bytes of the staging buffer by default (a slice row wider than the
 * bound gets a buffer of one row) */
#define TR_WEIGHTS_STAGING_BYTES ((size_t)32 << 20)

typedef struct tr_weight_source {
    tp_checkpoint *ckpt;    /* NULL: tp_weight_init_seeded with seed */
    uint64_t seed;
    const char *suffix;     /* appended to every weight's name (--resume's ".exp_avg"); NULL: none */
} tr_weight_source;

typedef struct tr_weights_sink {
    void *region;           /* backend memory: s->weight_elems values of dtype; NULL: fp32_copy alone
                               (host memory, float32), where the backend keeps only part of it */
    bool runs;              /* region holds s->stored_elems: this replica's run of each weight at its
                               stored_offset (FSDP); fp32_copy is still the whole region */
    tp_dtype dtype;         /* TP_F32, or TP_BF16 (rounded to nearest even) */
    float *fp32_copy;       /* (may be NULL) host: the float32 values as read, too (a bf16
                               training schedule's master weights start from them) */
    void (*progress)(void *ctx, int done, int total);   /* (may be NULL) after each weight */
    void *ctx;
    size_t staging_bytes;   /* the staging buffer's bound; 0: TR_WEIGHTS_STAGING_BYTES */
} tr_weights_sink;

/* Returns 0, or -1 with a message (the checkpoint's: tensor, file, what is
 * wrong) in err. */
int tr_weights_load(const tr_exec *x, const tr_weight_source *src, const tr_weights_sink *dst, char *err,
                    size_t errlen);

/* How many of the checkpoint's tensors the schedule's model does not take,
 * and the first of them by name (NULL when none): a checkpoint of another
 * configuration (more layers) whose other tensors match. Not counted, as
 * transformers does not load them either: buffers (rotary inv_freq,
 * GPT-2's causal-mask attn.bias and masked_bias), and a tied weight's
 * second copy: a tensor of the same dtype, shape and values as one the
 * model takes (lm_head.weight beside the embedding it is tied to, or
 * torchtitan's output.weight beside tok_embeddings.weight), whatever its
 * name. Only such a candidate is read, in pieces. */
size_t tr_weights_unused(const tr_schedule *s, tp_checkpoint *c, const char **first);

#endif /* TPRUN_WEIGHTS_LOAD_H */
