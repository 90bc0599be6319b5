/* emit.h: the lowered program as the versioned, self-describing JSON
 * schedule tprun executes, one op list per rank, written atomically. The
 * format is documented in docs/schedule.md. */
#ifndef TP_PASSES_EMIT_H
#define TP_PASSES_EMIT_H

#include <stddef.h>
#include <stdint.h>
#include "compiler/front/config.h"
#include "compiler/ir/ir.h"

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

#endif /* TP_PASSES_EMIT_H */
