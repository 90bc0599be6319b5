/* streams.c: see streams.h. */
#include "runtime/train/streams.h"
#include <inttypes.h>
#include "runtime/train/labels.h"
#include "runtime/train/segments.h"
#include "util/errmsg.h"

const tr_stream_info tr_streams[TR_STREAM_KINDS] = {
    [TR_STREAM_DATA] = {"--data", "--eval-data", "tokens"},
    [TR_STREAM_LABELS] = {"--labels", "--eval-labels", "labels"},
    [TR_STREAM_ATTENTION_MASK] = {"--attention-mask", "--eval-attention-mask", "mask values"},
    [TR_STREAM_POSITION_IDS] = {"--position-ids", "--eval-position-ids", "position ids"},
};

static bool in_vocab(int64_t v, const tr_stream_rules *rules) { return v >= 0 && v < rules->vocab; }

bool tr_rows_padding(const tr_rows *r, int64_t i, const tr_stream_rules *rules)
{
    const int64_t *mask = r->v[TR_STREAM_ATTENTION_MASK];
    return (mask && mask[i] == 0) || (rules->pad_id != TR_NO_ID && r->v[TR_STREAM_DATA][i] == rules->pad_id);
}

/* Position ids as tprun numbers positions (segments.h): each row's first
 * token, and the first after padding, starts a document at 0; within one
 * they count up by one, a 0 starting the next. Any id in a row's range
 * [0, seq) at padding, which nothing sees. */
static bool position_keeps(const tr_rows *r, int64_t i, const tr_stream_rules *rules)
{
    const int64_t v = r->v[TR_STREAM_POSITION_IDS][i];
    if (v < 0 || v >= rules->seq)
        return false;
    if (v == 0 || tr_rows_padding(r, i, rules))
        return true;
    const bool starts = (r->first + i) % rules->seq == 0 || tr_rows_padding(r, i - 1, rules);
    return !starts && v == r->v[TR_STREAM_POSITION_IDS][i - 1] + 1;
}

/* Whether position i of r (an index into its values) keeps stream k's rule. */
static bool keeps(tr_stream_kind k, const tr_rows *r, int64_t i, const tr_stream_rules *rules)
{
    const int64_t v = r->v[k][i];
    switch (k) {
    case TR_STREAM_DATA:
        return in_vocab(v, rules);
    case TR_STREAM_LABELS:
        return v == rules->ignore_index || in_vocab(v, rules);
    case TR_STREAM_ATTENTION_MASK:
        return v == 0 || v == 1;
    case TR_STREAM_POSITION_IDS:
        return position_keeps(r, i, rules);
    case TR_STREAM_KINDS:
        break;
    }
    return false;
}

int64_t tr_stream_first_bad(tr_stream_kind k, const tr_rows *r, const tr_stream_rules *rules)
{
    for (int64_t i = 0; i < r->n; i++)
        if (!keeps(k, r, i, rules))
            return r->first + i;
    return -1;
}

/* What is wrong with position id p, which breaks its rule, and the fix. */
static int bad_position(const tr_rows *r, int64_t p, const tr_stream_rules *rules, const char *flag,
                        const char *path, char *err, size_t errlen)
{
    const int64_t i = p - r->first, v = r->v[TR_STREAM_POSITION_IDS][i];
    if (v < 0 || v >= rules->seq)
        return tp_error(err, errlen, "%s %s: position id %" PRId64 " is %" PRId64 ", outside a row of %" PRId64
                        " tokens [0, %" PRId64 "); were the ids written for longer sequences?", flag, path, p, v,
                        rules->seq, rules->seq);
    if (p % rules->seq == 0)
        return tp_error(err, errlen, "%s %s: position id %" PRId64 " is %" PRId64 " at the first token of a row "
                        "(sample %" PRId64 " of %" PRId64 " tokens): each row starts a document, at 0; tprun does not "
                        "carry a document over from the row before: cut the documents at the rows, each starting at "
                        "0", flag, path, p, v, p / rules->seq, rules->seq);
    if (tr_rows_padding(r, i - 1, rules))
        return tp_error(err, errlen, "%s %s: position id %" PRId64 " is %" PRId64 " at the first token after "
                        "padding: tprun starts a document there, numbered from 0; write 0 (a document that goes on "
                        "after padding is not one it can number on)", flag, path, p, v);
    return tp_error(err, errlen, "%s %s: position id %" PRId64 " is %" PRId64 " after %" PRId64 ": within a document "
                    "positions count up by one, and a document starts at 0; write %" PRId64 ", or 0 where a document "
                    "starts (tprun numbers positions so and reads no other numbering)", flag, path, p, v,
                    r->v[TR_STREAM_POSITION_IDS][i - 1], r->v[TR_STREAM_POSITION_IDS][i - 1] + 1);
}

int tr_stream_bad(tr_stream_kind k, const tr_rows *r, int64_t p, const tr_stream_rules *rules, const char *flag,
                  const char *path, char *err, size_t errlen)
{
    const int64_t v = r->v[k][p - r->first];
    switch (k) {
    case TR_STREAM_DATA:
        return tp_error(err, errlen, "%s %s: token %" PRId64 " is %" PRId64 ", outside the model's vocabulary [0, %"
                        PRId64 "); was the corpus tokenised for another model?", flag, path, p, v, rules->vocab);
    case TR_STREAM_LABELS:
        return tp_error(err, errlen, "%s %s: label %" PRId64 " is %" PRId64 ", neither a token of the model's "
                        "vocabulary [0, %" PRId64 ") nor the ignore index %d%s", flag, path, p, v, rules->vocab,
                        rules->ignore_index, rules->ignore_index == TR_IGNORE_INDEX ? "" : " (--ignore-index; -100 "
                        "is ignored only as the default)");
    case TR_STREAM_ATTENTION_MASK:
        return tp_error(err, errlen, "%s %s: mask value %" PRId64 " is %" PRId64 ": an attention mask holds 1 for a "
                        "token and 0 for padding (Hugging Face's attention_mask), nothing else", flag, path, p, v);
    case TR_STREAM_POSITION_IDS:
    case TR_STREAM_KINDS:
        break;
    }
    return bad_position(r, p, rules, flag, path, err, errlen);
}
