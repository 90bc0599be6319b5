/* job/child.c: see child.h. */
#include "runtime/job/child.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "util/errmsg.h"

static const int passed_on[2] = {SIGINT, SIGTERM};

/* for the handler: the child, and the last signal passed on to it */
static volatile sig_atomic_t child_pid, passed;

static void pass_on(int sig)
{
    passed = sig;
    if (child_pid > 0)
        kill(child_pid, sig);
}

/* The handlers, where the signal is not ignored. */
static int pass_signals_on(char *err, size_t errlen)
{
    struct sigaction pass = {.sa_handler = pass_on}, was;
    sigemptyset(&pass.sa_mask);
    for (int i = 0; i < 2; i++)
        if (sigaction(passed_on[i], NULL, &was) != 0 ||
            (was.sa_handler != SIG_IGN && sigaction(passed_on[i], &pass, NULL) != 0))
            return tp_error(err, errlen, "sigaction failed: %s", strerror(errno));
    return 0;
}

pid_t tp_child_start(char *err, size_t errlen)
{
    /* blocked across the fork: one that comes before child_pid is set
     * waits, and is passed on once the handlers are in place */
    sigset_t block, was;
    sigemptyset(&block);
    for (int i = 0; i < 2; i++)
        sigaddset(&block, passed_on[i]);
    if (sigprocmask(SIG_BLOCK, &block, &was) != 0)
        return tp_error(err, errlen, "sigprocmask failed: %s", strerror(errno));
    fflush(NULL);     /* nothing buffered is written twice */
    pid_t pid = fork();
    int rc = 0;
    if (pid < 0)
        rc = tp_error(err, errlen, "fork failed: %s", strerror(errno));
    else if (pid > 0) {
        child_pid = pid;
        rc = pass_signals_on(err, errlen);
    }
    /* restoring a mask sigprocmask returned cannot fail */
    (void)sigprocmask(SIG_SETMASK, &was, NULL);
    return rc ? -1 : pid;
}

int tp_child_wait(pid_t child, int *status, char *err, size_t errlen)
{
    while (waitpid(child, status, 0) < 0)
        if (errno != EINTR)
            return tp_error(err, errlen, "waiting for process %d failed: %s", (int)child, strerror(errno));
    return passed;
}
