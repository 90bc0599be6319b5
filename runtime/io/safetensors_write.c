/* safetensors_write.c: see safetensors_write.h. */
#include "runtime/io/safetensors_write.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/atomic_write.h"
#include "util/errmsg.h"
#include "util/xalloc.h"

static int64_t numel(const tp_st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const tp_st_tensor *const *)a)->name, (*(const tp_st_tensor *const *)b)->name);
}

/* The tensors in the file's order: sorted by name, as the safetensors
 * library itself writes them (json keys sorted too). */
static const tp_st_tensor **sorted(const tp_st_tensor *tensors, int n)
{
    const tp_st_tensor **order = tp_xcalloc((size_t)n + 1, sizeof *order);
    for (int i = 0; i < n; i++)
        order[i] = &tensors[i];
    qsort(order, (size_t)n, sizeof *order, by_name);
    return order;
}

/* The header text, padded to a multiple of 8; NULL with a message on a
 * duplicate name or a bad rank. */
static char *header_json(const tp_st_tensor **order, int n, size_t *len, char *err, size_t errlen)
{
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        const tp_st_tensor *t = order[i];
        if ((i && !strcmp(order[i - 1]->name, t->name)) || t->ndim < 0 || t->ndim > 8 || !strcmp(t->name, "__metadata__")) {
            json_decref(root);
            tp_error(err, errlen, "tensor '%s': %s", t->name, t->ndim < 0 || t->ndim > 8 ? "rank outside 0..8"
                                                                                           : "the name is taken twice");
            return NULL;
        }
        json_t *entry = json_object(), *shape = json_array(), *offsets = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        int64_t bytes = numel(t) * 4;
        json_array_append_new(offsets, json_integer(at));
        json_array_append_new(offsets, json_integer(at + bytes));
        at += bytes;
        json_object_set_new(entry, "dtype", json_string("F32"));
        json_object_set_new(entry, "shape", shape);
        json_object_set_new(entry, "data_offsets", offsets);
        json_object_set_new(root, t->name, entry);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!text) {
        tp_error(err, errlen, "cannot encode the safetensors header (out of memory)");
        return NULL;
    }
    size_t raw = strlen(text), padded = (raw + 7) / 8 * 8;
    char *out = tp_xmalloc(padded + 1);
    memcpy(out, text, raw);
    memset(out + raw, ' ', padded - raw);
    out[padded] = '\0';
    free(text);
    *len = padded;
    return out;
}

int tp_safetensors_write(const char *path, const tp_st_tensor *tensors, int n, char *err, size_t errlen)
{
    const tp_st_tensor **order = sorted(tensors, n);
    size_t hlen;
    char *header = header_json(order, n, &hlen, err, errlen);
    if (!header) {
        free(order);
        return -1;
    }
    unsigned char len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    /* the data as it is in memory: float32 little-endian on every host tprun builds for */
    tp_bytes *pieces = tp_xcalloc((size_t)n + 2, sizeof *pieces);
    pieces[0] = (tp_bytes){len8, 8};
    pieces[1] = (tp_bytes){header, hlen};
    for (int i = 0; i < n; i++)
        pieces[i + 2] = (tp_bytes){order[i]->data, (size_t)numel(order[i]) * 4};
    int rc = tp_write_file_atomic(path, pieces, n + 2, err, errlen);
    free(pieces);
    free(header);
    free(order);
    return rc;
}

static int64_t tensor_bytes(const tp_st_tensor *t) { return numel(t) * 4; }

static int write_index(const char *dir, const tp_st_tensor **order, const int *file_of, int n, int nfiles,
                       int64_t total, char *err, size_t errlen)
{
    json_t *map = json_object();
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", file_of[i] + 1, nfiles);
        json_object_set_new(map, order[i]->name, json_string(name));
    }
    json_t *root = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text)
        return tp_error(err, errlen, "cannot encode the checkpoint index (out of memory)");
    char *path = tp_xasprintf("%s/model.safetensors.index.json", dir);
    tp_bytes pieces[2] = {{text, strlen(text)}, {"\n", 1}};
    int rc = tp_write_file_atomic(path, pieces, 2, err, errlen);
    free(path);
    free(text);
    return rc;
}

int tp_safetensors_write_sharded(const char *dir, const tp_st_tensor *tensors, int n, int64_t shard_bytes, char *err,
                                 size_t errlen)
{
    const tp_st_tensor **order = sorted(tensors, n);
    int *file_of = tp_xcalloc((size_t)n + 1, sizeof *file_of);
    int nfiles = n ? 1 : 0;
    int64_t total = 0, in_file = 0;
    for (int i = 0; i < n; i++) {
        int64_t b = tensor_bytes(order[i]);
        if (in_file > 0 && in_file + b > shard_bytes) {
            nfiles++;
            in_file = 0;
        }
        file_of[i] = nfiles - 1;
        in_file += b;
        total += b;
    }
    int rc = 0;
    if (total <= shard_bytes) {
        char *path = tp_xasprintf("%s/model.safetensors", dir);
        rc = tp_safetensors_write(path, tensors, n, err, errlen);
        free(path);
    } else {
        tp_st_tensor *part = tp_xcalloc((size_t)n + 1, sizeof *part);
        for (int f = 0; f < nfiles && !rc; f++) {
            int k = 0;
            for (int i = 0; i < n; i++)
                if (file_of[i] == f)
                    part[k++] = *order[i];
            char *path = tp_xasprintf("%s/model-%05d-of-%05d.safetensors", dir, f + 1, nfiles);
            rc = tp_safetensors_write(path, part, k, err, errlen);
            free(path);
        }
        free(part);
        if (!rc)
            rc = write_index(dir, order, file_of, n, nfiles, total, err, errlen);
    }
    free(file_of);
    free(order);
    return rc;
}
