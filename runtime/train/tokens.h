/* tokens.h: a stream of integers a training run reads in pieces: the
 * token ids of --data, and the streams beside them (--labels; streams.h).
 *
 * Two formats:
 *   - a 1-D NumPy array of integers (.npy: int32, int64, uint16 or
 *     uint32; runtime/io/npy.c reads its header);
 *   - llm.c's token file (.bin, dev/data/data_common.py write_datafile): a
 *     header of 256 little-endian int32 (magic, version, token count, the
 *     rest zero), then the tokens. HEADERS_INFO there has two kinds:
 *     "gpt-2", magic 20240520 version 1, uint16 tokens, and "llama-3",
 *     magic 20240801 version 7, uint32 tokens.
 * Opening reads the header alone and checks it: the dtype, the shape, and
 * the file's size against the count it announces. The values are read on
 * demand (a pread of the positions asked for, each converted to int64,
 * whatever its dtype), so a rank holds no more of a stream than it asks
 * for, whatever the stream's size. What the values must be (ids of the
 * vocabulary, labels, ...) is the reader's to check (streams.h). */
#ifndef TPRUN_TRAIN_TOKENS_H
#define TPRUN_TRAIN_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_LLMC_MAGIC_GPT2 20240520    /* version 1, uint16 tokens */
#define TR_LLMC_MAGIC_LLAMA3 20240801  /* version 7, uint32 tokens */
#define TR_LLMC_HEADER_INTS 256

typedef struct tr_tokens {
    const char *path;
    FILE *file;             /* NULL: not open */
    int64_t count;          /* the values it holds */
    int64_t offset;         /* the bytes before the first */
    size_t item;            /* the bytes of one: 2, 4 or 8 */
    bool is_signed;
    unsigned char *raw;     /* the bytes of a read */
    size_t raw_size;
    uint64_t bytes_read;    /* of values, since it was opened */
} tr_tokens;

/* Opens `path` (.bin: llm.c's format; anything else: .npy) and checks its
 * header. Returns 0, or -1 with a message naming the file and the fix. */
int tr_tokens_open(tr_tokens *t, const char *path, char *err, size_t errlen);
/* Values [first, first + n) of the stream (within it) into out. Returns
 * 0, or -1 with a message (an I/O error; a file cut short since it was
 * opened). */
int tr_tokens_read(tr_tokens *t, int64_t first, int64_t n, int64_t *out, char *err, size_t errlen);
void tr_tokens_close(tr_tokens *t);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_TOKENS_H */
