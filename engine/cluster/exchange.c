/* The expert outputs after each MoE layer: every rank sends its experts' output rows to
 * every other and fills the others' into its own y, so each rank sums all k of a row's
 * outputs in routing order (forward/moe.c) and every rank's trunk stays the leader's.
 * A rank whose step failed still takes part in the step's remaining exchanges, sending
 * the failure instead of rows: the others fail the same step with its line, and no
 * rank waits for a message that will never come. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/cluster/cluster_internal.h"

static struct xchg_header *message_in(struct k3_cluster *c, int rank)
{
    return (struct xchg_header *)(c->in + (size_t)rank * c->max_msg);
}

/* Sends c->out's first bytes to every other rank and receives theirs into c->in. */
static void swap(struct k3_cluster *c, size_t bytes, int layer)
{
    int n = 0, peer_of[2 * K3_MAX_RANKS];
    for (int r = 0; r < c->ranks; r++) {
        if (r == c->rank)
            continue;
        MPI_Irecv(message_in(c, r), (int)c->max_msg, MPI_BYTE, r, 0, c->xchg, &c->reqs[n]);
        peer_of[n++] = r;
        MPI_Isend(c->out, (int)bytes, MPI_BYTE, r, 0, c->xchg, &c->reqs[n]);
        peer_of[n++] = r;
    }
    char what[96];
    snprintf(what, sizeof what, "layer %d's expert outputs in step %u", layer, c->step);
    double t0 = k3_now();
    cluster_wait(c, n, c->reqs, peer_of, c->o.timeout, what, NULL);
    c->stats.wait_seconds += k3_now() - t0;
    c->stats.exchanges++;
}

static size_t message_bytes(const struct k3_cluster *c, const struct xchg_header *h)
{
    return sizeof *h + sizeof(int32_t) * (size_t)h->experts +
           sizeof(float) * (size_t)c->f->m->cfg.latent * (size_t)h->rows;
}

/* What every rank sent in this exchange: each rank's message goes to each of the others. */
static void count_sent(struct k3_cluster *c)
{
    for (int r = 0; r < c->ranks; r++) {
        const struct xchg_header *h = r == c->rank ? (const struct xchg_header *)c->out : message_in(c, r);
        c->stats.bytes_sent += message_bytes(c, h) * (uint64_t)(c->ranks - 1);
    }
}

/* This rank's message: the experts assigned to it, then their output rows. */
static void pack_rows(struct k3_cluster *c, const struct k3_expert_groups *g, const float *y,
                      struct xchg_header *h)
{
    int32_t *ids = (int32_t *)(h + 1);
    h->experts = h->rows = 0;
    for (int i = 0; i < g->n; i++)
        if (g->rank_of[i] == c->rank)
            ids[h->experts++] = g->expert[i];
    size_t row = sizeof(float) * (size_t)c->f->m->cfg.latent;
    char *rows = (char *)(ids + h->experts);
    for (int j = 0; j < h->experts; j++)
        for (int u = g->user_off[ids[j]]; u < g->user_off[ids[j] + 1]; u++)
            memcpy(rows + row * (size_t)h->rows++, (const char *)y + row * (size_t)g->users[u], row);
}

/* Rank r's rows into y, after checking that it computed the experts this rank assigned
 * it: ranks that disagree would sum each other's rows into other tokens, so they end. */
static void unpack_rows(struct k3_cluster *c, int r, const struct k3_expert_groups *g, float *y)
{
    const struct xchg_header *h = message_in(c, r);
    const int32_t *ids = (const int32_t *)(h + 1);
    const char *rows = (const char *)(ids + h->experts);
    size_t row = sizeof(float) * (size_t)c->f->m->cfg.latent;
    int j = 0, n = 0;
    bool agree = true;
    for (int i = 0; agree && i < g->n; i++) {
        if (g->rank_of[i] != r)
            continue;
        int e = g->expert[i], users = g->user_off[e + 1] - g->user_off[e];
        agree = j < h->experts && ids[j] == e && n + users <= h->rows;
        for (int u = g->user_off[e]; agree && u < g->user_off[e + 1]; u++)
            memcpy((char *)y + row * (size_t)g->users[u], rows + row * (size_t)n++, row);
        j++;
    }
    if (agree && j == h->experts && n == h->rows)
        return;
    char line[256];
    snprintf(line, sizeof line, "rank %d: rank %d computed other experts of layer %d than this "
             "rank gave it (do the ranks run with different options?); ending every rank",
             c->rank, r, h->layer);
    cluster_abort(c, line);
}

