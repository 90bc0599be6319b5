/* workspace.h: the memory a rank's backend takes for a schedule, in one
 * place: how its weight region is laid out, and what it allocates beside
 * the region and the arena.
 *
 * tprun's loader places the weights (sched/load.c); its executor allocates
 * the reshard staging; the CUDA backend the cuBLAS workspace and one
 * scratch buffer, grown to the largest of its kernels' requests
 * (backend_cuda.c; the kernels lay the scratch out as said here). tpcc
 * --report counts all of it in a training step's memory, so the total it
 * compares with --device-memory is what tprun allocates. Plain C with
 * nothing to link: the CUDA kernels include it too. */
#ifndef TP_SCHED_WORKSPACE_H
#define TP_SCHED_WORKSPACE_H

#include <stdbool.h>
#include <stdint.h>

/* Weights start at multiples of 8 elements of the weight region: 16
 * bytes in bf16, 32 in fp32 (AdamW's moments and the master weights share
 * the offsets). tp_weight_region_offset: where the weight after one
 * ending at `end` starts. */
#define WEIGHT_ALIGN_ELEMS 8
static inline int64_t tp_weight_region_offset(int64_t end)
{
    return (end + WEIGHT_ALIGN_ELEMS - 1) / WEIGHT_ALIGN_ELEMS * WEIGHT_ALIGN_ELEMS;
}

/* Reshard staging: this many buffers of the largest tensor a collective
 * reads or writes (an all-to-all's blocks leave from one and arrive in the
 * other). */
#define TP_STAGING_BUFFERS 2

/* cuBLAS's workspace, set once so that it never allocates while a step
 * runs: 32 MiB, its recommendation for Hopper. */
#define TP_CUDA_BLAS_WORKSPACE_BYTES ((int64_t)32 << 20)

/* The head dimensions whose bf16 attention and its gradients run on
 * tensor cores: GPT-2's and small models' 64, Phi-3's 96, Llama's, Qwen's
 * and Mistral's 128, and Gemma's 256 (attention_flash.cuh,
 * attention_flash_grad.cuh). */
static inline bool tp_cuda_flash_head_dim(int64_t d) { return d == 64 || d == 96 || d == 128 || d == 256; }

/* Whether the tensor-core gradient splits dk and dv by query head: a kv
 * head serves several (GQA, or a rank holding one kv head for several
 * query heads). */
static inline bool tp_cuda_flash_kv_by_query_head(int64_t h, int64_t g) { return h > g; }

/* D's floats at the start of attention's gradient's scratch (below): b h
 * s, rounded up to 16 bytes, so that the per-head sums after it start
 * aligned for the kernels' 8-byte stores, whatever b h s is. */
static inline int64_t tp_cuda_attention_dsum_floats(int64_t b, int64_t h, int64_t s)
{
    return (b * h * s + 3) / 4 * 4;
}

/* The ints of the tensor-core gradient's turns ([b, h, tiles]: the key
 * blocks that have added into each tile of queries' dq) for tiles of at
 * least 16 queries; its table of each tile's first key block ([b,
 * tiles]) takes no more. */
static inline int64_t tp_cuda_flash_grad_turns(int64_t b, int64_t h, int64_t s) { return b * h * ((s + 15) / 16); }

/* Floats of scratch attention's gradient takes on the CUDA backend, for
 * [b, s, h, d] queries and g kv heads: each query's D = dy . O (b h s;
 * its log-sum-exp is the forward's, a buffer of the schedule), and on
 * tensor cores: where dk and dv are split by query head, each query head's
 * fp32 dk and dv before they are added in head order (2 b s h d); dq's
 * fp32 sum, which the key blocks add into in turn (b s h d); and the turns
 * and the first key blocks (ints, the size of floats). A bf16 schedule
 * whose operands turn out misaligned takes the fp32 kernel, which uses
 * less. */
static inline int64_t tp_cuda_attention_grad_scratch(bool bf16, int64_t b, int64_t s, int64_t h, int64_t g,
                                                     int64_t d)
{
    if (!bf16 || !tp_cuda_flash_head_dim(d))
        return tp_cuda_attention_dsum_floats(b, h, s);
    bool split = tp_cuda_flash_kv_by_query_head(h, g);
    return tp_cuda_attention_dsum_floats(b, h, s) + (split ? 2 : 0) * b * s * h * d + b * s * h * d +
           2 * tp_cuda_flash_grad_turns(b, h, s);
}

/* Floats of scratch that hold elems elements of the schedule's dtype,
 * rounded up to 256 bytes, so that what follows in the same scratch starts
 * as aligned as an arena buffer (the tensor-core kernels read 16 bytes at
 * a time). */
static inline int64_t tp_cuda_scratch_part(bool bf16, int64_t elems)
{
    return ((bf16 ? (elems + 1) / 2 : elems) + 63) / 64 * 64;
}

/* Whether rope_attention's rotation runs inside the bf16 tensor-core
 * kernels, on q and k as they are loaded and on dq and dk as they are
 * stored (attention_flash.cuh, attention_flash_grad.cuh): their rows are
 * rotated two elements (a 32-bit word) at a time, so the rotated half is
 * a whole number of words. Elsewhere the rope kernel rotates copies. */
static inline bool tp_cuda_rope_in_attention(bool bf16, int64_t d, int64_t rotary)
{
    return bf16 && tp_cuda_flash_head_dim(d) && rotary > 0 && rotary % 4 == 0 && rotary <= d;
}

/* Floats of scratch rope_attention (grad false) or its gradient takes on
 * the CUDA backend beyond attention's, for a rotation of the first
 * `rotary` dims of each head. Where it runs inside attention, the table
 * of (cos, sin) of each frequency at each of the b s positions (those of
 * a batch row alike without documents: the table then takes a row's
 * worth); else the rotated copies: q and k, and for the gradient their
 * gradients before they are rotated back. The gradient's start with
 * attention's gradient's scratch, rounded up by tp_cuda_scratch_part. */
static inline int64_t tp_cuda_rope_table_floats(int64_t b, int64_t s, int64_t rotary)
{
    return tp_cuda_scratch_part(false, b * s * rotary);
}

static inline int64_t tp_cuda_rotated_copies_floats(bool bf16, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d,
                                                    bool grad)
{
    const int64_t rotated = tp_cuda_scratch_part(bf16, b * s * h * d) + tp_cuda_scratch_part(bf16, b * s * g * d);
    return grad ? 2 * rotated : rotated;
}

static inline int64_t tp_cuda_rope_attention_scratch(bool bf16, int64_t b, int64_t s, int64_t h, int64_t g, int64_t d,
                                                     int64_t rotary, bool grad)
{
    return tp_cuda_rope_in_attention(bf16, d, rotary) ? tp_cuda_rope_table_floats(b, s, rotary)
                                                      : tp_cuda_rotated_copies_floats(bf16, b, s, h, g, d, grad);
}

/* Floats of scratch a norm's weight gradient takes for m rows: each row's
 * 1 / rms, and a layernorm's mean beside it. */
static inline int64_t tp_cuda_norm_grad_scratch(bool layernorm, int64_t m) { return (layernorm ? 2 : 1) * m; }

/* Bytes of scratch the sum of squares (the gradient norm) takes: one
 * double. */
#define TP_CUDA_SUM_SQUARES_SCRATCH_BYTES ((int64_t)sizeof(double))

#endif /* TP_SCHED_WORKSPACE_H */
