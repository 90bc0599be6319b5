/* tokens.c: see tokens.h. */
#define _XOPEN_SOURCE 700   /* pread */
#include "runtime/train/tokens.h"
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/io/npy.h"
#include "util/errmsg.h"
#include "util/input_file.h"
#include "util/xalloc.h"

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* llm.c's .bin: the header, then count tokens of 2 or 4 bytes, nothing more. */
static int llmc_header(tr_tokens *t, char *err, size_t errlen)
{
    unsigned char header[TR_LLMC_HEADER_INTS * 4];
    if (fread(header, 1, sizeof header, t->file) != sizeof header)
        return tp_error(err, errlen, "%s: shorter than llm.c's 1024-byte header; write token files with llm.c's "
                        "dev/data/data_common.py write_datafile (or pass a 1-D .npy)", t->path);
    uint32_t magic = le32(header), version = le32(header + 4);
    int64_t count = (int32_t)le32(header + 8);
    if (magic == TR_LLMC_MAGIC_GPT2 && version == 1)
        t->item = 2;
    else if (magic == TR_LLMC_MAGIC_LLAMA3 && version == 7)
        t->item = 4;
    else
        return tp_error(err, errlen, "%s: not an llm.c token file (magic %" PRIu32 " version %" PRIu32 "; expected %d "
                        "version 1 for uint16 tokens or %d version 7 for uint32); a NumPy array must be named *.npy",
                        t->path, magic, version, TR_LLMC_MAGIC_GPT2, TR_LLMC_MAGIC_LLAMA3);
    if (count < 0)
        return tp_error(err, errlen, "%s: the header's token count %" PRId64 " is negative", t->path, count);
    struct stat st;
    if (fstat(fileno(t->file), &st) != 0)
        return tp_error(err, errlen, "%s: cannot read its size: %s", t->path, strerror(errno));
    uint64_t after = (uint64_t)st.st_size - sizeof header;
    if (after != (uint64_t)count * t->item)
        return tp_error(err, errlen, "%s: the header says %" PRId64 " tokens (%" PRIu64 " bytes after the header), "
                        "the file holds %" PRIu64 " bytes", t->path, count, (uint64_t)count * t->item, after);
    t->count = count;
    t->offset = sizeof header;
    return 0;
}

static int npy_header(tr_tokens *t, char *err, size_t errlen)
{
    tp_npy_token_layout l;
    if (tp_npy_token_header(t->file, t->path, &l, err, errlen))
        return -1;
    if (l.ndim != 1)
        return tp_error(err, errlen, "%s: a token stream is a 1-D array, this one is [%" PRId64 ", %" PRId64 "]; "
                        "flatten it with ids.reshape(-1)", t->path, l.shape[0], l.shape[1]);
    t->count = l.shape[0];
    t->offset = l.offset;
    t->item = l.item;
    t->is_signed = l.is_signed;
    return 0;
}

int tr_tokens_open(tr_tokens *t, const char *path, char *err, size_t errlen)
{
    *t = (tr_tokens){.path = path};
    t->file = tp_input_fopen(path, err, errlen);
    if (!t->file)
        return -1;
    size_t len = strlen(path);
    bool bin = len > 4 && !strcmp(path + len - 4, ".bin");
    if ((bin ? llmc_header : npy_header)(t, err, errlen)) {
        tr_tokens_close(t);
        return -1;
    }
    return 0;
}

int tr_tokens_read(tr_tokens *t, int64_t first, int64_t n, int64_t *out, char *err, size_t errlen)
{
    if (first < 0 || n < 0 || first > t->count - n)
        return tp_error(err, errlen, "%s: values %" PRId64 " to %" PRId64 " asked for, the stream holds %" PRId64,
                        t->path, first, first + n, t->count);
    size_t bytes = (size_t)n * t->item;
    if (bytes > t->raw_size) {
        t->raw = tp_xrealloc(t->raw, bytes);
        t->raw_size = bytes;
    }
    off_t at = (off_t)(t->offset + first * (int64_t)t->item);
    for (size_t got = 0; got < bytes;) {
        ssize_t r = pread(fileno(t->file), t->raw + got, bytes - got, at + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return tp_error(err, errlen, "%s: cannot read values %" PRId64 " to %" PRId64 ": %s", t->path, first,
                            first + n, strerror(errno));
        if (r == 0)
            return tp_error(err, errlen, "%s: cut short since it was opened: values %" PRId64 " to %" PRId64 " are "
                            "gone; was it rewritten during the run?", t->path, first, first + n);
        got += (size_t)r;
    }
    t->bytes_read += bytes;
    for (int64_t i = 0; i < n; i++)
        out[i] = tp_npy_token_value(t->raw + (size_t)i * t->item, t->item, t->is_signed);
    return 0;
}

void tr_tokens_close(tr_tokens *t)
{
    if (t->file)
        fclose(t->file);
    free(t->raw);
    *t = (tr_tokens){0};
}
