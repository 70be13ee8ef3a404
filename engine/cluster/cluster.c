/* MPI's life in k3-uring: started only when mpirun launched us (one process never needs
 * it), every wait bounded by a deadline, and a stalled rank ending every rank. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/cluster/cluster_internal.h"

/* Open MPI's launcher sets these; PMIx's for other launchers.  Read here, not in the CLI's
 * environment table (engine/cli/env.h): they are mpirun's word that it launched us, not a
 * user's knob, and they decide whether MPI starts at all. */
static const char *env_rank(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return r ? r : getenv("PMIX_RANK");
}

bool k3_cluster_launched(void) { return env_rank() != NULL; }

int k3_cluster_env_rank(void)
{
    const char *r = env_rank();
    return r ? atoi(r) : 0;
}

int k3_cluster_fault_parse(const char *flag, const char *text, struct k3_cluster_fault *f,
                           struct k3_err *err)
{
    char kind[8] = "";
    int used = 0;
    struct k3_cluster_fault got = {.rank = -1};
    if (text[0] < '0' || text[0] > '9' ||
        sscanf(text, "%d:%7[a-z]@%u%n", &got.rank, kind, &got.step, &used) != 3 || text[used] ||
        got.rank < 0 || !got.step || (strcmp(kind, "stall") && strcmp(kind, "exit")))
        return k3_errf(err, "%s=%s: want RANK:stall@STEP or RANK:exit@STEP", flag, text);
    got.exit = !strcmp(kind, "exit");
    *f = got;
    return 0;
}

int k3_cluster_init(struct k3_cluster **out, const struct k3_cluster_opts *o, struct k3_err *err)
{
    *out = NULL;
    if (!k3_cluster_launched())
        return 0;
    int provided = 0;
    /* Only the thread that steps calls MPI; the compute and I/O threads never do. */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return k3_errf(err, "mpirun: MPI_Init failed");
    struct k3_cluster *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Finalize();
        return k3_errf(err, "out of memory");
    }
    c->o = *o;
    c->fault = o->fault.step ? o->fault : (struct k3_cluster_fault){.rank = -1};
    c->failed_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->ranks);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->steps);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->xchg);
    MPI_Comm box;
    c->box_ranks = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &box) ==
        MPI_SUCCESS) {
        MPI_Comm_size(box, &c->box_ranks);
        MPI_Comm_free(&box);
    }
    *out = c;
    if (c->ranks > K3_MAX_RANKS)
        return k3_errf(err, "mpirun -np %d: at most %d ranks", c->ranks, K3_MAX_RANKS);
    return 0;
}

void k3_cluster_finish(struct k3_cluster *c, bool ended)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_mirrors; i++)
        k3_seq_free(&c->mirrors[i]);
    free(c->mirrors);
    free(c->known);
    free(c->moe_layers);
    free(c->out);
    free(c->in);
    free(c->reqs);
    /* A rank that failed while others may still wait on it must not wait in Finalize. */
    bool abort_all = ended && c->state == CL_RUNNING;
    MPI_Comm_free(&c->steps);
    MPI_Comm_free(&c->xchg);
    free(c);
    if (abort_all)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
}

struct k3_share k3_cluster_share(const struct k3_cluster *c)
{
    return c ? (struct k3_share){.rank = c->rank, .ranks = c->ranks} : (struct k3_share){.rank = 0, .ranks = 1};
}

bool k3_cluster_leader(const struct k3_cluster *c) { return !c || c->rank == 0; }

int k3_cluster_box_ranks(const struct k3_cluster *c) { return c ? c->box_ranks : 1; }

