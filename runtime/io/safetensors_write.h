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
 * metadata. The file is written atomically (util/atomic_write.h).
 *
 * The header depends on the names and shapes only, so a file can also be
 * streamed (tp_st_file, tp_st_model): the header first, then each
 * tensor's bytes at their offset, in any order, one tensor in memory at a
 * time; it is written to a temporary file beside its path and renamed
 * over it once every tensor is in. */
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

/* One .safetensors file streamed: created with the tensors' names and
 * shapes (their data unused), its header written to the temporary file;
 * tp_st_file_put writes tensor i's prod(shape) floats (i indexes the
 * tensors given at creation); tp_st_file_finish syncs the file and renames
 * it over path, an error when a tensor was never put; tp_st_file_abandon
 * removes it. finish and abandon free f. Return 0, or -1 with a message. */
typedef struct tp_st_file tp_st_file;
int tp_st_file_create(tp_st_file **f, const char *path, const tp_st_tensor *tensors, int n, char *err,
                      size_t errlen);
int tp_st_file_put(tp_st_file *f, int i, const float *data, char *err, size_t errlen);
int tp_st_file_finish(tp_st_file *f, char *err, size_t errlen);
void tp_st_file_abandon(tp_st_file *f);

/* tp_safetensors_write_sharded's files streamed the same way: every file
 * is created at once, tp_st_model_put writes tensor i into its file, and
 * tp_st_model_finish finishes them and writes the index. The tensors
 * array (its names) must outlive m. */
typedef struct tp_st_model tp_st_model;
int tp_st_model_create(tp_st_model **m, const char *dir, const tp_st_tensor *tensors, int n, int64_t shard_bytes,
                       char *err, size_t errlen);
int tp_st_model_put(tp_st_model *m, int i, const float *data, char *err, size_t errlen);
int tp_st_model_finish(tp_st_model *m, char *err, size_t errlen);
void tp_st_model_abandon(tp_st_model *m);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_SAFETENSORS_WRITE_H */
