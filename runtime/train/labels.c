/* labels.c: see labels.h. */
#include "runtime/train/labels.h"

void tr_labels_next_tokens(int32_t *out, const int32_t *ids, int64_t rows, int64_t seq)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < seq; t++)
            out[r * seq + t] = t + 1 < seq ? ids[r * seq + t + 1] : TR_IGNORE_INDEX;
}

int64_t tr_labels_first_invalid(const int32_t *labels, int64_t n, int64_t vocab, int32_t ignore_index)
{
    for (int64_t i = 0; i < n; i++)
        if (labels[i] != ignore_index && (labels[i] < 0 || labels[i] >= vocab))
            return i;
    return -1;
}

void tr_labels_map_ignored(int32_t *labels, int64_t n, int32_t ignore_index)
{
    for (int64_t i = 0; i < n; i++)
        if (labels[i] == ignore_index)
            labels[i] = TR_IGNORE_INDEX;
}

int64_t tr_labels_counted(const int32_t *labels, int64_t rows, int64_t seq, int shift, int32_t ignore_index)
{
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t + shift < seq; t++)
            n += labels[r * seq + t + shift] != ignore_index;
    return n;
}
