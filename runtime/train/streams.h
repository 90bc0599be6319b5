/* streams.h: the streams a training run reads side by side: --data's
 * token ids and the streams of the same length beside them (--labels,
 * and Hugging Face's masks, which segments.h turns into the schedule's
 * segments), by the flags that name them for training and for
 * evaluation, what each value must be, and what is said when one is not.
 *
 * A rule reads whole rows of seq values (a row is a sample, batches.h),
 * so a value may be judged by the values before it in its row and by the
 * other streams' values at its position. */
#ifndef TPRUN_TRAIN_STREAMS_H
#define TPRUN_TRAIN_STREAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_stream_kind {
    TR_STREAM_DATA,            /* --data: token ids of the vocabulary */
    TR_STREAM_LABELS,          /* --labels: classes of the vocabulary, or the ignore index */
    TR_STREAM_ATTENTION_MASK,  /* --attention-mask: 1 a token, 0 padding (Hugging Face's attention_mask) */
    TR_STREAM_POSITION_IDS,    /* --position-ids: 0 where a document starts, then one more a token
                                  (DataCollatorWithFlattening's position_ids) */
    TR_STREAM_KINDS
} tr_stream_kind;

typedef struct tr_stream_info {
    const char *flag;       /* its file's flag in training: "--labels" */
    const char *eval_flag;  /* and for the evaluation stream: "--eval-labels" */
    const char *values;     /* what its values are called in a message: "labels" */
} tr_stream_info;

extern const tr_stream_info tr_streams[TR_STREAM_KINDS];

/* What the rules compare values with. */
typedef struct tr_stream_rules {
    int64_t vocab;           /* ids and labels: [0, vocab) */
    int32_t ignore_index;    /* a label the loss skips (labels.h) */
    int64_t seq;             /* a row's length: position ids start again at each row */
    int64_t pad_id;          /* --pad-id (segments.h; TR_NO_ID: none): padding, as an attention mask's 0 */
} tr_stream_rules;

/* Positions [first, first + n) of every stream given, v[k] NULL for a
 * stream that is not; first is a row's first position. */
typedef struct tr_rows {
    int64_t first, n;
    int64_t *v[TR_STREAM_KINDS];
} tr_rows;

/* Whether position i of r (an index into its values) is padding: an
 * attention mask's 0, or the pad id. */
bool tr_rows_padding(const tr_rows *r, int64_t i, const tr_stream_rules *rules);

/* The first position (of the stream) in r whose value of stream k breaks
 * its rule, or -1 where none does. */
int64_t tr_stream_first_bad(tr_stream_kind k, const tr_rows *r, const tr_stream_rules *rules);

/* The message for position p of r, whose value of stream k (read from
 * `flag` `path`) breaks its rule: the file, the position, the value, what
 * it must be and how to fix it. Returns -1. */
int tr_stream_bad(tr_stream_kind k, const tr_rows *r, int64_t p, const tr_stream_rules *rules, const char *flag,
                  const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_TRAIN_STREAMS_H */
