/* child.h: a child process this one waits for, passing SIGINT and SIGTERM
 * on to it: the mpiexec of tprun -n, and the rank a rank's monitor runs
 * (monitor.h). A signal ignored where tprun started (a background job of
 * a script) stays ignored. */
#ifndef TPRUN_JOB_CHILD_H
#define TPRUN_JOB_CHILD_H

#include <stddef.h>
#include <sys/types.h>

/* fork(): 0 in the child, whose signal mask and dispositions are as they
 * were; in this process the child's pid, SIGINT and SIGTERM passed on to
 * it from now on (one that comes during the fork included). -1 with a
 * message. */
pid_t tp_child_start(char *err, size_t errlen);

/* Waits for the child to end, its wait status in *status. Returns the
 * last signal passed on to it (0: none), or -1 with a message. */
int tp_child_wait(pid_t child, int *status, char *err, size_t errlen);

#endif /* TPRUN_JOB_CHILD_H */
