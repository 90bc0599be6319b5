/* job/monitor.c: see monitor.h. */
#include "runtime/job/monitor.h"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include "runtime/comm/progress.h"
#include "runtime/job/child.h"

/* What to do about a rank that died of sig: who sends it, or what a crash
 * leaves to read. */
static const char *hint(int sig)
{
    switch (sig) {
    case SIGKILL:
        return "it was killed from outside (by a user, the job scheduler, or the kernel's out-of-memory killer: "
               "dmesg tells)";
    case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGABRT:
        return "tprun crashed: its core file (ulimit -c unlimited) or a run under gdb shows where; please report it "
               "with the schedule";
    default:
        return "a signal tprun does not handle ended it";
    }
}

static void name_the_dead(int sig)
{
    char where[200];
    tp_progress_where(where, sizeof where);
    int rank = tp_progress_rank();
    char who[48];
    if (rank >= 0)
        snprintf(who, sizeof who, "rank %d", rank);
    else
        snprintf(who, sizeof who, "a rank, starting up,");
    fprintf(stderr, "tprun: %s died (signal %d, %s)%s%s: %s\n", who, sig, strsignal(sig), *where ? " " : "", where,
            hint(sig));
    fflush(stderr);
}

int tp_monitor_start(tp_rank_end *end, char *err, size_t errlen)
{
    if (tp_progress_share(err, errlen))
        return -1;
    pid_t rank = tp_child_start(err, errlen);
    if (rank <= 0)
        return rank;
    int status, passed = tp_child_wait(rank, &status, err, errlen);
    if (passed < 0)
        return -1;
    *end = (tp_rank_end){.status = WIFEXITED(status) ? WEXITSTATUS(status) : 1,
                         .signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0};
    if (end->signal && end->signal != passed)
        name_the_dead(end->signal);
    return 1;
}

int tp_monitor_end_as(const tp_rank_end *end)
{
    if (!end->signal)
        return end->status;
    struct rlimit none = {0, 0};
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigset_t one;
    sigemptyset(&dfl.sa_mask);
    sigemptyset(&one);
    sigaddset(&one, end->signal);
    /* each can only fail for a signal that cannot be caught (SIGKILL, whose
     * action is already the default) or blocked; the exit status below
     * stands in where the signal does not end the process */
    (void)setrlimit(RLIMIT_CORE, &none);
    (void)sigaction(end->signal, &dfl, NULL);
    (void)sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(end->signal);
    return 128 + end->signal;
}
