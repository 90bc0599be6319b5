/* streams.c: see streams.h. */
#include "runtime/train/streams.h"
#include <inttypes.h>
#include <stdbool.h>
#include "runtime/train/labels.h"
#include "util/errmsg.h"

const tr_stream_info tr_streams[TR_STREAM_KINDS] = {
    [TR_STREAM_DATA] = {"--data", "--eval-data", "tokens"},
    [TR_STREAM_LABELS] = {"--labels", "--eval-labels", "labels"},
};

static bool in_vocab(int64_t v, const tr_stream_rules *rules) { return v >= 0 && v < rules->vocab; }

/* Whether position i of r (an index into its values) keeps stream k's rule. */
static bool keeps(tr_stream_kind k, const tr_rows *r, int64_t i, const tr_stream_rules *rules)
{
    const int64_t v = r->v[k][i];
    switch (k) {
    case TR_STREAM_DATA:
        return in_vocab(v, rules);
    case TR_STREAM_LABELS:
        return v == rules->ignore_index || in_vocab(v, rules);
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

int tr_stream_bad(tr_stream_kind k, const tr_rows *r, int64_t p, const tr_stream_rules *rules, const char *flag,
                  const char *path, char *err, size_t errlen)
{
    const int64_t v = r->v[k][p - r->first];
    if (k == TR_STREAM_DATA)
        return tp_error(err, errlen, "%s %s: token %" PRId64 " is %" PRId64 ", outside the model's vocabulary [0, %"
                        PRId64 "); was the corpus tokenised for another model?", flag, path, p, v, rules->vocab);
    return tp_error(err, errlen, "%s %s: label %" PRId64 " is %" PRId64 ", neither a token of the model's vocabulary "
                    "[0, %" PRId64 ") nor the ignore index %d%s", flag, path, p, v, rules->vocab, rules->ignore_index,
                    rules->ignore_index == TR_IGNORE_INDEX ? "" : " (--ignore-index; -100 is ignored only as the "
                    "default)");
}
