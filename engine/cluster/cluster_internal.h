/* Inside engine/cluster: the cluster's state and the helpers its files share.
 * Files: cluster.c MPI's life, agreeing, waiting with a deadline; mirror.c the leader's
 * steps told to the followers; exchange.c expert outputs after each MoE layer; gather.c
 * the followers' traces into the leader's; ended.c what a rank says when mpirun ends it.
 * Owns: struct k3_cluster's fields, the messages between ranks (a step, an exchange's
 * header) and the helpers the files share.  Does not own: the interface the runtime
 * calls (cluster.h) or which rank holds which experts (engine/model/share.h). */
#ifndef K3_CLUSTER_INTERNAL_H
#define K3_CLUSTER_INTERNAL_H

#include <mpi.h>

#include "engine/cluster/cluster.h"

/* The leader's word to the followers: a step's rows, or the end. */
enum { MSG_STEP = 1, MSG_STOP = 2 };
struct step_msg {
    int32_t kind;
    int32_t n;
    int32_t tokens[K3_CHUNK];
    int32_t seq[K3_CHUNK];     /* the leader's sequence, as an index into its table */
    int32_t pos[K3_CHUNK];     /* that sequence's position before the step */
    int32_t max_ctx[K3_CHUNK];
};

/* A rank's part of one MoE layer's exchange: a header, the experts it computed
 * (ascending int32 ids: the receivers check them against whom they assigned each), then
 * their output rows, each expert's users in order; or, failed, the failing rank's line. */
struct xchg_header {
    int32_t failed_rank;       /* -1, or the rank whose error failed the step */
    int32_t layer;
    uint32_t step;
    int32_t experts;           /* expert ids that follow */
    int32_t rows;              /* output rows after them */
};

/* States: SETUP until every rank agreed it started, then RUNNING until the leader stops
 * (STOPPED).  A wait that runs out ends every rank from any state (cluster_abort). */
enum cluster_state { CL_SETUP, CL_RUNNING, CL_STOPPED };

struct k3_cluster {
    struct k3_cluster_opts o;
    struct k3_cluster_fault fault;
    int rank, ranks;
    int box_ranks;                /* ranks on this rank's box (MPI_COMM_TYPE_SHARED) */
    MPI_Comm steps, xchg;          /* the leader's steps; the expert exchanges */
    enum cluster_state state;
    /* the forward pass this cluster serves */
    struct k3_forward *f;
    int *moe_layers, n_moe;        /* the layers that exchange, in order */
    uint32_t step;                 /* steps begun */
    int next_exchange;             /* index into moe_layers within the step */
    int failed_rank;               /* the step failed: whose error, or -1 */
    char failed_line[512];         /* its line (struct k3_err's size) */
    /* exchange buffers: one message out, one in per rank */
    size_t max_msg;
    char *out, *in;                /* [max_msg], [ranks][max_msg] */
    MPI_Request *reqs;             /* [2 * ranks] */
    /* mirror: the leader's sequences, by the index it sends; a follower's copies of them */
    const struct k3_seq **known;
    int n_known, cap_known;
    struct k3_seq *mirrors;
    int n_mirrors, cap_mirrors;
    struct k3_seq *row_seq[K3_CHUNK];
    struct step_msg msg;
    struct k3_cluster_stats stats;
};

/* Waits for reqs[0..n) until all are done or timeout (the cluster's; 0: forever).  On
 * timeout: the ranks that owe a request are named in a line with what (e.g. "layer 3's
 * expert outputs of step 17"), passed to the fatal callback, and every rank is aborted.
 * peer_of[i]: the rank request i waits on; statuses: NULL, or [n] filled. */
void cluster_wait(struct k3_cluster *c, int n, MPI_Request *reqs, const int *peer_of,
                  double timeout, const char *what, MPI_Status *statuses);
/* The leader's peer hook: the step's rows to every follower (mirror.c). */
int cluster_tell_step(void *ctx, const struct k3_step *st, struct k3_err *err);
/* ended.c: SIGTERM from mpirun (another rank died) said as who this rank waits for and
 * what (cluster_waiting; who NULL: nothing to say), once installed by cluster_watch_term. */
void cluster_watch_term(void);
void cluster_waiting(const struct k3_cluster *c, const char *who, const char *what);
/* Ends every rank after saying line (the fatal callback). */
_Noreturn void cluster_abort(struct k3_cluster *c, const char *line);

#endif
