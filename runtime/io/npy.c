/* npy.c: see npy.h. */
#define _POSIX_C_SOURCE 200809L

#include "runtime/io/npy.h"
#include "util/atomic_write.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/xalloc.h"
#include "util/errmsg.h"
#include "util/input_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

static void append_shape(tp_buf *b, const int64_t *shape, int ndim)
{
    tp_buf_append(b, "(");
    for (int i = 0; i < ndim; i++)
        tp_buf_appendf(b, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (ndim == 1)
        tp_buf_append(b, ",");
    tp_buf_append(b, ")");
}

/* ---- writing -------------------------------------------------------------- */

int tp_npy_write(const char *path, tp_npy_dtype dtype, const void *data, const int64_t *shape, int ndim, char *err,
                 size_t errlen)
{
    if (ndim < 0 || ndim > TP_NPY_MAX_DIMS)
        return tp_error(err, errlen, "%s: cannot write a %d-dimensional array (at most %d)", path, ndim,
                    TP_NPY_MAX_DIMS);
    if (dtype != TP_NPY_F32 && dtype != TP_NPY_I32)
        return tp_error(err, errlen, "%s: unsupported dtype", path);
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return tp_error(err, errlen, "%s: negative dimension %" PRId64, path, shape[i]);
        if (__builtin_mul_overflow(count, (uint64_t)shape[i], &count) || count > SIZE_MAX / 4)
            return tp_error(err, errlen, "%s: array too large", path);
    }
    size_t bytes = (size_t)count * 4;

    tp_buf h = {0};
    tp_buf_appendf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': ", dtype == TP_NPY_F32 ? "<f4" : "<i4");
    append_shape(&h, shape, ndim);
    tp_buf_append(&h, ", }");
    /* magic (6) + version (2) + length (2) + dict + padding + '\n' = 64k */
    size_t total = 10 + h.len + 1;
    size_t pad = (64 - total % 64) % 64;
    tp_buf_append_char(&h, ' ', pad);
    tp_buf_append(&h, "\n");
    if (h.len > 65535) {
        tp_buf_free(&h);
        return tp_error(err, errlen, "%s: header too long", path);
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(h.len & 0xff),
                             (unsigned char)(h.len >> 8)};

    tp_bytes pieces[] = {{pre, sizeof pre}, {h.data, h.len}, {data, bytes}};
    int rc = tp_write_file_atomic(path, pieces, 3, err, errlen);
    tp_buf_free(&h);
    return rc;
}

int tp_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim, char *err, size_t errlen)
{
    return tp_npy_write(path, TP_NPY_F32, data, shape, ndim, err, errlen);
}

int tp_npy_write_i32(const char *path, const int32_t *data, const int64_t *shape, int ndim, char *err, size_t errlen)
{
    return tp_npy_write(path, TP_NPY_I32, data, shape, ndim, err, errlen);
}

/* ---- reading: the header dict, a Python literal ---------------------------- */

typedef struct hdr {
    const char *p, *end;
    char descr[32];
    bool has_descr, has_order, has_shape, fortran;
    int ndim;
    int64_t shape[TP_NPY_MAX_DIMS];
    const char *problem;
} hdr;

static void skip_ws(hdr *h)
{
    while (h->p < h->end && isspace((unsigned char)*h->p))
        h->p++;
}

static bool accept(hdr *h, char c)
{
    skip_ws(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return true;
    }
    return false;
}

/* A quoted string into buf (truncated to len - 1). */
static bool parse_str(hdr *h, char *buf, size_t len)
{
    skip_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return false;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\')
            return false;
        if (n + 1 < len)
            buf[n++] = *h->p;
        h->p++;
    }
    if (h->p >= h->end)
        return false;
    h->p++;
    buf[n] = '\0';
    return true;
}

static bool parse_word(hdr *h, const char *w)
{
    skip_ws(h);
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) >= n && memcmp(h->p, w, n) == 0) {
        h->p += n;
        return true;
    }
    return false;
}