/* Each message belongs to this step and layer; anything else means the ranks lost step. */
static void check_headers(struct k3_cluster *c, int layer)
{
    for (int r = 0; r < c->ranks; r++) {
        const struct xchg_header *h = message_in(c, r);
        if (r == c->rank || (h->layer == layer && h->step == c->step))
            continue;
        char line[160];
        snprintf(line, sizeof line, "rank %d: rank %d sent layer %d of step %u, expected layer %d "
                 "of step %u", c->rank, r, h->layer, h->step, layer, c->step);
        cluster_abort(c, line);
    }
}

/* The first failure among the messages, kept for the step's remaining exchanges. */
static bool take_failure(struct k3_cluster *c)
{
    for (int r = 0; r < c->ranks && c->failed_rank < 0; r++) {
        const struct xchg_header *h = message_in(c, r);
        if (r != c->rank && h->failed_rank >= 0) {
            c->failed_rank = h->failed_rank;
            snprintf(c->failed_line, sizeof c->failed_line, "%.*s", (int)sizeof c->failed_line - 1,
                     (const char *)(h + 1));
        }
    }
    return c->failed_rank >= 0;
}

/* K3_RANK_FAULT: this rank dies or stops answering here. */
static void injected_fault(const struct k3_cluster *c)
{
    if (c->fault.rank != c->rank || c->fault.step != c->step || c->next_exchange)
        return;
    if (c->fault.exit)
        _exit(3);
    for (;;)
        pause();
}

static int exchange(void *ctx, int layer, const struct k3_expert_groups *g, float *y,
                    struct k3_err *err)
{
    struct k3_cluster *c = ctx;
    injected_fault(c);
    assert(c->state == CL_RUNNING && c->failed_rank < 0);
    assert(c->next_exchange < c->n_moe && c->moe_layers[c->next_exchange] == layer);
    struct xchg_header *h = (struct xchg_header *)c->out;
    *h = (struct xchg_header){-1, layer, c->step, 0, 0};
    pack_rows(c, g, y, h);
    swap(c, message_bytes(c, h), layer);
    c->next_exchange++;
    check_headers(c, layer);
    if (take_failure(c))
        return k3_errf(err, "rank %d: %s", c->failed_rank, c->failed_line);
    count_sent(c);
    for (int r = 0; r < c->ranks; r++)
        if (r != c->rank)
            unpack_rows(c, r, g, y);
    return 0;
}

/* A failed step: the failure goes out in place of every exchange the step still owes. */
static void step_done(void *ctx, bool failed, struct k3_err *err)
{
    struct k3_cluster *c = ctx;
    assert(c->state == CL_RUNNING);
    assert(failed || c->next_exchange == c->n_moe);
    if (!failed)
        return;
    if (c->failed_rank < 0) {
        c->failed_rank = c->rank;
        snprintf(c->failed_line, sizeof c->failed_line, "%s", err->msg);
    } else if (c->failed_rank != c->rank) { /* its line as it said it, not as it reached us */
        k3_errf(err, "rank %d: %s", c->failed_rank, c->failed_line);
    }
    struct xchg_header *h = (struct xchg_header *)c->out;
    for (; c->next_exchange < c->n_moe; c->next_exchange++) {
        int layer = c->moe_layers[c->next_exchange];
        *h = (struct xchg_header){c->failed_rank, layer, c->step, 0, 0};
        size_t len = strlen(c->failed_line) + 1;
        memcpy(h + 1, c->failed_line, len);
        swap(c, sizeof *h + len, layer);
        check_headers(c, layer);
    }
}

int k3_cluster_attach(struct k3_cluster *c, struct k3_forward *f, struct k3_err *err)
{
    if (!c)
        return 0;
    const struct k3_config *cfg = &f->m->cfg;
    c->f = f;
    c->n_moe = 0;
    if (!(c->moe_layers = malloc(sizeof(int) * (size_t)cfg->n_layers)))
        return k3_errf(err, "out of memory");
    for (int l = 0; l < cfg->n_layers; l++)
        if (k3_layer_is_moe(cfg, l))
            c->moe_layers[c->n_moe++] = l;
    size_t slots = (size_t)K3_CHUNK * (size_t)cfg->top_k;
    size_t rows = slots * (sizeof(int32_t) + sizeof(float) * (size_t)cfg->latent);
    c->max_msg = sizeof(struct xchg_header) + (rows > sizeof c->failed_line ? rows : sizeof c->failed_line);
    c->out = malloc(c->max_msg);
    c->in = calloc((size_t)c->ranks, c->max_msg);
    c->reqs = malloc(sizeof *c->reqs * 2 * (size_t)c->ranks);
    if (!c->out || !c->in || !c->reqs)
        return k3_errf(err, "out of memory for the expert exchange (%zu bytes a rank)", c->max_msg);
    f->hooks.peers = (struct k3_peer_hooks){
        .share = k3_cluster_share(c),
        .step = c->rank == 0 ? cluster_tell_step : NULL,
        .exchange = exchange,
        .step_done = step_done,
        .ctx = c,
    };
    return 0;
}
