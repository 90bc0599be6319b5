/* segments.c: see segments.h. */
#include "runtime/train/segments.h"
#include "util/errmsg.h"

void tr_segments_of(int32_t *segments, const int32_t *ids, int64_t rows, int64_t seq, int64_t pad_id,
                    int64_t eos_id)
{
    for (int64_t r = 0; r < rows; r++) {
        int32_t document = 0;
        for (int64_t t = r * seq; t < (r + 1) * seq; t++) {
            if (ids[t] == pad_id) {
                segments[t] = -1;
                continue;
            }
            segments[t] = document;
            document += ids[t] == eos_id;
        }
    }
}

static int id_in_vocab(const char *flag, int64_t id, int64_t vocab, char *err, size_t errlen)
{
    if (id == TR_NO_ID || (id >= 0 && id < vocab))
        return 0;
    return tp_error(err, errlen, "%s %lld is not a token of the model's vocabulary [0, %lld): give the id the "
                    "tokenizer writes (its config's pad_token_id or eos_token_id)", flag, (long long)id,
                    (long long)vocab);
}

int tr_segments_check(const char *schedule, int has_segments, int64_t vocab, int64_t pad_id, int64_t eos_id,
                      char *err, size_t errlen)
{
    const char *flag = pad_id != TR_NO_ID ? "--pad-id" : eos_id != TR_NO_ID ? "--eos-id" : NULL;
    if (flag && !has_segments)
        return tp_error(err, errlen, "%s: %s takes no segments to restrict its attention with; compile it with "
                        "tpcc --segments", flag, schedule);
    if (pad_id != TR_NO_ID && pad_id == eos_id)
        return tp_error(err, errlen, "--pad-id and --eos-id are both %lld: a token cannot both end a document and "
                        "be padding; pad with another id, or give only --eos-id", (long long)pad_id);
    if (id_in_vocab("--pad-id", pad_id, vocab, err, errlen) || id_in_vocab("--eos-id", eos_id, vocab, err, errlen))
        return -1;
    return 0;
}
