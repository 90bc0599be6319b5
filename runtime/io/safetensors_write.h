/* safetensors_write.h: writing float32 tensors as a .safetensors file
 * (gradients, trained weights, optimizer state), the format Hugging Face's
 * safetensors library reads:
 *   8 bytes   little-endian uint64 N, the header's length
 *   N bytes   JSON: {"__metadata__": {"format": "pt"}, name: {"dtype": "F32",
 *             "shape": [...], "data_offsets": [begin, end]}, ...}, padded
 *             with spaces so the data starts 8-byte aligned
 *   data      the tensors one after another, in the header's (sorted) order,
 *             offsets relative to the start of the data
 * "format": "pt" is what transformers' from_pretrained requires of a file's
 * metadata. The file is written atomically (util/atomic_write.h). */
#ifndef TPRUN_SAFETENSORS_WRITE_H
#define TPRUN_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tp_st_tensor {
    const char *name;
    int ndim;                   /* 0..8 */
    int64_t shape[8];
    const float *data;          /* prod(shape) values, row-major */
} tp_st_tensor;

/* Writes the tensors (names unique) to path. Returns 0, or -1 with a
 * message in err. */
int tp_safetensors_write(const char *path, const tp_st_tensor *tensors, int n, char *err, size_t errlen);


/* A Hugging Face checkpoint's weights in directory dir, as
 * save_pretrained writes them: model.safetensors when the tensors' bytes
 * are at most shard_bytes, else model-0000i-of-0000n.safetensors, each
 * filled in name order up to shard_bytes (a larger tensor alone), with
 * model.safetensors.index.json {"metadata": {"total_size": bytes},
 * "weight_map": {name: file}}. Returns 0 or -1 with a message. */
int tp_safetensors_write_sharded(const char *dir, const tp_st_tensor *tensors, int n, int64_t shard_bytes, char *err,
                                 size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_SAFETENSORS_WRITE_H */
