/* One model over R processes: `mpirun -np R k3-uring run|serve ...`.
 *
 * Owns MPI: starting it when launched by mpirun, each rank's share of the routed experts
 * (engine/model/share.h: expert e on rank e mod R), the ranks agreeing that all started,
 * the leader (rank 0) telling the followers each step's rows, the exchange of expert
 * outputs after each MoE layer, deadlines on every wait (a rank that stalls ends the run
 * on every rank with one line naming it), and gathering every rank's trace into the
 * leader's.  Every rank holds and computes the whole trunk, so the only traffic per MoE
 * layer is each rank's experts' outputs (k · latent f32 per row over all ranks), and
 * every rank sums them in routing order: the bytes out are one process's.
 * Does not own: which experts a row chooses or how they are summed (engine/forward),
 * reading records (engine/stream), printing (the CLI prints what err and the fatal
 * callback say).
 * All calls are on the thread that called k3_cluster_init.  A NULL cluster is valid
 * everywhere: one process, nothing exchanged.
 */
#ifndef K3_CLUSTER_H
#define K3_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/trace.h"
#include "engine/forward/forward.h"
#include "engine/model/share.h"

struct k3_cluster;

/* Launched by mpirun (its environment says so); the rank it says, or 0. */
bool k3_cluster_launched(void);
int k3_cluster_env_rank(void);

/* For the tests (the CLI's K3_RANK_FAULT): RANK:stall@STEP (that rank stops answering at
 * its first exchange of step STEP, counted from 1) or RANK:exit@STEP (it exits there,
 * status 3).  rank -1: none. */
struct k3_cluster_fault {
    int rank;
    unsigned step;
    bool exit;
};
/* text as RANK:stall@STEP or RANK:exit@STEP (STEP from 1): 0, or -1 with err naming flag
 * and text. */
int k3_cluster_fault_parse(const char *flag, const char *text, struct k3_cluster_fault *f,
                           struct k3_err *err);

struct k3_cluster_opts {
    double timeout;  /* seconds a rank waits for another inside a step */
    /* A rank stalled or the ranks fell out of step: called with one line, then every
     * rank is ended (MPI_Abort).  NULL: the line goes nowhere. */
    void (*fatal)(const char *line);
    struct k3_cluster_fault fault; /* step 0: none */
};

/* MPI started (only when launched by mpirun; *out NULL otherwise). */
int k3_cluster_init(struct k3_cluster **out, const struct k3_cluster_opts *o, struct k3_err *err);
/* MPI finished; ended: an error left the ranks out of step (they are aborted instead). */
void k3_cluster_finish(struct k3_cluster *c, bool ended);

struct k3_share k3_cluster_share(const struct k3_cluster *c);
bool k3_cluster_leader(const struct k3_cluster *c); /* rank 0, or no cluster */
/* The ranks on this rank's box, itself included (they share its memory: --ram auto
 * gives each an equal part); 1 without a cluster. */
int k3_cluster_box_ranks(const struct k3_cluster *c);

/* Every rank says whether it started (failed: its err holds why) and whether it can deal
 * experts out (it holds every expert).  Returns 0 when all started, the attached forward
 * pass's experts dealt if all can (share.h); otherwise -1 on every rank, with err naming
 * the lowest failed rank and its line. */
int k3_cluster_agree(struct k3_cluster *c, bool failed, bool can_deal, struct k3_err *err);

/* The forward pass's peer hooks (forward.h) over this cluster, for f's model. */
int k3_cluster_attach(struct k3_cluster *c, struct k3_forward *f, struct k3_err *err);

/* A follower's next step from the leader, its sequences its own copies of the leader's:
 * 0 with *st filled, 1 when the leader has stopped.  A step it cannot follow (its copy
 * of a sequence stands elsewhere) ends every rank: tokens must never differ. */
int k3_cluster_next_step(struct k3_cluster *c, struct k3_step *st);
/* The leader: no more steps; the followers' k3_cluster_next_step returns 1. */
void k3_cluster_stop(struct k3_cluster *c);

/* Every rank's trace events into the leader's trace t (the followers' own, kept in a
 * temporary file, are sent and removed).  After k3_cluster_stop / next_step's 1. */
int k3_cluster_gather_trace(struct k3_cluster *c, struct k3_trace *t, struct k3_err *err);

/* Since the cluster began: exchanges, the bytes of expert outputs every rank sent to
 * the others (summed over the ranks: the traffic between boxes), and the seconds this
 * rank waited in exchanges (for the slowest rank's experts and the network). */
struct k3_cluster_stats {
    uint64_t exchanges, bytes_sent;
    double wait_seconds;
};
struct k3_cluster_stats k3_cluster_stats(const struct k3_cluster *c);

#endif
