/* report.h: what a plan costs — parameters, activation memory, FLOPs and
 * every collective of a forward step, against the Megatron bound; for a
 * training step (tpcc --train) also gradients, optimizer state, backward
 * FLOPs and communication per phase. */
#ifndef TPCC_REPORT_H
#define TPCC_REPORT_H

#include <stdio.h>
#include "sched/program.h"
#include "compiler/plan/plan.h"

typedef enum tp_report_format { TP_REPORT_TEXT, TP_REPORT_JSON } tp_report_format;

/* `opt` is the program at -O1, `unopt` at -O0 (both memory-planned).
 * device_memory > 0: say whether a training step fits in that many bytes. */
int tp_report(const tp_ir *opt, const tp_ir *unopt, const tp_plan *p, const char *plan_path, tp_dtype dtype,
              int64_t device_memory, tp_report_format fmt, FILE *out);

/* Bytes one rank sends for a collective of `elems` full-tensor elements
 * over `world` ranks with a ring algorithm. */
double tp_ring_bytes(tp_op_kind kind, int64_t elems, size_t dsize, int64_t world);

/* Forward FLOPs of one op, by the rule of its row in sched/ops.def. */
double tp_op_flops(const tp_ir_op *op);

#endif /* TPCC_REPORT_H */
