/* rope_table.h: RoPE's cos and sin for every (position, frequency) of a
 * rope op, computed once and reused by every later call with the same
 * frequencies, positions and scale: the rope ops of all layers (and every
 * --repeat step) share one table, instead of each call computing
 * s x rotary/2 sines and cosines again. */
#ifndef TPRUN_CPU_ROPE_TABLE_H
#define TPRUN_CPU_ROPE_TABLE_H

#include <stdint.h>

/* table[2 (j half + i)] = cos((pos_offset + j) inv_freq[i]) * scale and
 * table[2 (j half + i) + 1] the sin, for j < s, i < half; computed in
 * double exactly as the kernel did per call. The table stays valid until
 * TP_ROPE_TABLES later distinct tables have been asked for. */
#define TP_ROPE_TABLES 8
const double *tp_cpu_rope_table(const double *inv_freq, int64_t half, int64_t pos_offset, int64_t s, double scale);

#endif /* TPRUN_CPU_ROPE_TABLE_H */
