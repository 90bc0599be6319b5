/* limits_check.h: a schedule against the largest sizes its backend's kernels run
 * (tp_backend.limits, backend_limits.h), checked before anything is
 * allocated or loaded. */
#ifndef TPRUN_EXEC_LIMITS_CHECK_H
#define TPRUN_EXEC_LIMITS_CHECK_H

#include <stddef.h>
#include "runtime/backends/backend.h"
#include "sched/load.h"

/* 0 when every op of s is within be's limits (or be has none); else -1
 * with a message naming the op, the size, the limit and what to do. */
int tr_exec_check_limits(const tr_schedule *s, const tp_backend *be, char *err, size_t errlen);

#endif /* TPRUN_EXEC_LIMITS_CHECK_H */
