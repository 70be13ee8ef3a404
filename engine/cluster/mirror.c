/* The leader's steps, told to the followers: each row's token and sequence, and where
 * that sequence stood, so a follower's copy of every sequence runs the same rows.  The
 * followers wait for steps without a deadline (a server may idle for hours) and without
 * spinning. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cluster/cluster_internal.h"

/* The leader's index for q, new sequences appended. */
static int known_index(struct k3_cluster *c, const struct k3_seq *q, struct k3_err *err)
{
    for (int i = 0; i < c->n_known; i++)
        if (c->known[i] == q)
            return i;
    if (c->n_known == c->cap_known) {
        int cap = c->cap_known ? 2 * c->cap_known : 16;
        const struct k3_seq **k = realloc(c->known, sizeof *k * (size_t)cap);
        if (!k)
            return k3_errf(err, "out of memory");
        c->known = k;
        c->cap_known = cap;
    }
    c->known[c->n_known] = q;
    return c->n_known++;
}

static void broadcast(struct k3_cluster *c)
{
    MPI_Request req;
    int peer = 0;
    MPI_Ibcast(&c->msg, sizeof c->msg, MPI_BYTE, 0, c->steps, &req);
    cluster_wait(c, 1, &req, &peer, c->rank == 0 ? c->o.timeout : 0, "a step", NULL);
}

int cluster_tell_step(void *ctx, const struct k3_step *st, struct k3_err *err)
{
    struct k3_cluster *c = ctx;
    assert(c->state == CL_RUNNING && c->rank == 0);
    if (st->n < 1 || st->n > K3_CHUNK)
        return k3_errf(err, "a step of %d rows (1 to %d)", st->n, K3_CHUNK);
    c->msg.kind = MSG_STEP;
    c->msg.n = st->n;
    for (int t = 0; t < st->n; t++) {
        int i = known_index(c, st->seq[t], err);
        if (i < 0)
            return -1;
        c->msg.tokens[t] = st->tokens[t];
        c->msg.seq[t] = i;
        c->msg.pos[t] = st->seq[t]->pos;
        c->msg.max_ctx[t] = st->seq[t]->max_ctx;
    }
    broadcast(c);
    c->step++;
    c->next_exchange = 0;
    c->failed_rank = -1;
    return 0;
}

void k3_cluster_stop(struct k3_cluster *c)
{
    if (!c || c->rank != 0 || c->state != CL_RUNNING)
        return;
    c->msg.kind = MSG_STOP;
    broadcast(c);
    c->state = CL_STOPPED;
}

/* Room for one more copy. */
static int grow_mirrors(struct k3_cluster *c, struct k3_err *err)
{
    if (c->n_mirrors < c->cap_mirrors)
        return 0;
    int cap = c->cap_mirrors ? 2 * c->cap_mirrors : 16;
    struct k3_seq *m = realloc(c->mirrors, sizeof *m * (size_t)cap);
    if (!m)
        return k3_errf(err, "out of memory");
    c->mirrors = m;
    c->cap_mirrors = cap;
    return 0;
}

/* *q: the follower's copy of the leader's sequence i, made on first sight; a sequence
 * starting at position 0 starts from zeroed state (the leader reset it, or it is new). */
static int mirror(struct k3_cluster *c, int i, int pos, int max_ctx, struct k3_seq **q,
                  struct k3_err *err)
{
    const struct k3_config *cfg = &c->f->m->cfg;
    if (i < 0 || i > c->n_mirrors)
        return k3_errf(err, "the leader's step names sequence %d of %d", i, c->n_mirrors);
    if (i == c->n_mirrors) {
        if (grow_mirrors(c, err) || k3_seq_init(&c->mirrors[i], cfg, max_ctx, err))
            return -1;
        c->n_mirrors++;
    }
    *q = &c->mirrors[i];
    if ((*q)->max_ctx != max_ctx)
        return k3_errf(err, "sequence %d holds %d positions, the leader's %d", i, (*q)->max_ctx,
                       max_ctx);
    if (pos == 0)
        k3_seq_reset(*q, cfg);
    else if ((*q)->pos != pos)
        return k3_errf(err, "sequence %d is at position %d, the leader's at %d", i, (*q)->pos, pos);
    return 0;
}

int k3_cluster_next_step(struct k3_cluster *c, struct k3_step *st)
{
    assert(c->state == CL_RUNNING && c->rank != 0);
    broadcast(c);
    if (c->msg.kind == MSG_STOP) {
        c->state = CL_STOPPED;
        return 1;
    }
    c->step++;
    c->next_exchange = 0;
    c->failed_rank = -1;
    struct k3_err err = {{0}};
    if (c->msg.kind != MSG_STEP || c->msg.n < 1 || c->msg.n > K3_CHUNK)
        k3_errf(&err, "a step of kind %d and %d rows", c->msg.kind, c->msg.n);
    for (int t = 0; !err.msg[0] && t < c->msg.n; t++) {
        if (t && c->msg.seq[t] == c->msg.seq[t - 1])
            c->row_seq[t] = c->row_seq[t - 1];
        else
            mirror(c, c->msg.seq[t], c->msg.pos[t], c->msg.max_ctx[t], &c->row_seq[t], &err);
    }
    if (err.msg[0]) { /* a follower that cannot follow would make other tokens: end */
        char line[sizeof err.msg + 64];
        snprintf(line, sizeof line, "rank %d: out of step with the leader: %s", c->rank, err.msg);
        cluster_abort(c, line);
    }
    *st = (struct k3_step){.n = c->msg.n, .tokens = c->msg.tokens, .seq = c->row_seq};
    return 0;
}
