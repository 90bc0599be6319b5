/* clobber.h: -o must never replace an input. */
#ifndef TPCC_CLOBBER_H
#define TPCC_CLOBBER_H

#include <stdbool.h>
#include <stddef.h>
#include "compiler/driver/compile.h"

/* Is `out` one of the files u read (the plan, its model, config.json),
 * under any name (symlinks, ./, ../)? Compared by device and inode when
 * out exists, else by the resolved directory plus the name. Returns 1 with
 * a message in msg naming the input and another name for the output (a
 * .sched for a schedule, else a .py for an export), 0 when out is safe to
 * write. */
int tp_output_clobbers_input(const char *out, const tp_unit *u, bool schedule, char *msg, size_t msglen);

#endif /* TPCC_CLOBBER_H */
