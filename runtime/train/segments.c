/* segments.c: see segments.h. */
#include "runtime/train/segments.h"
#include "util/errmsg.h"

void tr_segments_of(int32_t *segments, const tr_segment_marks *m, int64_t rows, int64_t seq)
{
    for (int64_t r = 0; r < rows; r++) {
        int32_t document = 0;
        bool begun = false;      /* the document numbered `document` has a token */
        for (int64_t t = r * seq; t < (r + 1) * seq; t++) {
            if ((m->attention_mask && !m->attention_mask[t]) || m->ids[t] == m->pad_id) {
                segments[t] = -1;
                continue;
            }
            if (m->position_ids && !m->position_ids[t] && begun)
                document++;
            segments[t] = document;
            begun = true;
            if (m->ids[t] == m->eos_id) {
                document++;
                begun = false;
            }
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

int tr_segments_check(const char *schedule, int has_segments, int64_t vocab, const tr_segment_sources *src,
                      char *err, size_t errlen)
{
    const char *flag = src->pad_id != TR_NO_ID ? "--pad-id" : src->eos_id != TR_NO_ID ? "--eos-id"
                     : src->attention_mask ? "--attention-mask" : src->position_ids ? "--position-ids" : NULL;
    if (flag && !has_segments)
        return tp_error(err, errlen, "%s: %s takes no segments to restrict its attention with; compile it with "
                        "tpcc --segments", flag, schedule);
    if (src->pad_id != TR_NO_ID && src->pad_id == src->eos_id)
        return tp_error(err, errlen, "--pad-id and --eos-id are both %lld: a token cannot both end a document and "
                        "be padding; pad with another id, or give only --eos-id", (long long)src->pad_id);
    if (src->pad_id != TR_NO_ID && src->attention_mask)
        return tp_error(err, errlen, "--attention-mask and --pad-id both say which tokens are padding: give one "
                        "(the mask where the pad id is also a token of the text)");
    if (src->eos_id != TR_NO_ID && src->position_ids)
        return tp_error(err, errlen, "--position-ids and --eos-id both say where documents start: give one (the "
                        "position ids where a document may end without an EOS)");
    if (id_in_vocab("--pad-id", src->pad_id, vocab, err, errlen) ||
        id_in_vocab("--eos-id", src->eos_id, vocab, err, errlen))
        return -1;
    return 0;
}
