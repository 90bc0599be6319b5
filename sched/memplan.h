/* memplan.h: the static memory plan of a program: buffer lifetimes ->
 * offsets in one activation arena, and the check that a plan is valid
 * (the schedule writer refuses an invalid one). */
#ifndef TP_SCHED_MEMPLAN_H
#define TP_SCHED_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include "sched/program.h"

/* Assign every buffer an arena offset (aliases share their root's storage)
 * so that no two buffers live at the same time overlap; set
 * ir->arena_bytes to the peak. Offsets are aligned to 256 bytes. */
void tp_memplan(tp_ir *ir);

/* True when the plan is valid: every pair of buffers live at the same time
 * is disjoint in the arena (used by the tests and by an assert). */
bool tp_memplan_verify(const tp_ir *ir, char *err, size_t errlen);

#endif /* TP_SCHED_MEMPLAN_H */
