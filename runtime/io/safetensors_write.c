/* safetensors_write.c: see safetensors_write.h. */
#include "runtime/io/safetensors_write.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* The file's start for the tensors in `order`: the header (returned,
 * *hlen bytes; NULL with a message) and its 8-byte little-endian length. */
static char *file_prefix(const tp_st_tensor **order, int n, unsigned char len8[8], size_t *hlen, char *err,
                         size_t errlen)
{
    char *header = header_json(order, n, hlen, err, errlen);
    for (int b = 0; header && b < 8; b++)
        len8[b] = (unsigned char)((uint64_t)*hlen >> (8 * b));
    return header;
}

int tp_safetensors_write(const char *path, const tp_st_tensor *tensors, int n, char *err, size_t errlen)
{
    const tp_st_tensor **order = sorted(tensors, n);
    size_t hlen;
    unsigned char len8[8];
    char *header = file_prefix(order, n, len8, &hlen, err, errlen);
    if (!header) {
        free(order);
        return -1;
    }
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

/* ---- streaming ----------------------------------------------------------- */

struct tp_st_file {
    char *path, *tmp;      /* the file, and the temporary renamed over it */
    int fd;
    int n, missing;        /* tensors, and those not put yet */
    int64_t *at;           /* per tensor (the caller's order): where its bytes begin in the file */
    int64_t *bytes;
    bool *put;
};

static void st_file_free(tp_st_file *f)
{
    free(f->path);
    free(f->tmp);
    free(f->at);
    free(f->bytes);
    free(f->put);
    free(f);
}

/* Every tensor's place in the file: after the prefix and header, in the
 * header's (sorted) order. */
static void place_tensors(tp_st_file *f, const tp_st_tensor *tensors, const tp_st_tensor **order, size_t hlen)
{
    int64_t at = 8 + (int64_t)hlen;
    for (int k = 0; k < f->n; k++) {
        int i = (int)(order[k] - tensors);
        f->at[i] = at;
        f->bytes[i] = numel(order[k]) * 4;
        at += f->bytes[i];
    }
}

int tp_st_file_create(tp_st_file **out, const char *path, const tp_st_tensor *tensors, int n, char *err,
                      size_t errlen)
{
    *out = NULL;
    const tp_st_tensor **order = sorted(tensors, n);
    size_t hlen;
    unsigned char len8[8];
    char *header = file_prefix(order, n, len8, &hlen, err, errlen);
    if (!header) {
        free(order);
        return -1;
    }
    tp_bytes pieces[2] = {{len8, 8}, {header, hlen}};
    tp_st_file *f = tp_xcalloc(1, sizeof *f);
    *f = (tp_st_file){.path = tp_xasprintf("%s", path), .fd = -1, .n = n, .missing = n,
                      .at = tp_xcalloc((size_t)n + 1, sizeof *f->at),
                      .bytes = tp_xcalloc((size_t)n + 1, sizeof *f->bytes),
                      .put = tp_xcalloc((size_t)n + 1, sizeof *f->put)};
    place_tensors(f, tensors, order, hlen);
    free(order);
    f->tmp = tp_write_temp(path, -1, pieces, 2, err, errlen);
    free(header);
    if (f->tmp && (f->fd = open(f->tmp, O_WRONLY | O_CLOEXEC)) < 0) {
        tp_error(err, errlen, "cannot write '%s': %s", f->tmp, strerror(errno));
        unlink(f->tmp);
    }
    if (f->fd < 0) {
        st_file_free(f);
        return -1;
    }
    *out = f;
    return 0;
}

/* len bytes at offset `at` of f, however many calls the kernel takes. */
static int write_at(const tp_st_file *f, const void *data, int64_t len, int64_t at, char *err, size_t errlen)
{
    const char *p = data;
    while (len > 0) {
        ssize_t done = pwrite(f->fd, p, (size_t)len, (off_t)at);
        if (done < 0 && errno == EINTR)
            continue;
        if (done <= 0)
            return tp_error(err, errlen, "cannot write '%s': %s", f->path,
                            done < 0 ? strerror(errno) : "nothing written");
        p += done;
        len -= done;
        at += done;
    }
    return 0;
}

int tp_st_file_put(tp_st_file *f, int i, const float *data, char *err, size_t errlen)
{
    /* the data as it is in memory: float32 little-endian on every host tprun builds for */
    if (write_at(f, data, f->bytes[i], f->at[i], err, errlen))
        return -1;
    f->missing -= !f->put[i];
    f->put[i] = true;
    return 0;
}

int tp_st_file_finish(tp_st_file *f, char *err, size_t errlen)
{
    int rc = 0;
    if (f->missing)
        rc = tp_error(err, errlen, "cannot write '%s': %d of its %d tensors were never given", f->path, f->missing,
                      f->n);
    else if (fsync(f->fd) != 0)
        rc = tp_error(err, errlen, "cannot write '%s': %s", f->path, strerror(errno));
    if (close(f->fd) != 0 && !rc)
        rc = tp_error(err, errlen, "cannot write '%s': %s", f->path, strerror(errno));
    if (!rc && rename(f->tmp, f->path) != 0)
        rc = tp_error(err, errlen, "cannot write '%s': %s", f->path, strerror(errno));
    if (rc)
        unlink(f->tmp);
    st_file_free(f);
    return rc;
}

void tp_st_file_abandon(tp_st_file *f)
{
    if (!f)
        return;
    close(f->fd);
    unlink(f->tmp);
    st_file_free(f);
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

struct tp_st_model {
    char *dir;
    tp_st_file **files;        /* model.safetensors, or the shards */
    int nfiles;
    int *file_of, *index_in;   /* per tensor (the caller's order): its file, and its place in that file's list */
    const tp_st_tensor *tensors, **order;   /* the caller's, which hold the names until the end */
    int n;
    int64_t total;
    bool sharded;
};

static void st_model_free(tp_st_model *m)
{
    free(m->dir);
    free(m->files);
    free(m->file_of);
    free(m->index_in);
    free(m->order);
    free(m);
}

/* The files: name order filled up to shard_bytes (a larger tensor alone). */
static void assign_files(tp_st_model *m, const tp_st_tensor *tensors, int64_t shard_bytes)
{
    m->nfiles = m->n ? 1 : 0;
    int64_t in_file = 0;
    for (int k = 0; k < m->n; k++) {
        int64_t b = tensor_bytes(m->order[k]);
        if (in_file > 0 && in_file + b > shard_bytes) {
            m->nfiles++;
            in_file = 0;
        }
        m->file_of[m->order[k] - tensors] = m->nfiles - 1;
        in_file += b;
        m->total += b;
    }
    m->sharded = m->total > shard_bytes;
    if (!m->sharded)
        memset(m->file_of, 0, (size_t)m->n * sizeof *m->file_of);
}

/* File f: its tensors, created with their header. */
static int create_file(tp_st_model *m, int f, const tp_st_tensor *tensors, tp_st_tensor *part, char *err,
                       size_t errlen)
{
    int k = 0;
    for (int i = 0; i < m->n; i++)
        if (m->file_of[i] == f) {
            m->index_in[i] = k;
            part[k++] = tensors[i];
        }
    char *path = m->sharded ? tp_xasprintf("%s/model-%05d-of-%05d.safetensors", m->dir, f + 1, m->nfiles)
                            : tp_xasprintf("%s/model.safetensors", m->dir);
    int rc = tp_st_file_create(&m->files[f], path, part, k, err, errlen);
    free(path);
    return rc;
}

int tp_st_model_create(tp_st_model **out, const char *dir, const tp_st_tensor *tensors, int n, int64_t shard_bytes,
                       char *err, size_t errlen)
{
    tp_st_model *m = tp_xcalloc(1, sizeof *m);
    *m = (tp_st_model){.dir = tp_xasprintf("%s", dir), .n = n, .tensors = tensors, .order = sorted(tensors, n),
                       .file_of = tp_xcalloc((size_t)n + 1, sizeof *m->file_of),
                       .index_in = tp_xcalloc((size_t)n + 1, sizeof *m->index_in)};
    assign_files(m, tensors, shard_bytes);
    int files = m->sharded ? m->nfiles : 1;
    m->files = tp_xcalloc((size_t)files + 1, sizeof *m->files);
    m->nfiles = files;
    tp_st_tensor *part = tp_xcalloc((size_t)n + 1, sizeof *part);
    int rc = 0;
    for (int f = 0; f < files && !rc; f++)
        rc = create_file(m, f, tensors, part, err, errlen);
    free(part);
    *out = m;
    if (rc) {
        tp_st_model_abandon(m);
        *out = NULL;
    }
    return rc;
}

int tp_st_model_put(tp_st_model *m, int i, const float *data, char *err, size_t errlen)
{
    return tp_st_file_put(m->files[m->file_of[i]], m->index_in[i], data, err, errlen);
}

int tp_st_model_finish(tp_st_model *m, char *err, size_t errlen)
{
    int rc = 0;
    for (int f = 0; f < m->nfiles; f++) {
        if (rc)
            tp_st_file_abandon(m->files[f]);    /* the first error is the one reported */
        else
            rc = tp_st_file_finish(m->files[f], err, errlen);
    }
    if (!rc && m->sharded) {
        int *file_of = tp_xcalloc((size_t)m->n + 1, sizeof *file_of);   /* in name order, as the index lists them */
        for (int k = 0; k < m->n; k++)
            file_of[k] = m->file_of[m->order[k] - m->tensors];
        rc = write_index(m->dir, m->order, file_of, m->n, m->nfiles, m->total, err, errlen);
        free(file_of);
    }
    st_model_free(m);
    return rc;
}

void tp_st_model_abandon(tp_st_model *m)
{
    if (!m)
        return;
    for (int f = 0; f < m->nfiles; f++)
        tp_st_file_abandon(m->files[f]);
    st_model_free(m);
}

int tp_safetensors_write_sharded(const char *dir, const tp_st_tensor *tensors, int n, int64_t shard_bytes, char *err,
                                 size_t errlen)
{
    tp_st_model *m;
    if (tp_st_model_create(&m, dir, tensors, n, shard_bytes, err, errlen))
        return -1;
    for (int i = 0; i < n; i++)
        if (tp_st_model_put(m, i, tensors[i].data, err, errlen)) {
            tp_st_model_abandon(m);
            return -1;
        }
    return tp_st_model_finish(m, err, errlen);
}
