/* name.h: the schedule file name tpcc's and tprun's hints suggest. */
#ifndef TPCC_SCHED_NAME_H
#define TPCC_SCHED_NAME_H

#include <stdbool.h>

/* The .sched name for an input: its base name with the extension replaced,
 * in the current directory (plans/llama-sp.plan -> llama-sp.sched), so a
 * hint's `tpcc PLAN -o NAME` never names the plan itself. malloc'ed. */
char *tp_sched_name_for(const char *input);

/* Does path end with ".sched"? */
bool tp_is_sched_name(const char *path);

#endif /* TPCC_SCHED_NAME_H */
