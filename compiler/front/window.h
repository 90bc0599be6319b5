/* window.h: sliding-window attention whose window is shorter than the
 * sequence, which tpcc's attention does not compute yet (unsupported):
 * what it would need, and the seq to compile with instead. Every finding
 * that names a seq says the same one, so that following one never brings
 * up the other (a window of 2047 at tp 8: seq 2040, not 2047, which a
 * sequence-sharded plan cannot split, nor 2048, past the window). */
#ifndef TPCC_WINDOW_H
#define TPCC_WINDOW_H

#include <stdint.h>
#include "compiler/diag/diag.h"

/* The end of every message about such a window. */
#define TP_WINDOW_NEEDS "tpcc would need a sliding-window mask in its attention kernels"

/* The longest seq within a window of `window` positions that tp divides
 * (a plan that shards the sequence needs that); 0 when none does. */
int64_t tp_seq_within_window(int64_t window, int64_t tp);

/* g's help line: compile with that seq or less. */
void tp_window_help(tp_diag *g, int64_t window, int64_t tp);

#endif /* TPCC_WINDOW_H */
