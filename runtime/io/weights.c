/* weights.c: safetensors checkpoints (mmap'ed, validated, read slice by
 * slice) and the seeded initialisation. See weights.h. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise: posix_madvise ignores POSIX_MADV_DONTNEED on Linux */

#include "runtime/io/weights.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "sched/load.h"
#include "util/atomic_write.h"
#include "util/xalloc.h"
#include "util/errmsg.h"
#include "util/input_file.h"
#include "util/suffix.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weights.c assumes a little-endian host (safetensors data is little-endian)"
#endif

#define MAX_HEADER_BYTES (100u * 1024u * 1024u)
#define MAX_DIMS 8

/* ---- dtypes ---------------------------------------------------------------- */

typedef struct dtype_info {
    const char *name;
    size_t size;  /* bytes per element */
    int loadable; /* -1, or a tp_wdtype */
} dtype_info;

/* Every dtype of the safetensors format: all are accepted when validating a
 * file; only F32, BF16 and F16 convert to float. */
static const dtype_info DTYPES[] = {
    {"F32", 4, TP_WDTYPE_F32},  {"BF16", 2, TP_WDTYPE_BF16}, {"F16", 2, TP_WDTYPE_F16}, {"F64", 8, -1},
    {"I64", 8, -1},             {"U64", 8, -1},              {"I32", 4, -1},            {"U32", 4, -1},
    {"I16", 2, -1},             {"U16", 2, -1},              {"I8", 1, -1},             {"U8", 1, -1},
    {"BOOL", 1, -1},            {"F8_E4M3", 1, -1},          {"F8_E5M2", 1, -1},        {"F8_E8M0", 1, -1},
    {"C64", 8, -1},
};

static const dtype_info *dtype_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, name) == 0)
            return &DTYPES[i];
    return NULL;
}

/* ---- the checkpoint ------------------------------------------------------- */

typedef struct ck_file {
    char *path;          /* as shown in messages */
    const uint8_t *map;  /* the whole file, or NULL when empty */
    size_t size;
    const uint8_t *data; /* the data section: after the header */
    size_t data_size;
} ck_file;

typedef struct ck_tensor {
    char *name;
    size_t file;
    const dtype_info *dtype;
    int ndim;
    int64_t shape[MAX_DIMS];
    uint64_t begin, end; /* within the file's data section */
} ck_tensor;

struct tp_checkpoint {
    char *path;
    ck_file *files;
    size_t nfiles;
    ck_tensor *tensors; /* sorted by name once opened */
    size_t ntensors, cap;
    size_t total_bytes;
    atomic_size_t bytes_read;
    atomic_size_t rank_bytes[TP_CHECKPOINT_MAX_RANKS];
};

static void format_shape(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(buf + at, len - at, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir);
    if (n == 0)
        return tp_xstrdup(name);
    return tp_xasprintf("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
}

static bool file_exists(const char *path, bool *is_dir)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    if (is_dir)
        *is_dir = S_ISDIR(st.st_mode);
    return true;
}

