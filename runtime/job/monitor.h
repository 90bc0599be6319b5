/* monitor.h: a rank that dies is named.
 *
 * MPICH's hydra ends every other rank with SIGKILL the moment it sees one
 * die (with -disable-auto-cleanup it sends them SIGUSR1 instead, and a
 * collective then fails without saying which rank is gone), so no
 * surviving rank gets to say which rank died, of what, or where. The
 * process a launcher (mpiexec, srun) starts as a rank therefore forks:
 * the child runs the rank, and this process, its monitor, waits for it.
 * When the rank dies by a signal the monitor names it, with the step and
 * the phase it had reached (progress.h), before the launcher's banner:
 *
 *   tprun: rank 1 died (signal 9, Killed) at step 3, in the backward pass: ...
 *
 * and then ends by the same signal, so the launcher reports the rank as
 * it always did. SIGINT and SIGTERM are passed on to the rank (which
 * finishes or abandons a save cleanly: save.h); a rank ended by one of
 * them is not named, the job was interrupted. A rank that exits is not
 * named either: it said why itself. The monitor does nothing else: it
 * never initialises MPI or a GPU. */
#ifndef TPRUN_JOB_MONITOR_H
#define TPRUN_JOB_MONITOR_H

#include <stddef.h>

/* How the rank ended: its exit status, or the signal that ended it. */
typedef struct tp_rank_end {
    int status;
    int signal;      /* 0: it exited */
} tp_rank_end;

/* Forks the rank. Returns 0 in the rank; in the monitor, once the rank
 * has ended (and been named if a signal ended it), 1 with how in *end;
 * -1 with a message. */
int tp_monitor_start(tp_rank_end *end, char *err, size_t errlen);

/* The monitor's end, as its rank's: by the same signal (with no core file
 * of its own: the rank's is the one to read), else the exit status for
 * main to return. */
int tp_monitor_end_as(const tp_rank_end *end);

#endif /* TPRUN_JOB_MONITOR_H */
