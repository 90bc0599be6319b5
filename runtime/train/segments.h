/* segments.h: what a schedule's segments input holds (tpcc --segments),
 * built from the input ids, for a forward run and for each training step.
 *
 * Segments [rows, seq] give each position its document within its row,
 * -1 for padding; attention then lets a query see only the keys of its
 * own document, and positions restart at each document's first token
 * (docs/training.md, "Attention masks"). tprun derives them from two ids:
 *   - --pad-id P: a token equal to P is padding (a key-padding mask, as
 *     an attention_mask of 0 there);
 *   - --eos-id E: a document ends after each E (packed sequences, as
 *     Hugging Face's DataCollatorWithFlattening's position_ids).
 * Without either, every row is one document: plain causal attention. */
#ifndef TPRUN_TRAIN_SEGMENTS_H
#define TPRUN_TRAIN_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_NO_ID (-1)   /* --pad-id, --eos-id not given */

/* Per row: documents numbered from 0, the next one starting after each
 * eos_id; a pad_id token -1 (it starts no document and ends none). */
void tr_segments_of(int32_t *segments, const int32_t *ids, int64_t rows, int64_t seq, int64_t pad_id,
                    int64_t eos_id);

/* Whether --pad-id and --eos-id fit a schedule: given only to one with a
 * segments input (has_segments), tokens of the vocabulary [0, vocab), not
 * one id for both. Returns 0, or -1 with a message saying what to change. */
int tr_segments_check(const char *schedule, int has_segments, int64_t vocab, int64_t pad_id, int64_t eos_id,
                      char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_SEGMENTS_H */