/* A non-negative JSON integer, or -1. */
static int64_t json_nonneg(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

static void add_tensor(tp_checkpoint *c, const ck_tensor *t)
{
    if (c->ntensors == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->tensors = tp_xreallocarray(c->tensors, c->cap, sizeof *c->tensors);
    }
    c->tensors[c->ntensors++] = *t;
}

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Parses and validates one tensor entry of a header; appends it. */
static int parse_entry(tp_checkpoint *c, size_t fi, const char *name, json_t *v, char *err, size_t errlen)
{
    const ck_file *f = &c->files[fi];
    const char *fp = f->path;
    if (!json_is_object(v))
        return tp_error(err, errlen, "%s: tensor '%s': entry is not a JSON object", fp, name);

    json_t *jd = json_object_get(v, "dtype");
    if (!jd)
        return tp_error(err, errlen, "%s: tensor '%s': missing \"dtype\"", fp, name);
    if (!json_is_string(jd))
        return tp_error(err, errlen, "%s: tensor '%s': \"dtype\" is not a string", fp, name);
    const dtype_info *dt = dtype_lookup(json_string_value(jd));
    if (!dt)
        return tp_error(err, errlen, "%s: tensor '%s': unknown dtype '%s'", fp, name, json_string_value(jd));

    json_t *js = json_object_get(v, "shape");
    if (!js)
        return tp_error(err, errlen, "%s: tensor '%s': missing \"shape\"", fp, name);
    if (!json_is_array(js))
        return tp_error(err, errlen, "%s: tensor '%s': \"shape\" is not an array", fp, name);
    size_t nd = json_array_size(js);
    if (nd > MAX_DIMS)
        return tp_error(err, errlen, "%s: tensor '%s': shape has %zu dimensions; at most %d are supported", fp, name,
                    nd, MAX_DIMS);
    ck_tensor t = {0};
    t.dtype = dt;
    t.ndim = (int)nd;
    t.file = fi;
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        int64_t d = json_nonneg(json_array_get(js, i));
        if (d < 0)
            return tp_error(err, errlen, "%s: tensor '%s': shape entry %zu is not a non-negative integer", fp, name, i);
        t.shape[i] = d;
        if (__builtin_mul_overflow(numel, (uint64_t)d, &numel))
            overflow = true;
    }
    uint64_t need;
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)dt->size, &need))
        return tp_error(err, errlen, "%s: tensor '%s': shape is too large (element count overflows)", fp, name);

    json_t *jo = json_object_get(v, "data_offsets");
    if (!jo)
        return tp_error(err, errlen, "%s: tensor '%s': missing \"data_offsets\"", fp, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return tp_error(err, errlen, "%s: tensor '%s': \"data_offsets\" is not an array of two integers", fp, name);
    int64_t b = json_nonneg(json_array_get(jo, 0)), e = json_nonneg(json_array_get(jo, 1));
    if (b < 0 || e < 0)
        return tp_error(err, errlen, "%s: tensor '%s': \"data_offsets\" must be two non-negative integers", fp, name);
    if (b > e)
        return tp_error(err, errlen, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "): begin is past the end",
                    fp, name, b, e);
    if ((uint64_t)e > f->data_size)
        return tp_error(err, errlen,
                    "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64
                    ") run past the end of the data section (%zu bytes)",
                    fp, name, b, e, f->data_size);
    if ((uint64_t)(e - b) != need) {
        char sh[256];
        format_shape(sh, sizeof sh, t.ndim, t.shape);
        return tp_error(err, errlen,
                    "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 ") hold %" PRId64
                    " bytes, but shape %s of %s needs %" PRIu64 " bytes",
                    fp, name, b, e, e - b, sh, dt->name, need);
    }
    t.begin = (uint64_t)b;
    t.end = (uint64_t)e;
    t.name = tp_xstrdup(name);
    add_tensor(c, &t);
    c->total_bytes += (size_t)need;
    return 0;
}

/* Maps one .safetensors file and validates its header; appends its
 * tensors. */
