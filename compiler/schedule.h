/* schedule.h: from the lowered program to the artefact tprun executes.
 *
 *   tp_memplan        buffer lifetimes -> offsets in one activation arena
 *   tp_schedule_write the versioned, self-describing JSON schedule, one op
 *                     list per rank, written atomically
 *   tp_schedule_dump  a rank's program as a readable listing (tpcc --dump)
 *
 * The format is documented in docs/schedule.md. */
#ifndef TPCC_SCHEDULE_H
#define TPCC_SCHEDULE_H

#include <stdint.h>
#include <stdio.h>
#include "config.h"
#include "ir.h"

#define TP_SCHEDULE_MAGIC "tpcc-schedule"
#define TP_SCHEDULE_VERSION 1

/* Assign every buffer an arena offset (aliases share their root's storage)
 * so that no two buffers live at the same time overlap; set
 * ir->arena_bytes to the peak. Offsets are aligned to 256 bytes. */
void tp_memplan(tp_ir *ir);

/* True when the plan is valid: every pair of buffers live at the same time
 * is disjoint in the arena (used by the tests and by an assert). */
bool tp_memplan_verify(const tp_ir *ir, char *err, size_t errlen);

typedef struct tp_schedule_meta {
    const char *producer;       /* "tpcc 0.1.0" */
    uint64_t input_hash;        /* hash of plan + model + resolved config + dtype */
    tp_dtype dtype;             /* element type of activations and weights */
    const tp_config *config;    /* the resolved configuration, recorded in the file */
    const char *plan_path;      /* recorded for provenance */
} tp_schedule_meta;

/* Write the schedule; on any error nothing is left at `path` (the previous
 * file, if any, is untouched) and -1 is returned with a message. */
int tp_schedule_write(const tp_ir *ir, const tp_schedule_meta *meta, const char *path, char *err, size_t errlen);

/* Print rank `rank` (or every rank when rank < 0) of a schedule file.
 * Returns 0, or -1 with a message for an unreadable or invalid file. */
int tp_schedule_dump(const char *path, int rank, FILE *out, char *err, size_t errlen);

/* FNV-1a 64-bit, chained: h = tp_hash(h, data, n), starting from TP_HASH_INIT. */
#define TP_HASH_INIT 0xcbf29ce484222325ULL
uint64_t tp_hash(uint64_t h, const void *data, size_t n);

#endif /* TPCC_SCHEDULE_H */