int k3_cluster_agree(struct k3_cluster *c, bool failed, bool can_deal, struct k3_err *err)
{
    if (!c)
        return failed ? -1 : 0;
    assert(c->state == CL_SETUP);
    /* [0]: the lowest failed rank (ranks: none); [1]: 1 if every rank can deal */
    int mine[2] = {failed ? c->rank : c->ranks, can_deal}, all[2];
    MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int first = all[0];
    if (first == c->ranks) {
        assert(c->f);
        c->f->hooks.peers.share.dealt = all[1];
        c->state = CL_RUNNING;
        cluster_watch_term(); /* after the command's own handlers, which it passes on to */
        return 0;
    }
    /* Everyone learns the first failed rank's line, so the leader can say it. */
    char line[sizeof err->msg];
    snprintf(line, sizeof line, "%s", err->msg);
    MPI_Bcast(line, sizeof line, MPI_CHAR, first, MPI_COMM_WORLD);
    line[sizeof line - 1] = 0;
    return k3_errf(err, "rank %d: %s", first, line);
}

struct k3_cluster_stats k3_cluster_stats(const struct k3_cluster *c)
{
    return c ? c->stats : (struct k3_cluster_stats){0};
}

/* Ranks that notice the same trouble at once (both sides of a disagreement) would each
 * say it: the lower rank speaks first, and MPI_Abort ends the others as they wait. */
_Noreturn void cluster_abort(struct k3_cluster *c, const char *line)
{
    struct timespec turn = {0, (long)(c->rank % 5) * 200000000L};
    nanosleep(&turn, NULL);
    if (c->o.fatal)
        c->o.fatal(line);
    MPI_Abort(MPI_COMM_WORLD, 1);
    abort(); /* MPI_Abort does not return */
}

/* The ranks whose requests are still pending, once each: "1, 3", and marked in named. */
static void pending_ranks(int n, MPI_Request *reqs, const int *peer_of, bool *named, char *out,
                          size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        int done = 1; /* asked without completing it: MPI_Testall keeps its status */
        if (reqs[i] != MPI_REQUEST_NULL)
            MPI_Request_get_status(reqs[i], &done, MPI_STATUS_IGNORE);
        if (done || named[peer_of[i]] || at >= cap)
            continue;
        named[peer_of[i]] = true;
        at += (size_t)snprintf(out + at, cap - at, "%s%d", at ? ", " : "", peer_of[i]);
    }
}

/* Who says why, if mpirun ends the ranks during this wait: the leader; or, when it is the
 * leader that is silent, the lowest follower still answering (a lower one that answered
 * this rank will say it). */
static bool speaks(const struct k3_cluster *c, const bool *pending)
{
    if (c->rank == 0)
        return true;
    for (int r = 1; r < c->rank; r++)
        if (!pending[r])
            return false;
    return pending[0];
}

/* Spins briefly (an exchange usually completes within microseconds of the last rank's
 * send), then naps so that a rank waiting long leaves the cores to the others, keeping
 * up to date whom it waits for (what it says if mpirun ends it: ended.c).  The deadline
 * grows with the rank, so that when the leader stalls the lowest follower says so and
 * ends the others before they say it too. */
void cluster_wait(struct k3_cluster *c, int n, MPI_Request *reqs, const int *peer_of,
                  double timeout, const char *what, MPI_Status *statuses)
{
    double start = k3_now(), slack = timeout * 0.05 > 0.25 ? timeout * 0.05 : 0.25;
    double deadline = timeout + slack * c->rank;
    for (long polls = 0;; polls++) {
        int done = 0;
        MPI_Testall(n, reqs, &done, statuses ? statuses : MPI_STATUSES_IGNORE);
        if (done)
            break;
        if (polls < 2000)
            continue;
        double waited = k3_now() - start;
        if (timeout > 0) {
            char who[256], line[512];
            bool pending[K3_MAX_RANKS] = {false};
            pending_ranks(n, reqs, peer_of, pending, who, sizeof who);
            cluster_waiting(c, speaks(c, pending) ? who : NULL, what);
            snprintf(line, sizeof line, "rank %d: no word from rank %s in %.0f s, waiting for %s; "
                     "ending every rank", c->rank, who, waited, what);
            if (waited > deadline)
                cluster_abort(c, line);
        }
        struct timespec nap = {0, waited < 0.01 ? 20000 : 500000};
        nanosleep(&nap, NULL);
    }
    cluster_waiting(c, NULL, what);
}