static int load_file(tp_checkpoint *c, const char *path, char *err, size_t errlen)
{
    c->files = tp_xreallocarray(c->files, c->nfiles + 1, sizeof *c->files);
    size_t fi = c->nfiles++;
    ck_file *f = &c->files[fi];
    memset(f, 0, sizeof *f);
    f->path = tp_xstrdup(path);

    int fd = tp_input_open(path, false, err, errlen);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tp_error(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    f->size = (size_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return tp_error(err, errlen, "%s: cannot map: %s", path, strerror(e));
        }
        f->map = m;
    }
    close(fd);

    if (f->size < 8)
        return tp_error(err, errlen, "%s: file is %zu bytes, shorter than the 8-byte header length of a safetensors file",
                    path, f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f->map[i];
    /* the length is told as a bound, never as its value: those 8 bytes of
     * a file that is no safetensors file are that file's contents */
    if (n > MAX_HEADER_BYTES)
        return tp_error(err, errlen, "%s: its first 8 bytes, read as a safetensors header length, give more than "
                        "100 MiB: not a safetensors file?", path);
    if (n > f->size - 8)
        return tp_error(err, errlen, "%s: its safetensors header length runs past the end of the file (%zu bytes): "
                        "truncated, or not a safetensors file", path, f->size);
    f->data = f->map + 8 + n;
    f->data_size = f->size - 8 - (size_t)n;

    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return tp_error(err, errlen, "%s: header is not valid JSON: %s (header byte %d)", path, je.text, je.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return tp_error(err, errlen, "%s: header is not a JSON object", path);
    }

    size_t first = c->ntensors;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        if (parse_entry(c, fi, key, val, err, errlen) != 0) {
            json_decref(root);
            return -1;
        }
    }
    json_decref(root);

    /* Overlaps: sort by begin; each tensor must start at or after the end of
     * every earlier one (the one reaching furthest is enough). Empty tensors
     * occupy nothing. */
    size_t cnt = c->ntensors - first;
    span *sp = tp_xcalloc(cnt ? cnt : 1, sizeof *sp);
    size_t k = 0;
    for (size_t i = first; i < c->ntensors; i++)
        if (c->tensors[i].end > c->tensors[i].begin)
            sp[k++] = (span){c->tensors[i].begin, c->tensors[i].end, c->tensors[i].name};
    if (k > 1)
        qsort(sp, k, sizeof *sp, cmp_span);
    int rc = 0;
    for (size_t i = 1, far = 0; i < k; i++) {
        if (sp[i].begin < sp[far].end) {
            rc = tp_error(err, errlen,
                      "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 ") overlap '%s' [%" PRIu64 ", %" PRIu64 ")",
                      path, sp[far].name, sp[far].begin, sp[far].end, sp[i].name, sp[i].begin, sp[i].end);
            break;
        }
        if (sp[i].end > sp[far].end)
            far = i;
    }
    free(sp);
    return rc;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const ck_tensor *)a)->name, ((const ck_tensor *)b)->name);
}

static const ck_tensor *find_tensor(const tp_checkpoint *c, const char *name)
{
    if (c->ntensors == 0 || !name)
        return NULL;
    ck_tensor key = {.name = (char *)name};
    return bsearch(&key, c->tensors, c->ntensors, sizeof *c->tensors, cmp_tensor_name);
}

static char *read_small_file(const char *path, size_t limit, size_t *len, char *err, size_t errlen)
{
    FILE *fp = tp_input_fopen(path, err, errlen);
    if (!fp)
        return NULL;
    tp_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0) {
        tp_buf_append_n(&b, chunk, n);
        if (b.len > limit) {
            fclose(fp);
            tp_buf_free(&b);
            tp_error(err, errlen, "%s: file is absurdly large (over %zu bytes)", path, limit);
            return NULL;
        }
    }
    bool bad = ferror(fp);
    fclose(fp);
    if (bad) {
        tp_buf_free(&b);
        tp_error(err, errlen, "%s: read error", path);
        return NULL;
    }
    *len = b.len;
    return tp_buf_take(&b);
}

