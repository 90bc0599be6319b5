/* kernels_check.h: a schedule against the kernels its backend has. Every
 * op kind names the tp_backend members it runs (sched/ops.def's kernels
 * column); a backend has a kernel when its table sets that member. Checked
 * before anything is allocated or loaded, so an op the backend cannot run
 * is refused by name instead of failing mid-step. */
#ifndef TPRUN_EXEC_KERNELS_CHECK_H
#define TPRUN_EXEC_KERNELS_CHECK_H

#include <stddef.h>
#include "runtime/backends/backend.h"
#include "sched/load.h"

/* The name of the first kernel of kind k that be lacks; NULL when be has
 * all of them. */
const char *tr_backend_missing_kernel(const tp_backend *be, tp_op_kind k);

/* 0 when be has every kernel the ops of s run; else -1 with a message
 * naming the first op that be cannot run, its kind, the kernel and the
 * backend. */
int tr_exec_check_kernels(const tr_schedule *s, const tp_backend *be, char *err, size_t errlen);

#endif /* TPRUN_EXEC_KERNELS_CHECK_H */
