/* sched/validate.h: the whole-schedule checks that run once a rank's
 * schedule is read, before anything is allocated or executed.
 *
 * The reader (load.c) checks each field where it reads it: types, ranges,
 * indices naming real buffers and weights, each op's operands against its
 * signature and its sizes against its buffers (the size rule its row of
 * sched/ops.def names), every element count and region size in checked
 * arithmetic. This pass proves what needs the whole schedule: the outputs
 * and the inputs tprun writes have a place in the arena, every buffer sits
 * at an offset aligned to its element, every float operand holds the
 * element type its kernel writes, no op's output overlaps its inputs
 * unless its kernel works in place, every id an op indexes with was
 * written before and lies within the rows or columns it indexes, and the
 * collectives move whole blocks. The runtime asserts nothing this and the
 * reader did not prove, besides a backend's own limits (the CUDA kernels'
 * launch grids), which tprun checks before it allocates anything
 * (runtime/exec/limits_check.c; docs/schedule.md, "What tprun checks"). */
#ifndef TP_SCHED_VALIDATE_H
#define TP_SCHED_VALIDATE_H

#include <stddef.h>
#include <stdint.h>
#include "sched/load.h"

/* 0, or -1 with a message naming the op or buffer, what is wrong and how
 * to fix it (prefixed by `path`). */
int tr_schedule_validate(const tr_schedule *s, const char *path, char *err, size_t errlen);

/* The token ids (and labels) tprun accepts: [0, this). The rows of the
 * table the first lookup of input_ids reads; INT32_MAX when none does. */
int64_t tr_schedule_token_vocab(const tr_schedule *s);

#endif /* TP_SCHED_VALIDATE_H */
