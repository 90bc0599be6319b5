/* window.c: the seq within a sliding window (see window.h). */
#include "compiler/front/window.h"

int64_t tp_seq_within_window(int64_t window, int64_t tp)
{
    return tp > 1 ? window / tp * tp : window;
}

void tp_window_help(tp_diag *g, int64_t window, int64_t tp)
{
    int64_t seq = tp_seq_within_window(window, tp);
    if (seq == window)
        tp_diag_help(g, "compile with -D seq=%lld or less", (long long)window);
    else if (seq > 0)
        tp_diag_help(g, "compile with -D seq=%lld or less (%lld: the longest seq within the window that tp = %lld "
                        "divides, as a sequence-sharded plan needs)", (long long)seq, (long long)seq, (long long)tp);
    else
        tp_diag_help(g, "compile with -D seq=%lld or less, with a plan that does not shard the sequence (tp = %lld "
                        "is longer than the window)", (long long)window, (long long)tp);
}
