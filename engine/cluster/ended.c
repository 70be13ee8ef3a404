/* A rank ended from outside: when one rank dies, mpirun sends the others SIGTERM (then
 * SIGKILL).  A rank waiting inside a step then says for whom and for what, which is what
 * the dead rank was doing, in one line (which rank speaks: cluster.c's speaks()).  Any
 * other SIGTERM goes to whatever handled it before (serve's clean stop, or the default). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/cluster/cluster_internal.h"

static char said[512];
static volatile sig_atomic_t said_len;
static struct sigaction before;

/* Only mpirun's SIGTERM (from our parent, the launcher) means a rank died; a user's
 * SIGTERM to the leader is serve's clean stop, even mid-wait. */
static void on_term(int sig, siginfo_t *info, void *context)
{
    (void)context;
    if (said_len && info && info->si_pid == getppid()) {
        ssize_t ignored = write(STDERR_FILENO, said, (size_t)said_len);
        (void)ignored;
        _exit(1);
    }
    if (before.sa_handler == SIG_IGN)
        return;
    if (before.sa_handler != SIG_DFL) {
        before.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void cluster_watch_term(void)
{
    struct sigaction sa = {.sa_sigaction = on_term, .sa_flags = SA_SIGINFO};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &before);
}

void cluster_waiting(const struct k3_cluster *c, const char *who, const char *what)
{
    said_len = 0;
    if (!who)
        return;
    int n = snprintf(said, sizeof said, "k3-uring: rank %d: ended by mpirun while waiting for "
                     "rank %s (%s): did it die?\n", c->rank, who, what);
    said_len = n < (int)sizeof said ? n : (int)sizeof said - 1;
}