static int load_index(tp_checkpoint *c, const char *index_path, char *err, size_t errlen)
{
    size_t len;
    char *text = read_small_file(index_path, MAX_HEADER_BYTES, &len, err, errlen);
    if (!text)
        return -1;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        return tp_error(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", index_path, je.text, je.line,
                    je.column);
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(root);
        return tp_error(err, errlen, "%s: no \"weight_map\" object mapping tensor names to files", index_path);
    }

    char *dir = tp_path_parent(index_path);
    int rc = 0;
    const char *key;
    json_t *val;
    /* Shards in order of first mention; each mapped once. */
    char **names = NULL;
    size_t nnames = 0;
    json_object_foreach(wm, key, val)
    {
        if (!json_is_string(val)) {
            rc = tp_error(err, errlen, "%s: tensor '%s': the file it maps to is not a string", index_path, key);
            break;
        }
        const char *file = json_string_value(val);
        if (file[0] == '\0' || file[0] == '/' || strcmp(file, "..") == 0 || strncmp(file, "../", 3) == 0 ||
            strstr(file, "/../") || tp_ends_with(file, "/..")) {
            rc = tp_error(err, errlen, "%s: tensor '%s': file '%s' is not a path inside the checkpoint directory",
                      index_path, key, file);
            break;
        }
        bool seen = false;
        for (size_t i = 0; i < nnames && !seen; i++)
            seen = strcmp(names[i], file) == 0;
        if (seen)
            continue;
        char *full = path_join(dir, file);
        bool is_dir = false;
        if (!file_exists(full, &is_dir) || is_dir) {
            rc = tp_error(err, errlen, "%s: tensor '%s' is mapped to '%s', which does not exist (looked for %s)",
                      index_path, key, file, full);
            free(full);
            break;
        }
        names = tp_xreallocarray(names, nnames + 1, sizeof *names);
        names[nnames++] = tp_xstrdup(file);
        rc = load_file(c, full, err, errlen);
        free(full);
        if (rc != 0)
            break;
    }

    if (rc == 0) {
        /* Duplicates across shards (within one file, the JSON parser already
         * rejects them). */
        if (c->ntensors > 1)
            qsort(c->tensors, c->ntensors, sizeof *c->tensors, cmp_tensor_name);
        for (size_t i = 1; i < c->ntensors; i++)
            if (strcmp(c->tensors[i - 1].name, c->tensors[i].name) == 0) {
                rc = tp_error(err, errlen, "%s: tensor '%s' is in two shards: %s and %s", index_path,
                          c->tensors[i].name, c->files[c->tensors[i - 1].file].path,
                          c->files[c->tensors[i].file].path);
                break;
            }
    }
    if (rc == 0) {
        json_object_foreach(wm, key, val)
        {
            const ck_tensor *t = find_tensor(c, key);
            const char *file = json_string_value(val);
            if (!t) {
                rc = tp_error(err, errlen, "%s: tensor '%s' is mapped to '%s', which has no such tensor", index_path, key,
                          file);
                break;
            }
            char *full = path_join(dir, file);
            bool same = strcmp(c->files[t->file].path, full) == 0;
            if (!same) {
                rc = tp_error(err, errlen, "%s: tensor '%s' is mapped to '%s', but it is in %s", index_path, key, file,
                          c->files[t->file].path);
                free(full);
                break;
            }
            free(full);
        }
    }
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    free(dir);
    json_decref(root);
    return rc;
}

