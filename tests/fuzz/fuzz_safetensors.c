/* fuzz_safetensors.c: libFuzzer entry point. The input is a checkpoint:
 * one .safetensors file, or, when it holds TP_FUZZ_SEPARATOR, a sharded one:
 * model.safetensors.index.json, then its shards, written as
 * model-0000K-of-0000N.safetensors into a directory opened as tprun opens
 * --weights DIR. Every tensor the checkpoint names is then read as tprun
 * reads slices: whole, each half along dim 0 and dim 1, and padded by a
 * row as a vocabulary is. A checkpoint or a slice that is refused must
 * come with a message. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "runtime/io/weights.h"
#include "tests/fuzz/scratch.h"

#define MAX_SHARDS 4
#define MAX_TENSORS 64
#define MAX_ELEMS (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void needs_a_reason(const char *what, const char *err)
{
    if (!err[0]) {
        fprintf(stderr, "fuzz_safetensors: %s failed without a message\n", what);
        abort();
    }
}

static const char *shard_name(int k, int n)
{
    char name[64];
    snprintf(name, sizeof name, "ckpt/model-%05d-of-%05d.safetensors", k, n);
    return tp_fuzz_path(name);
}

/* Writes the sharded checkpoint's files (parts[0] the index); the shards
 * of the previous input are removed first, so none is found by accident.
 * Returns the directory, or NULL when the input is skipped. */
static const char *write_sharded(const uint8_t *parts[], const size_t lens[], int nparts)
{
    static int written;
    const char *dir = tp_fuzz_mkdir("ckpt");
    for (; written > 0; written--)
        unlink(shard_name(written, written));
    if (tp_fuzz_write(tp_fuzz_path("ckpt/model.safetensors.index.json"), parts[0], lens[0]))
        return NULL;
    for (int k = 1; k < nparts; k++)
        if (tp_fuzz_write(shard_name(k, nparts - 1), parts[k], lens[k]))
            return NULL;
    written = nparts - 1;
    return dir;
}

/* The names of the tensors: the keys of the index's weight_map or of the
 * file's header (both valid JSON once the checkpoint opened). */
static json_t *tensor_names(const uint8_t *data, size_t size, bool sharded)
{
    if (sharded) {
        json_t *index = json_loadb((const char *)data, size, 0, NULL);
        json_t *map = json_incref(json_object_get(index, "weight_map"));
        json_decref(index);
        return map;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8 && (size_t)i < size; i++)
        n |= (uint64_t)data[i] << (8 * i);
    return size >= 8 && n <= size - 8 ? json_loadb((const char *)data + 8, (size_t)n, 0, NULL) : NULL;
}

static void read_slice(tp_checkpoint *c, tp_weight_slice s, float *dst)
{
    char err[800];
    err[0] = '\0';
    if (tp_checkpoint_read(c, &s, dst, err, sizeof err))
        needs_a_reason("tp_checkpoint_read", err);
}

static void read_tensor(tp_checkpoint *c, const char *name, float *dst)
{
    const char *dtype;
    int ndim;
    int64_t shape[8];
    if (tp_checkpoint_tensor_info(c, name, &dtype, &ndim, shape) || ndim < 1 || ndim > 2)
        return;
    int64_t rows = shape[0], cols = ndim == 2 ? shape[1] : 0;
    if (rows <= 0 || cols < 0 || (rows + 1) * (cols ? cols : 1) > MAX_ELEMS)
        return;
    tp_weight_slice whole = {name, 0, {rows, cols}, {0, 0}, -1, 0, 0, ndim};
    read_slice(c, whole, dst);
    tp_weight_slice top = whole, padded = whole;
    top.dim = 0;
    top.offset = rows / 2;
    top.length = rows - rows / 2;
    read_slice(c, top, dst);
    if (cols > 1) {
        tp_weight_slice right = whole;
        right.dim = 1;
        right.offset = cols / 2;
        right.length = cols - cols / 2;
        read_slice(c, right, dst);
    }
    padded.shape[0] = rows + 1;
    padded.logical[0] = rows;
    padded.logical[1] = cols;
    read_slice(c, padded, dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *parts[MAX_SHARDS + 1];
    size_t lens[MAX_SHARDS + 1];
    int nparts = tp_fuzz_split(data, size, parts, lens, MAX_SHARDS + 1);
    bool sharded = nparts > 1;
    const char *path = sharded ? write_sharded(parts, lens, nparts) : tp_fuzz_path("model.safetensors");
    if (!path || (!sharded && tp_fuzz_write(path, data, size)))
        return 0;
    tp_checkpoint *c;
    char err[800];
    err[0] = '\0';
    if (tp_checkpoint_open(&c, path, err, sizeof err)) {
        needs_a_reason("tp_checkpoint_open", err);
        return 0;
    }
    json_t *names = tensor_names(parts[0], lens[0], sharded);
    float *dst = malloc(MAX_ELEMS * sizeof *dst);
    const char *name;
    json_t *v;
    int seen = 0;
    json_object_foreach(names, name, v)
        if (seen++ < MAX_TENSORS && dst)
            read_tensor(c, name, dst);
    free(dst);
    json_decref(names);
    tp_checkpoint_total_bytes(c);
    tp_checkpoint_close(c);
    return 0;
}
