/* memplan.h: buffer lifetimes -> offsets in one activation arena. */
#ifndef TP_PASSES_MEMPLAN_H
#define TP_PASSES_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include "compiler/ir/ir.h"

/* Assign every buffer an arena offset (aliases share their root's storage)
 * so that no two buffers live at the same time overlap; set
 * ir->arena_bytes to the peak. Offsets are aligned to 256 bytes. */
void tp_memplan(tp_ir *ir);

/* True when the plan is valid: every pair of buffers live at the same time
 * is disjoint in the arena (used by the tests and by an assert). */
bool tp_memplan_verify(const tp_ir *ir, char *err, size_t errlen);

#endif /* TP_PASSES_MEMPLAN_H */