int tp_checkpoint_open(tp_checkpoint **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    tp_checkpoint *c = tp_xcalloc(1, sizeof *c);
    c->path = tp_xstrdup(path);
    atomic_init(&c->bytes_read, 0);
    for (int i = 0; i < TP_CHECKPOINT_MAX_RANKS; i++)
        atomic_init(&c->rank_bytes[i], 0);

    int rc;
    bool is_dir = false;
    if (!file_exists(path, &is_dir)) {
        rc = tp_error(err, errlen, "%s: no such file or directory", path);
    } else if (is_dir) {
        char *index = path_join(path, "model.safetensors.index.json");
        char *single = path_join(path, "model.safetensors");
        if (file_exists(index, NULL))
            rc = load_index(c, index, err, errlen);
        else if (file_exists(single, NULL))
            rc = load_file(c, single, err, errlen);
        else
            rc = tp_error(err, errlen, "%s: directory holds neither model.safetensors nor model.safetensors.index.json",
                      path);
        free(index);
        free(single);
    } else if (tp_ends_with(path, ".json")) {
        rc = load_index(c, path, err, errlen);
    } else {
        rc = load_file(c, path, err, errlen);
    }
    if (rc == 0 && c->nfiles == 1 && c->ntensors > 1)
        qsort(c->tensors, c->ntensors, sizeof *c->tensors, cmp_tensor_name);
    if (rc != 0) {
        tp_checkpoint_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

void tp_checkpoint_close(tp_checkpoint *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nfiles; i++) {
        if (c->files[i].map)
            munmap((void *)c->files[i].map, c->files[i].size);
        free(c->files[i].path);
    }
    free(c->files);
    for (size_t i = 0; i < c->ntensors; i++)
        free(c->tensors[i].name);
    free(c->tensors);
    free(c->path);
    free(c);
}

size_t tp_checkpoint_bytes_read(const tp_checkpoint *c)
{
    return atomic_load_explicit(&((tp_checkpoint *)c)->bytes_read, memory_order_relaxed);
}

size_t tp_checkpoint_bytes_read_rank(const tp_checkpoint *c, int rank)
{
    if (rank < 0 || rank >= TP_CHECKPOINT_MAX_RANKS)
        return 0;
    return atomic_load_explicit(&((tp_checkpoint *)c)->rank_bytes[rank], memory_order_relaxed);
}

size_t tp_checkpoint_total_bytes(const tp_checkpoint *c)
{
    return c->total_bytes;
}

size_t tp_checkpoint_num_tensors(const tp_checkpoint *c)
{
    return c->ntensors;
}

const char *tp_checkpoint_tensor_name(const tp_checkpoint *c, size_t i)
{
    return c->tensors[i].name;
}

int tp_checkpoint_tensor_info(const tp_checkpoint *c, const char *name, const char **dtype_name, int *ndim,
                              int64_t shape[8])
{
    const ck_tensor *t = find_tensor(c, name);
    if (!t)
        return -1;
    if (dtype_name)
        *dtype_name = t->dtype->name;
    if (ndim)
        *ndim = t->ndim;
    if (shape)
        for (int i = 0; i < t->ndim; i++)
            shape[i] = t->shape[i];
    return 0;
}

/* ---- conversions ---------------------------------------------------------- */

static inline float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float tp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: mant * 2^-24; normalise */
            uint32_t e = 113; /* exponent of 2^-14 (127 - 14) */
            while (!(mant & 0x400u)) {
                mant <<= 1;
                e--;
            }
            bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf, nan (payload kept) */
    } else {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    return bits_to_f32(bits);
}

static void convert(int dtype, const uint8_t *src, float *dst, int64_t n)
{
    switch (dtype) {
    case TP_WDTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case TP_WDTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = bits_to_f32((uint32_t)(src[2 * i] | src[2 * i + 1] << 8) << 16);
        break;
    case TP_WDTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = tp_f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        break;
    }
}

/* ---- slices --------------------------------------------------------------- */

/* A slice resolved to a 2-D view: the logical tensor is R x C (1 x n for a
 * vector), padded to PR x PC, and dst receives rows [r0, r1) x columns
 * [c0, c1) of the padded view. */
typedef struct view {
    int ndim;
    int64_t R, C, PR, PC;
    int64_t r0, r1, c0, c1;
} view;

static int resolve(const tp_weight_slice *s, view *v, char *err, size_t errlen)
{
    const char *name = s->name ? s->name : "(null)";
    int ndim = s->ndim ? s->ndim : (s->shape[1] == 0 ? 1 : 2);
    if (ndim != 1 && ndim != 2)
        return tp_error(err, errlen, "tensor '%s': ndim %d is not supported (1 or 2)", name, s->ndim);
    int64_t shape[2] = {s->shape[0], ndim == 2 ? s->shape[1] : 1};
    bool no_logical = s->logical[0] == 0 && s->logical[1] == 0;
    int64_t logical[2] = {no_logical ? shape[0] : s->logical[0],
                          ndim == 2 ? (no_logical ? shape[1] : s->logical[1]) : 1};
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || logical[i] < 0)
            return tp_error(err, errlen, "tensor '%s': negative size in dimension %d", name, i);
        if (logical[i] > shape[i])
            return tp_error(err, errlen,
                        "tensor '%s': checkpoint size %" PRId64 " of dimension %d exceeds the padded size %" PRId64,
                        name, logical[i], i, shape[i]);
    }
    int64_t numel;
    if (__builtin_mul_overflow(shape[0], shape[1], &numel) || numel > (int64_t)(SIZE_MAX / sizeof(float)))
        return tp_error(err, errlen, "tensor '%s': shape is too large", name);
    v->ndim = ndim;
    if (ndim == 2) {
        v->R = logical[0], v->C = logical[1], v->PR = shape[0], v->PC = shape[1];
    } else {
        v->R = 1, v->C = logical[0], v->PR = 1, v->PC = shape[0];
    }
    v->r0 = 0, v->r1 = v->PR, v->c0 = 0, v->c1 = v->PC;
    if (s->dim == -1)
        return 0;
    if (s->dim < 0 || s->dim >= ndim)
        return tp_error(err, errlen, "tensor '%s': cannot slice dimension %d of a %d-D tensor", name, s->dim, ndim);
    int64_t size = shape[s->dim];
    if (s->offset < 0 || s->length < 0 || s->offset > size || s->length > size - s->offset)
        return tp_error(err, errlen,
                    "tensor '%s' (rank %d): slice [%" PRId64 ", %" PRId64 ") of dimension %d is outside its padded "
                    "size %" PRId64,
                    name, s->rank, s->offset, s->offset + s->length, s->dim, size);
    bool rows = ndim == 2 && s->dim == 0;
    if (rows)
        v->r0 = s->offset, v->r1 = s->offset + s->length;
    else
        v->c0 = s->offset, v->c1 = s->offset + s->length;
    return 0;
}