static bool parse_shape(hdr *h)
{
    if (!accept(h, '('))
        return false;
    h->ndim = 0;
    for (;;) {
        if (accept(h, ')'))
            return true;
        skip_ws(h);
        if (h->p >= h->end || !isdigit((unsigned char)*h->p))
            return false;
        int64_t v = 0;
        while (h->p < h->end && isdigit((unsigned char)*h->p)) {
            if (v > (INT64_MAX - 9) / 10)
                return false;
            v = v * 10 + (*h->p++ - '0');
        }
        if (h->p < h->end && *h->p == 'L') /* Python 2 longs */
            h->p++;
        if (h->ndim == TP_NPY_MAX_DIMS) {
            h->problem = "too many dimensions";
            return false;
        }
        h->shape[h->ndim++] = v;
        if (!accept(h, ',')) {
            return accept(h, ')');
        }
    }
}

static bool parse_header(hdr *h)
{
    if (!accept(h, '{'))
        return false;
    for (;;) {
        if (accept(h, '}'))
            break;
        char key[32];
        if (!parse_str(h, key, sizeof key) || !accept(h, ':'))
            return false;
        if (strcmp(key, "descr") == 0) {
            skip_ws(h);
            if (h->p < h->end && *h->p == '[') {
                h->problem = "a structured dtype";
                return false;
            }
            if (!parse_str(h, h->descr, sizeof h->descr))
                return false;
            h->has_descr = true;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (parse_word(h, "True"))
                h->fortran = true;
            else if (parse_word(h, "False"))
                h->fortran = false;
            else
                return false;
            h->has_order = true;
        } else if (strcmp(key, "shape") == 0) {
            if (!parse_shape(h))
                return false;
            h->has_shape = true;
        } else {
            h->problem = "an unknown key";
            return false;
        }
        if (!accept(h, ',')) {
            if (!accept(h, '}'))
                return false;
            break;
        }
    }
    skip_ws(h);
    return h->p == h->end;
}

static const char *dtype_hint(const char *d)
{
    if (strlen(d) < 2)
        return "";
    switch (d[1]) {
    case 'f':
        return " (a float array)";
    case 'u':
        return " (an unsigned array)";
    case 'b':
        return " (a bool array)";
    case 'c':
        return " (a complex array)";
    case 'U':
    case 'S':
        return " (a string array)";
    case 'O':
        return " (an object array)";
    }
    return "";
}

static void shape_text(char *buf, size_t len, const int64_t *shape, int ndim)
{
    tp_buf b = {0};
    append_shape(&b, shape, ndim);
    snprintf(buf, len, "%s", b.data);
    tp_buf_free(&b);
}

/* What a reader accepts: returns the item size of h->descr, or 0 after
 * writing a message to err. */
typedef size_t (*npy_check)(const char *path, const hdr *h, char *err, size_t errlen);

/* Reads and checks the header of the .npy file open as fp (at its start),
 * and the file's size against the shape. On success fp is at the first element, *count items of the size check()
 * returned follow. */
