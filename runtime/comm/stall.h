/* stall.h: the CPU path's watchdog for a stalled rank.
 *
 * MPI's collectives block until every rank of the group joins: a rank
 * that stops (SIGSTOP, a hung filesystem, an endless loop) leaves the
 * others waiting forever. Each collective is bracketed by tp_stall_enter
 * and tp_stall_leave; a thread polls once a second and, when one has been
 * in flight longer than the timeout, says which rank waits in which
 * collective and calls the job's abort (MPI_Abort ends every rank,
 * stopped ones included). The timeout is TPRUN_TIMEOUT seconds (default
 * 600: generous, since a collective also waits for the slowest rank's
 * compute before it). */
#ifndef TPRUN_STALL_H
#define TPRUN_STALL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tp_stall_watch tp_stall_watch;

/* TPRUN_TIMEOUT from the environment (or the default); -1 with a message
 * when it is set but not a positive number of seconds. */
int tp_stall_timeout(double *seconds, char *err, size_t errlen);

/* Starts the watchdog of `rank`: after printing, it calls abort_job(ctx)
 * (which must not return) when a collective outlasts `seconds`. */
int tp_stall_watch_start(tp_stall_watch **w, int rank, double seconds, void (*abort_job)(void *ctx), void *ctx,
                         char *err, size_t errlen);
void tp_stall_watch_stop(tp_stall_watch *w);

/* `what` (a string literal: it is read by the watchdog thread) of n elements starts / ended. */
void tp_stall_enter(tp_stall_watch *w, const char *what, int64_t n);
void tp_stall_leave(tp_stall_watch *w);

#endif /* TPRUN_STALL_H */
