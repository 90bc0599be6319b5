/* weights.h: each rank's slice of each weight, from a safetensors
 * checkpoint or from a deterministic seeded initialisation.
 *
 * A rank never loads the full model: tp_checkpoint_open maps the files
 * read-only and parses only their JSON headers; tp_checkpoint_read then
 * touches exactly the bytes of one slice (a row range for dim 0, one strided
 * run per row for dim 1) and converts them to float32.
 *
 * Checkpoints
 *   A path names either a .safetensors file, a sharded index
 *   (*.safetensors.index.json, {"weight_map": {tensor: file}}), or a
 *   directory holding model.safetensors.index.json (preferred) or
 *   model.safetensors. Every header is validated when the checkpoint is
 *   opened (lengths, JSON, dtype, shape, data_offsets inside the data
 *   section, size = prod(shape) * dtype size, no overlapping tensors, no
 *   tensor in two shards, every file of the index present); errors name the
 *   file and the tensor and say what is wrong. All dtypes of the
 *   safetensors format are accepted when opening; reading converts F32, BF16
 *   and F16 (subnormals, inf and nan included) and rejects the others.
 *
 * Slices
 *   A tp_weight_slice describes what one rank wants of one tensor:
 *     shape    the global shape the plan expects, after padding (vocab
 *              padded to a multiple of tp, for instance);
 *     logical  the shape stored in the checkpoint, before padding; all zero
 *              means "same as shape". Rows/columns in [logical, shape) read
 *              as zeros (and are never read from the file);
 *     ndim     1 or 2; 0 infers it: 1-D when shape[1] == 0, else 2-D;
 *     dim      the dimension sharded (0 or 1; 0 for a sharded 1-D bias),
 *              or -1 for the whole tensor (replicated);
 *     offset, length  the range of `dim` (in padded coordinates) this rank
 *              holds; ignored when dim is -1.
 *   dst receives the slice row-major: [length, shape[1]] for dim 0,
 *   [shape[0], length] for dim 1, [length] for dim 0 of a 1-D tensor, and
 *   the whole padded shape for dim -1.
 *   A 1-D checkpoint tensor of n elements also matches an inferred 2-D
 *   logical shape [n, 1] (and the other way round), so callers that spell a
 *   vector as [n, 1] keep working.
 *
 * Thread safety: after open, any number of threads may call
 * tp_checkpoint_read on one checkpoint concurrently (the byte counters are
 * atomic). Open and close are not concurrent with anything. */
#ifndef TPRUN_WEIGHTS_H
#define TPRUN_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>
#include "util/bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tp_wdtype { TP_WDTYPE_F32, TP_WDTYPE_BF16, TP_WDTYPE_F16 } tp_wdtype;

typedef struct tp_weight_slice {
    const char *name;    /* Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight" */
    int rank;            /* the rank reading (error messages, per-rank byte counts) */
    int64_t shape[2];    /* global shape expected, padded */
    int64_t logical[2];  /* checkpoint shape (before vocab padding); {0, 0}: = shape */
    int dim;             /* -1: whole tensor; 0 or 1: the sharded dimension */
    int64_t offset, length;
    int ndim;            /* 1 or 2; 0: 1-D when shape[1] == 0, else 2-D */
} tp_weight_slice;

/* What rank `rank` holds of a schedule's weight w (sched/load.h) as a
 * checkpoint slice: segment k of a packed weight (dim 0), else its one
 * range, or the whole tensor when replicated. The name is w's. */
struct tr_weight;
tp_weight_slice tr_weight_slice(const struct tr_weight *w, int rank, int k);

typedef struct tp_checkpoint tp_checkpoint;

/* Ranks counted separately by tp_checkpoint_bytes_read_rank. */
#define TP_CHECKPOINT_MAX_RANKS 256

/* Opens and validates a checkpoint. Returns 0 and sets *out, or -1 with a
 * message in err (which may be NULL) and *out = NULL. */
int tp_checkpoint_open(tp_checkpoint **out, const char *path, char *err, size_t errlen);

/* Copies the rank's slice into dst as float32 (see "Slices" above).
 * Returns 0, or -1 with a message in err (dst is then unspecified):
 * the tensor is missing, its shape differs from s->logical, its dtype is not
 * F32/BF16/F16, or the slice itself is inconsistent. */
int tp_checkpoint_read(tp_checkpoint *c, const tp_weight_slice *s, float *dst, char *err, size_t errlen);

/* The slice as rows: `rows` of `width` floats each ([length, shape[1]] for
 * dim 0, [shape[0], length] for dim 1, one row for a 1-D slice). 0, or -1
 * when s is inconsistent. */
