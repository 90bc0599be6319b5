/* progress.h: where this rank is: its training step and the phase it is
 * in, kept for two readers.
 *
 *   - The rank's monitor (runtime/job/monitor.h): the process a launcher
 *     starts as the rank runs the rank as its child, and when that child
 *     dies by a signal names the rank, the signal, the step and the phase,
 *     before the launcher's banner. The other ranks cannot: MPICH's hydra
 *     ends them with SIGKILL as soon as it sees one die. The record lives
 *     in memory the two processes share (tp_progress_share, before the
 *     fork).
 *   - The stall watchdog (stall.h), which holds an I/O phase (loading,
 *     saving) to TPRUN_IO_TIMEOUT rather than a collective's
 *     TPRUN_TIMEOUT: a rank writing a checkpoint keeps the others waiting
 *     far longer than any collective does.
 *
 * Phases are string literals: the monitor, a fork of the same program,
 * reads them at the same addresses. A process runs one rank, so there is
 * one record per process; every call is a few atomic stores. */
#ifndef TPRUN_COMM_PROGRESS_H
#define TPRUN_COMM_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Moves the record into memory a child forked later shares. Call it
 * before the fork, before any other thread runs. Returns 0 or -1 with a
 * message. */
int tp_progress_share(char *err, size_t errlen);

/* This process is rank `rank` of the job (tp_comm_mpi knows it once MPI
 * is up); -1 before. */
void tp_progress_set_rank(int rank);
int tp_progress_rank(void);

/* Training step `step` (from 1) is under way; 0: none (loading, a forward run). */
void tp_progress_step(int64_t step);

/* The rank computes: "the backward pass". */
void tp_progress_phase(const char *what);

/* The rank starts an I/O phase, "saving the checkpoint", which every rank
 * enters together and leaves with a collective (tp_agree, comm.h): the
 * stall watchdog holds it to its own limit until the next phase. */
void tp_progress_io(const char *what);

/* Whether an I/O phase is under way: its name and when it began
 * (CLOCK_MONOTONIC seconds). */
bool tp_progress_in_io(const char **what, double *since);

/* "at step 3, in the backward pass", or the phase alone outside the
 * training steps ("loading the weights"), or "" before any phase. Phases
 * read after "at step 3, ": "in the backward pass", "saving the
 * checkpoint". */
void tp_progress_where(char *buf, size_t len);

/* CLOCK_MONOTONIC in seconds, as tp_progress_in_io's `since` is. */
double tp_progress_now(void);

#endif /* TPRUN_COMM_PROGRESS_H */