int64_t tp_weight_slice_numel(const tp_weight_slice *s)
{
    view v;
    if (resolve(s, &v, NULL, 0) != 0)
        return -1;
    return (v.r1 - v.r0) * (v.c1 - v.c0);
}

/* Edit distance, for "did you mean". */
static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    size_t *row = tp_xmalloc((m + 1) * sizeof *row);
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[m];
    free(row);
    return d;
}

/* A tensor whose name is one component-boundary suffix/prefix away (a
 * missing or extra "model." / "transformer."), or a close misspelling. */
static const char *suggest(const tp_checkpoint *c, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < c->ntensors; i++) {
        const char *t = c->tensors[i].name;
        size_t m = strlen(t);
        if (m > n && t[m - n - 1] == '.' && strcmp(t + m - n, name) == 0)
            return t;
        if (n > m && name[n - m - 1] == '.' && strcmp(name + n - m, t) == 0)
            return t;
    }
    const char *best = NULL;
    size_t best_d = n / 5 > 2 ? n / 5 : 2;
    best_d++;
    if (c->ntensors > 100000)
        return NULL;
    for (size_t i = 0; i < c->ntensors; i++) {
        const char *t = c->tensors[i].name;
        size_t m = strlen(t);
        if ((m > n ? m - n : n - m) >= best_d)
            continue;
        size_t d = edit_distance(name, t);
        if (d < best_d)
            best_d = d, best = t;
    }
    return best;
}

/* Rows [row0, row0 + nrows) of the slice's output (one row for a 1-D
 * slice): checked against the slice, then narrowed in v to the file rows
 * (2-D) they come from. */
static int narrow_rows(const tp_weight_slice *s, view *v, int64_t row0, int64_t nrows, char *err, size_t errlen)
{
    int64_t rows = v->ndim == 2 ? v->r1 - v->r0 : 1;
    if (row0 < 0 || nrows < 0 || row0 > rows || nrows > rows - row0)
        return tp_error(err, errlen, "tensor '%s': rows [%" PRId64 ", %" PRId64 ") are outside the slice's %" PRId64,
                        s->name ? s->name : "(null)", row0, row0 + nrows, rows);
    if (v->ndim == 2)
        v->r0 += row0, v->r1 = v->r0 + nrows;
    else if (nrows == 0)
        v->c1 = v->c0;
    return 0;
}

int tp_weight_slice_rows(const tp_weight_slice *s, int64_t *rows, int64_t *width)
{
    view v;
    if (resolve(s, &v, NULL, 0) != 0)
        return -1;
    *rows = v.ndim == 2 ? v.r1 - v.r0 : 1;
    *width = v.c1 - v.c0;
    return 0;
}

/* The file's pages under [p, p + n) leave this process once read: a rank
 * touches each weight once, and a mapping left resident would hold a second
 * copy of the weights it has just converted into the backend's memory.
 * The page cache itself is kept (it is not this process's memory, the
 * kernel reclaims it under pressure, and other ranks on the node may still
 * be reading the same file). Rounding out to whole pages is safe: a page
 * another tensor shares is read again from the file if touched. */