static int npy_open(FILE *fp, const char *path, npy_check check, hdr *h, uint64_t *count, size_t *isz, char *err,
                    size_t errlen)
{
    int rc = -1;
    char *htext = NULL;
    unsigned char pre[12];
    if (fread(pre, 1, 8, fp) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        tp_error(err, errlen, "%s: not a NumPy .npy file (no \\x93NUMPY magic)", path);
        goto done;
    }
    int major = pre[6], minor = pre[7];
    size_t hlen;
    if (major == 1) {
        if (fread(pre + 8, 1, 2, fp) != 2) {
            tp_error(err, errlen, "%s: truncated .npy header", path);
            goto done;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 8, 1, 4, fp) != 4) {
            tp_error(err, errlen, "%s: truncated .npy header", path);
            goto done;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        if (hlen > (64u << 20)) {
            tp_error(err, errlen, "%s: .npy header length %zu is absurd", path, hlen);
            goto done;
        }
    } else {
        tp_error(err, errlen, "%s: unsupported .npy format version %d.%d", path, major, minor);
        goto done;
    }
    htext = tp_xmalloc(hlen + 1);
    if (fread(htext, 1, hlen, fp) != hlen) {
        tp_error(err, errlen, "%s: truncated .npy header (%zu bytes announced)", path, hlen);
        goto done;
    }
    htext[hlen] = '\0';
    *h = (hdr){.p = htext, .end = htext + hlen};
    if (!parse_header(h) || !h->has_descr || !h->has_order || !h->has_shape) {
        tp_error(err, errlen, "%s: cannot parse the .npy header%s%s: %.*s", path, h->problem ? ": " : "",
             h->problem ? h->problem : "", (int)(hlen > 200 ? 200 : hlen), htext);
        goto done;
    }
    *isz = check(path, h, err, errlen);
    if (*isz == 0)
        goto done;
    /* Fortran order is the same bytes as C order when at most one
     * dimension exceeds 1 (vectors, 1 x n, ...). */
    int big = 0;
    for (int i = 0; i < h->ndim; i++)
        big += h->shape[i] > 1;
    if (h->fortran && big > 1) {
        tp_error(err, errlen, "%s: the array is in Fortran order; save a C-order array (np.ascontiguousarray(a))", path);
        goto done;
    }
    uint64_t n = 1;
    for (int i = 0; i < h->ndim; i++) {
        if (__builtin_mul_overflow(n, (uint64_t)h->shape[i], &n) || n > (SIZE_MAX / 8)) {
            tp_error(err, errlen, "%s: array too large", path);
            goto done;
        }
    }
    size_t bytes = (size_t)n * *isz;
    /* the size before anything is allocated: a header may announce any shape */
    struct stat st;
    long here = ftell(fp);
    if (fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) && here >= 0 &&
        (uint64_t)st.st_size >= (uint64_t)here && (uint64_t)st.st_size - (uint64_t)here < bytes) {
        tp_error(err, errlen, "%s: data is truncated: %" PRIu64 " of %zu bytes", path,
             (uint64_t)st.st_size - (uint64_t)here, bytes);
        goto done;
    }
    *count = n;
    rc = 0;
done:
    free(htext);
    h->p = h->end = NULL;      /* they pointed into htext */
    return rc;
}

/* Reads the header and the data of a .npy file. On success *raw holds
 * *count items of the size check() returned (malloc'ed, never NULL). */
static int npy_load(const char *path, npy_check check, hdr *h, void **raw, size_t *count, size_t *isz, char *err,
                    size_t errlen)
{
    *raw = NULL;
    FILE *fp = tp_input_fopen(path, err, errlen);
    if (!fp)
        return -1;
    uint64_t n;
    int rc = npy_open(fp, path, check, h, &n, isz, err, errlen);
    if (!rc) {
        size_t bytes = (size_t)n * *isz;
        *raw = tp_xmalloc(bytes);
        size_t got = bytes ? fread(*raw, 1, bytes, fp) : 0;
        *count = (size_t)n;
        if (got != bytes) {
            rc = tp_error(err, errlen, "%s: data is truncated: %zu of %zu bytes", path, got, bytes);
            free(*raw);
            *raw = NULL;
        }
    }
    fclose(fp);
    return rc;
}

/* The integer dtypes token ids come in: NumPy's int32 and int64, and the
 * uint16 and uint32 that tokenised corpora are stored as (GPT-2's 50257
 * ids fit uint16; Llama 3's 128256 need uint32). */
static const struct { const char *descr; size_t size; bool is_signed; } token_dtypes[] = {
    {"<i4", 4, true}, {"<i8", 8, true}, {"<u2", 2, false}, {"<u4", 4, false},
};

static int token_dtype(const char *descr)
{
    for (int i = 0; i < (int)(sizeof token_dtypes / sizeof token_dtypes[0]); i++)
        if (!strcmp(descr, token_dtypes[i].descr))
            return i;
    return -1;
}

