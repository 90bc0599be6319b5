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
 * compute before it).
 *
 * An I/O phase (progress.h: loading the weights, saving a checkpoint) is
 * held to its own limit instead, TPRUN_IO_TIMEOUT seconds (default 7200:
 * a large model's checkpoint is terabytes), from the moment the rank
 * enters it, whatever collectives it runs meanwhile: the ranks that wait
 * for the one writing a checkpoint wait in a collective all that time.
 * Every rank enters the phase together and leaves it through a
 * collective (tp_agree, comm.h), so no rank computes while another still
 * reads or writes. */
#ifndef TPRUN_STALL_H
#define TPRUN_STALL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tp_stall_watch tp_stall_watch;

/* The limits, in seconds: a collective's and an I/O phase's. */
typedef struct tp_stall_limits {
    double collective;       /* TPRUN_TIMEOUT */
    double io;               /* TPRUN_IO_TIMEOUT */
} tp_stall_limits;

/* The limits from the environment (or the defaults); -1 with a message
 * when one is set but not a positive number of seconds. */
int tp_stall_limits_get(tp_stall_limits *l, char *err, size_t errlen);

/* Starts the watchdog of `rank`: after printing, it calls abort_job(ctx)
 * (which must not return) when a collective or an I/O phase outlasts its
 * limit. */
int tp_stall_watch_start(tp_stall_watch **w, int rank, tp_stall_limits limits, void (*abort_job)(void *ctx),
                         void *ctx, char *err, size_t errlen);
void tp_stall_watch_stop(tp_stall_watch *w);

/* `what` (a string literal: it is read by the watchdog thread) of n elements starts / ended. */
void tp_stall_enter(tp_stall_watch *w, const char *what, int64_t n);
void tp_stall_leave(tp_stall_watch *w);

#endif /* TPRUN_STALL_H */
