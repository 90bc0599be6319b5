/* format.h: the schedule file's identity, shared by its writer (tpcc),
 * its reader (tprun) and --dump. The format is documented in
 * docs/schedule.md; the version goes up whenever a reader of the old
 * version would misread a new file. */
#ifndef TP_SCHED_FORMAT_H
#define TP_SCHED_FORMAT_H

#include <stddef.h>
#include <stdio.h>

#define TP_SCHEDULE_MAGIC "tpcc-schedule"
#define TP_SCHEDULE_VERSION 15

/* Print rank `rank` (or every rank when rank < 0) of a schedule file.
 * Returns 0, or -1 with a message for an unreadable or invalid file. */
int tp_schedule_dump(const char *path, int rank, FILE *out, char *err, size_t errlen);

#endif /* TP_SCHED_FORMAT_H */