static size_t check_tokens(const char *path, const hdr *h, char *err, size_t errlen)
{
    int t = token_dtype(h->descr);
    if (t < 0) {
        tp_error(err, errlen,
             "%s: token ids must be int32 ('<i4'), int64 ('<i8'), uint16 ('<u2') or uint32 ('<u4'), but the array "
             "has dtype '%s'%s; convert with ids.astype(np.int32)",
             path, h->descr, dtype_hint(h->descr));
        return 0;
    }
    if (h->ndim != 1 && h->ndim != 2) {
        char sh[256];
        shape_text(sh, sizeof sh, h->shape, h->ndim);
        tp_error(err, errlen, "%s: token ids must be 1-D [seq] or 2-D [batch, seq], but the array has shape %s", path, sh);
        return 0;
    }
    return token_dtypes[t].size;
}

int64_t tp_npy_token_value(const unsigned char *p, size_t item, bool is_signed)
{
    uint64_t u = 0;
    for (size_t b = 0; b < item; b++)        /* little-endian, whatever the host */
        u |= (uint64_t)p[b] << (8 * b);
    return is_signed && item == 4 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
}

int tp_npy_token_header(FILE *fp, const char *path, tp_npy_token_layout *out, char *err, size_t errlen)
{
    hdr h;
    uint64_t count;
    size_t isz;
    if (npy_open(fp, path, check_tokens, &h, &count, &isz, err, errlen))
        return -1;
    long here = ftell(fp);
    if (here < 0)
        return tp_error(err, errlen, "%s: cannot tell where its data starts: %s", path, strerror(errno));
    *out = (tp_npy_token_layout){.offset = here, .ndim = h.ndim, .item = isz,
                                 .is_signed = token_dtypes[token_dtype(h.descr)].is_signed};
    out->shape[0] = h.shape[0];
    out->shape[1] = h.ndim == 2 ? h.shape[1] : 0;
    return 0;
}

int tp_npy_read_tokens(const char *path, int32_t **out, int64_t shape[2], int *ndim, char *err, size_t errlen)
{
    *out = NULL;
    hdr h;
    void *raw;
    size_t count, isz;
    if (npy_load(path, check_tokens, &h, &raw, &count, &isz, err, errlen) != 0)
        return -1;
    int32_t *ids = tp_xmalloc(count ? count * 4 : 4);
    bool is_signed = token_dtypes[token_dtype(h.descr)].is_signed;
    for (size_t i = 0; i < count; i++) {
        int64_t v = tp_npy_token_value((const unsigned char *)raw + isz * i, isz, is_signed);
        if (v < INT32_MIN || v > INT32_MAX) {
            tp_error(err, errlen, "%s: token id %" PRId64 "%s at flat index %zu does not fit in int32", path, v,
                     is_signed ? "" : " (unsigned)", i);
            free(ids);
            free(raw);
            return -1;
        }
        ids[i] = (int32_t)v;
    }
    free(raw);
    *out = ids;
    *ndim = h.ndim;
    shape[0] = h.shape[0];
    shape[1] = h.ndim == 2 ? h.shape[1] : 0;
    return 0;
}

static size_t check_float(const char *path, const hdr *h, char *err, size_t errlen)
{
    if (strcmp(h->descr, "<f4") == 0)
        return 4;
    if (strcmp(h->descr, "<f8") == 0)
        return 8;
    tp_error(err, errlen, "%s: expected a float32 ('<f4') or float64 ('<f8') array, but it has dtype '%s'%s", path,
         h->descr, dtype_hint(h->descr));
    return 0;
}

int tp_npy_read_f32(const char *path, float **out, int64_t shape[TP_NPY_MAX_DIMS], int *ndim, char *err,
                    size_t errlen)
{
    *out = NULL;
    hdr h;
    void *raw;
    size_t count, isz;
    if (npy_load(path, check_float, &h, &raw, &count, &isz, err, errlen) != 0)
        return -1;
    float *v = tp_xmalloc(count ? count * 4 : 4);
    if (isz == 4) {
        memcpy(v, raw, count * 4);
    } else {
        for (size_t i = 0; i < count; i++) {
            double d;
            memcpy(&d, (char *)raw + 8 * i, 8);
            v[i] = (float)d;
        }
    }
    free(raw);
    *out = v;
    *ndim = h.ndim;
    for (int i = 0; i < TP_NPY_MAX_DIMS; i++)
        shape[i] = i < h.ndim ? h.shape[i] : 0;
    return 0;
}
