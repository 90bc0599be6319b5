/* tokens.h: the token stream a training run reads its batches from.
 *
 * Two formats:
 *   - a 1-D NumPy array of integer ids (.npy: int32, int64, uint16 or
 *     uint32; runtime/io/npy.c reads it);
 *   - llm.c's token file (.bin, dev/data/data_common.py write_datafile): a
 *     header of 256 little-endian int32 (magic, version, token count, the
 *     rest zero), then the tokens. HEADERS_INFO there has two kinds:
 *     "gpt-2", magic 20240520 version 1, uint16 tokens, and "llama-3",
 *     magic 20240801 version 7, uint32 tokens. A regular file's size is
 *     checked against the header's count before anything is allocated.
 * Every token is checked against the vocabulary when the file is opened,
 * so a corpus tokenised for another model fails before training starts. */
#ifndef TPRUN_TRAIN_TOKENS_H
#define TPRUN_TRAIN_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_LLMC_MAGIC_GPT2 20240520    /* version 1, uint16 tokens */
#define TR_LLMC_MAGIC_LLAMA3 20240801  /* version 7, uint32 tokens */
#define TR_LLMC_HEADER_INTS 256

typedef struct tr_tokens {
    int32_t *ids;       /* the whole stream */
    int64_t count;
} tr_tokens;

/* Reads `path` (.bin: llm.c's format; anything else: .npy), any int32
 * values (a labels stream holds ignored ones). Returns 0, or -1 with a
 * message naming the file and the fix. */
int tr_tokens_read(tr_tokens *t, const char *path, char *err, size_t errlen);
/* tr_tokens_read, then every id checked against [0, vocab): -1 with a
 * message naming the position when one is outside. */
int tr_tokens_open(tr_tokens *t, const char *path, int64_t vocab, char *err, size_t errlen);
void tr_tokens_free(tr_tokens *t);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_TOKENS_H */