/* File bytes read between two releases: a large tensor (a 128k vocab's
 * embedding is 2 GiB in fp32) is never resident whole. */
#define RELEASE_BYTES ((size_t)8 << 20)

static void release_pages(const uint8_t *p, size_t n)
{
    if (n == 0)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = ((uintptr_t)p + n + page - 1) & ~(page - 1);
    /* advice only: a failure leaves the pages mapped, never wrong data */
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int tp_checkpoint_read(tp_checkpoint *c, const tp_weight_slice *s, float *dst, char *err, size_t errlen)
{
    int64_t rows, width;
    if (tp_weight_slice_rows(s, &rows, &width) != 0)
        rows = 0; /* tp_checkpoint_read_rows says what is wrong */
    return tp_checkpoint_read_rows(c, s, 0, rows, dst, err, errlen);
}

int tp_checkpoint_read_rows(tp_checkpoint *c, const tp_weight_slice *s, int64_t row0, int64_t nrows, float *dst,
                            char *err, size_t errlen)
{
    if (!s->name)
        return tp_error(err, errlen, "%s: a slice without a tensor name", c->path);
    view v;
    if (resolve(s, &v, err, errlen) != 0)
        return -1;
    int64_t want[2] = {v.ndim == 2 ? v.R : v.C, v.C};
    char want_s[128];
    format_shape(want_s, sizeof want_s, v.ndim, want);

    const ck_tensor *t = find_tensor(c, s->name);
    if (!t) {
        const char *hint = suggest(c, s->name);
        return tp_error(err, errlen, "%s: checkpoint has no tensor '%s' (expected shape %s)%s%s%s", c->path, s->name,
                    want_s, hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
    }
    const char *fp = c->files[t->file].path;

    bool match = t->ndim == v.ndim && t->shape[0] == want[0] && (v.ndim == 1 || t->shape[1] == want[1]);
    if (!match && s->ndim == 0) {
        /* [n] and [n, 1] hold the same bytes */
        if (t->ndim == 1 && v.ndim == 2 && v.C == 1 && t->shape[0] == v.R)
            match = true;
        if (t->ndim == 2 && v.ndim == 1 && t->shape[1] == 1 && t->shape[0] == v.C)
            match = true;
    }
    if (!match) {
        char have_s[256];
        format_shape(have_s, sizeof have_s, t->ndim, t->shape);
        const char *hint = "";
        if (v.ndim == 2 && t->ndim == 2 && t->shape[0] == want[1] && t->shape[1] == want[0])
            hint = " (it is transposed: a Conv1D [in, out] layout? tprun expects nn.Linear's [out, in])";
        else if (v.ndim == 2 && t->ndim == 2 && t->shape[0] == v.PR && t->shape[1] == v.PC)
            hint = " (the checkpoint is already padded: pass logical = shape)";
        return tp_error(err, errlen, "%s: tensor '%s' has shape %s, expected %s%s", fp, s->name, have_s, want_s, hint);
    }
    if (t->dtype->loadable < 0)
        return tp_error(err, errlen, "%s: tensor '%s' has dtype %s, which tprun cannot load (supported: F32, BF16, F16)",
                    fp, s->name, t->dtype->name);
    if (narrow_rows(s, &v, row0, nrows, err, errlen) != 0)
        return -1;

    const uint8_t *base = c->files[t->file].data + t->begin;
    size_t es = t->dtype->size;
    int dt = t->dtype->loadable;
    int64_t w = v.c1 - v.c0;
    int64_t cend = v.c1 < v.C ? v.c1 : v.C; /* columns read from the file: [c0, cend) */
    int64_t ncopy = cend > v.c0 ? cend - v.c0 : 0;
    size_t bytes = 0;
    const uint8_t *first = NULL, *last = NULL; /* the file bytes read and not yet released: [first, last) */
    for (int64_t r = v.r0; r < v.r1; r++) {
        float *out = dst + (r - v.r0) * w;
        int64_t got = 0;
        if (r < v.R && ncopy > 0) {
            const uint8_t *from = base + ((size_t)r * (size_t)v.C + (size_t)v.c0) * es;
            convert(dt, from, out, ncopy);
            got = ncopy;
            bytes += (size_t)ncopy * es;
            first = first ? first : from;
            last = from + (size_t)ncopy * es;
            if ((size_t)(last - first) >= RELEASE_BYTES) {
                release_pages(first, (size_t)(last - first));
                first = NULL;
            }
        }
        if (got < w)
            memset(out + got, 0, (size_t)(w - got) * sizeof *out);
    }
    if (first)
        release_pages(first, (size_t)(last - first));
    atomic_fetch_add_explicit(&c->bytes_read, bytes, memory_order_relaxed);
    if (s->rank >= 0 && s->rank < TP_CHECKPOINT_MAX_RANKS)
        atomic_fetch_add_explicit(&c->rank_bytes[s->rank], bytes, memory_order_relaxed);
    return 0;
}

/* ---- seeded initialisation ------------------------------------------------ */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

#define GOLDEN 0x9E3779B97F4A7C15ull

static inline float seeded_normal(uint64_t key, uint64_t k)
{
    /* 0.02 * sqrt(3) / 2^32: four U(0, 2^32) sum to mean 2^33, variance
     * 4 * 2^64 / 12, so (sum - 2^33) * this has standard deviation 0.02 */
    static const double scale = 0.02 * 1.7320508075688772 / 4294967296.0;
    uint64_t a = mix64(key + (2 * k + 1) * GOLDEN);
    uint64_t b = mix64(key + (2 * k + 2) * GOLDEN);
    uint64_t sum = (a & 0xffffffffu) + (a >> 32) + (b & 0xffffffffu) + (b >> 32);
    int64_t centred = (int64_t)sum - (int64_t)(1ull << 33);
    return (float)((double)centred * scale);
}

int64_t tp_weight_init_seeded(const tp_weight_slice *s, uint64_t seed, float *dst)
{
    int64_t rows, width;
    if (tp_weight_slice_rows(s, &rows, &width) != 0)
        return -1;
    return tp_weight_init_seeded_rows(s, seed, 0, rows, dst);
}

int64_t tp_weight_init_seeded_rows(const tp_weight_slice *s, uint64_t seed, int64_t row0, int64_t nrows, float *dst)
{
    view v;
    if (resolve(s, &v, NULL, 0) != 0 || narrow_rows(s, &v, row0, nrows, NULL, 0) != 0)
        return -1;
    const char *name = s->name ? s->name : "";
    int constant = -1; /* -1: random; else the value 0 or 1 */
    if (v.ndim == 1 && (strstr(name, "norm") || strstr(name, "ln_"))) {
        if (tp_ends_with(name, "weight"))
            constant = 1;
        else if (tp_ends_with(name, "bias"))
            constant = 0;
    }
    uint64_t key = mix64(fnv1a64(name) ^ seed);
    int64_t w = v.c1 - v.c0;
    for (int64_t r = v.r0; r < v.r1; r++) {
        float *out = dst + (r - v.r0) * w;
        for (int64_t j = v.c0; j < v.c1; j++) {
            float x = 0.0f;
            if (r < v.R && j < v.C)
                x = constant >= 0 ? (float)constant : seeded_normal(key, (uint64_t)(r * v.C + j));
            out[j - v.c0] = x;
        }
    }
    return (v.r1 - v.r0) * w;
}

tp_weight_slice tr_weight_slice(const tr_weight *w, int rank, int k)
{
    tp_weight_slice s = {0};
    s.name = w->name;
    s.rank = rank;
    s.ndim = w->rank;
    for (int d = 0; d < w->rank; d++) {
        s.shape[d] = w->shape[d];
        s.logical[d] = w->logical[d];
    }
    s.dim = w->dim;
    if (w->nsegments) {
        s.offset = w->offset[k];
        s.length = w->length[k];
    }
    return s;
}