int tp_weight_slice_rows(const tp_weight_slice *s, int64_t *rows, int64_t *width);

/* Rows [row0, row0 + nrows) of the slice only, into dst (nrows * width
 * floats): a loader staging through a bounded buffer reads a large slice
 * in pieces. Errors as tp_checkpoint_read's, and rows outside the slice.
 *
 * Reading releases this process's mapping of the file bytes it read
 * (madvise MADV_DONTNEED), so a loaded checkpoint does not stay resident
 * beside the weights it was converted into; the page cache is left to the
 * kernel. */
int tp_checkpoint_read_rows(tp_checkpoint *c, const tp_weight_slice *s, int64_t row0, int64_t nrows, float *dst,
                            char *err, size_t errlen);

/* Number of float elements tp_checkpoint_read / tp_weight_init_seeded
 * write for s, or -1 when s is inconsistent (bad ndim or dim, negative
 * sizes, logical larger than shape, a range outside the padded size). */
int64_t tp_weight_slice_numel(const tp_weight_slice *s);

/* Bytes of tensor data read so far, by all ranks / by one rank (0 for ranks
 * outside [0, TP_CHECKPOINT_MAX_RANKS)). Padding is never read and counts
 * nothing. */
size_t tp_checkpoint_bytes_read(const tp_checkpoint *c);
size_t tp_checkpoint_bytes_read_rank(const tp_checkpoint *c, int rank);

/* Total bytes of tensor data in the checkpoint, and the number of tensors. */
size_t tp_checkpoint_total_bytes(const tp_checkpoint *c);
size_t tp_checkpoint_num_tensors(const tp_checkpoint *c);

/* The name of tensor i (i < tp_checkpoint_num_tensors), in name order. */
const char *tp_checkpoint_tensor_name(const tp_checkpoint *c, size_t i);

/* Metadata of a tensor without reading it: 0 and its dtype and shape (ndim
 * may be 0..8; only the first min(ndim, 8) entries are written), or -1 when
 * absent. dtype_name is the safetensors spelling ("F32", "BF16", ...). */
int tp_checkpoint_tensor_info(const tp_checkpoint *c, const char *name, const char **dtype_name, int *ndim,
                              int64_t shape[8]);

void tp_checkpoint_close(tp_checkpoint *c);

/* Deterministic initialisation, identical whatever the tp degree.
 *
 * Element (i, j) of the logical tensor (flat index k = i * logical[1] + j;
 * k = j for 1-D) of tensor `name` is a pure function of (name, seed, k):
 *   key   = mix(fnv1a64(name) ^ seed)
 *   h(c)  = mix(key + (c + 1) * 0x9E3779B97F4A7C15)     (splitmix64 at counter c)
 *   a, b  = h(2k), h(2k + 1); u1..u4 = the 32-bit halves of a and b
 *   value = (float)((double)((int64_t)(u1 + u2 + u3 + u4) - 2^33)
 *                   * (0.02 * 1.7320508075688772 / 4294967296.0))
 * i.e. a sum of four uniforms scaled to mean 0 and standard deviation 0.02
 * (an Irwin-Hall approximation of N(0, 0.02^2), bounded by +-0.0693), with
 * mix() splitmix64's finaliser. Only integer arithmetic and one double
 * multiplication: bit-identical on every platform, and any slice gives the
 * same numbers as the same region of the full tensor.
 * Exceptions: 1-D tensors whose name contains "norm" or "ln_" get 1.0
 * when the name ends in "weight" and 0.0 when it ends in "bias" (other 1-D
 * tensors, e.g. linear biases, get the small normal values). Padding
 * (rows/columns in [logical, shape)) is zero. tools/make_checkpoint.py
 * writes exactly these values (bit for bit in f32) for the same seed.
 * dst is laid out as for tp_checkpoint_read. Returns the number of elements
 * written, or -1 (nothing written) when s is inconsistent (see
 * tp_weight_slice_numel). */
int64_t tp_weight_init_seeded(const tp_weight_slice *s, uint64_t seed, float *dst);
/* The same values for rows [row0, row0 + nrows) of the slice only (rows as
 * tp_weight_slice_rows counts them); -1 when those rows are outside it. */
int64_t tp_weight_init_seeded_rows(const tp_weight_slice *s, uint64_t seed, int64_t row0, int64_t nrows, float *dst);

/* Conversions used by the loader (exposed for tests and kernels); bf16's
 * (tp_bf16_to_f32, tp_f32_to_bf16: the executor's and the loader's
 * rounding) are util/bf16.h's. */
float tp_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_WEIGHTS_H */
