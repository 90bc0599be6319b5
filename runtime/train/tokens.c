/* tokens.c: see tokens.h. */
#include "runtime/train/tokens.h"
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/io/npy.h"
#include "util/errmsg.h"
#include "util/input_file.h"
#include "util/xalloc.h"

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* llm.c's .bin: the header, then count tokens of 2 or 4 bytes, nothing more. */
static int read_llmc(tr_tokens *t, const char *path, char *err, size_t errlen)
{
    FILE *f = tp_input_fopen(path, err, errlen);
    if (!f)
        return -1;
    unsigned char header[TR_LLMC_HEADER_INTS * 4];
    int rc = -1;
    unsigned char *raw = NULL;
    if (fread(header, 1, sizeof header, f) != sizeof header) {
        tp_error(err, errlen, "%s: shorter than llm.c's 1024-byte header; write token files with llm.c's "
                 "dev/data/data_common.py write_datafile (or pass a 1-D .npy)", path);
        goto done;
    }
    uint32_t magic = le32(header), version = le32(header + 4);
    int64_t count = (int32_t)le32(header + 8);
    size_t size;
    if (magic == TR_LLMC_MAGIC_GPT2 && version == 1)
        size = 2;
    else if (magic == TR_LLMC_MAGIC_LLAMA3 && version == 7)
        size = 4;
    else {
        tp_error(err, errlen, "%s: not an llm.c token file (magic %" PRIu32 " version %" PRIu32 "; expected %d version 1 "
                 "for uint16 tokens or %d version 7 for uint32); a NumPy array must be named *.npy", path, magic,
                 version, TR_LLMC_MAGIC_GPT2, TR_LLMC_MAGIC_LLAMA3);
        goto done;
    }
    if (count < 0) {
        tp_error(err, errlen, "%s: the header's token count %" PRId64 " is negative", path, count);
        goto done;
    }
    /* the file's size before the allocation: a header may announce any count */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size - sizeof header != (uint64_t)count * size) {
        tp_error(err, errlen, "%s: the header says %" PRId64 " tokens (%zu bytes after the header), the file holds %"
                 PRIu64 " bytes", path, count, (size_t)count * size, (uint64_t)st.st_size - sizeof header);
        goto done;
    }
    raw = tp_xmalloc((size_t)count * size + 1);
    size_t got = fread(raw, 1, (size_t)count * size + 1, f);
    if (got != (size_t)count * size) {
        tp_error(err, errlen, "%s: the header says %" PRId64 " tokens (%zu bytes after the header), the file holds %zu "
                 "bytes%s", path, count, (size_t)count * size, got, got > (size_t)count * size ? " or more" : "");
        goto done;
    }
    t->ids = tp_xmalloc((size_t)count * sizeof *t->ids + 1);
    for (int64_t i = 0; i < count; i++) {
        const unsigned char *p = raw + (size_t)i * size;
        uint32_t v = size == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : le32(p);
        if (v > INT32_MAX) {
            tp_error(err, errlen, "%s: token %" PRId64 " is %" PRIu32 ", beyond int32", path, i, v);
            free(t->ids);
            t->ids = NULL;
            goto done;
        }
        t->ids[i] = (int32_t)v;
    }
    t->count = count;
    rc = 0;
done:
    free(raw);
    fclose(f);
    return rc;
}

static int read_npy(tr_tokens *t, const char *path, char *err, size_t errlen)
{
    int64_t shape[2];
    int ndim;
    if (tp_npy_read_tokens(path, &t->ids, shape, &ndim, err, errlen))
        return -1;
    if (ndim != 1) {
        tp_error(err, errlen, "%s: a token stream is a 1-D array, this one is [%" PRId64 ", %" PRId64 "]; flatten it "
                 "with ids.reshape(-1)", path, shape[0], shape[1]);
        tr_tokens_free(t);
        return -1;
    }
    t->count = shape[0];
    return 0;
}

int tr_tokens_read(tr_tokens *t, const char *path, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    size_t len = strlen(path);
    bool bin = len > 4 && !strcmp(path + len - 4, ".bin");
    return bin ? read_llmc(t, path, err, errlen) : read_npy(t, path, err, errlen);
}

int tr_tokens_open(tr_tokens *t, const char *path, int64_t vocab, char *err, size_t errlen)
{
    if (tr_tokens_read(t, path, err, errlen))
        return -1;
    for (int64_t i = 0; i < t->count; i++)
        if (t->ids[i] < 0 || t->ids[i] >= vocab) {
            tp_error(err, errlen, "%s: token %" PRId64 " is %d, outside the model's vocabulary [0, %" PRId64 "); was the "
                     "corpus tokenised for another model?", path, i, t->ids[i], vocab);
            tr_tokens_free(t);
            return -1;
        }
    return 0;
}

void tr_tokens_free(tr_tokens *t)
{
    free(t->ids);
    t->ids = NULL;
    t->count = 0;
}
