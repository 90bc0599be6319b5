/* segments.h: what a schedule's segments input holds (tpcc --segments),
 * for a forward run and for each training step.
 *
 * Segments [rows, seq] give each position its document within its row,
 * -1 for padding; attention then lets a query see only the keys of its
 * own document, and positions restart at each document's first token
 * (docs/training.md, "Attention masks"). tprun builds them from the ids
 * or from Hugging Face's streams beside them (streams.h):
 *   - padding: a token equal to --pad-id P, or an attention_mask of 0
 *     (--attention-mask): a key-padding mask;
 *   - documents: one ends after each --eos-id E, or one starts where a
 *     position id is 0 (--position-ids: DataCollatorWithFlattening's
 *     packed sequences).
 * One source each: the pad id or the mask, the EOS id or the position
 * ids. Without any, every row is one document: plain causal attention. */
#ifndef TPRUN_TRAIN_SEGMENTS_H
#define TPRUN_TRAIN_SEGMENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_NO_ID (-1)   /* --pad-id, --eos-id not given */

/* What marks the padding and the documents of rows [rows, seq]. */
typedef struct tr_segment_marks {
    const int32_t *ids;
    const int32_t *attention_mask;   /* 0: padding; NULL: none */
    const int32_t *position_ids;     /* 0: a document starts; NULL: none */
    int64_t pad_id, eos_id;          /* TR_NO_ID: none */
} tr_segment_marks;

/* Per row: documents numbered from 0, the next one starting after each
 * eos_id or at a position id of 0 (the row's first document numbered 0
 * wherever it starts); padding -1 (it starts no document and ends none). */
void tr_segments_of(int32_t *segments, const tr_segment_marks *m, int64_t rows, int64_t seq);

/* Where a run's segments come from: the ids' and the streams'. */
typedef struct tr_segment_sources {
    int64_t pad_id, eos_id;             /* --pad-id, --eos-id; TR_NO_ID: not given */
    bool attention_mask, position_ids;  /* --attention-mask, --position-ids given */
} tr_segment_sources;

/* Whether the sources fit a schedule: given only to one with a segments
 * input (has_segments), ids of the vocabulary [0, vocab), not one id for
 * both, one source each for the padding and the documents. Returns 0, or
 * -1 with a message saying what to change. */
int tr_segments_check(const char *schedule, int has_segments, int64_t vocab, const tr_segment_sources *src,
                      char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_SEGMENTS_H */
