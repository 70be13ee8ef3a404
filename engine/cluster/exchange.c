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
    double t0 = cluster_now();
    cluster_wait(c, n, c->reqs, peer_of, c->o.timeout, what, NULL);
    c->stats.wait_seconds += cluster_now() - t0;
    c->stats.exchanges++;
}

/* What every rank sent in this exchange: each rank's rows go to each of the others. */
static void count_sent(struct k3_cluster *c)
{
    size_t row = sizeof(float) * (size_t)c->f->m->cfg.latent;
    for (int r = 0; r < c->ranks; r++) {
        const struct xchg_header *h = r == c->rank ? (const struct xchg_header *)c->out : message_in(c, r);
        c->stats.bytes_sent += (sizeof *h + row * (size_t)h->rows) * (uint64_t)(c->ranks - 1);
    }
}

/* This rank's experts' output rows: ascending experts, each expert's users in order. */
static int pack_rows(struct k3_cluster *c, const struct k3_expert_groups *g, const float *y,
                     float *out)
{
    size_t row = sizeof(float) * (size_t)c->f->m->cfg.latent;
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        int e = g->expert[i];
        bool mine = g->rank_of[i] == c->rank;
        for (int u = g->user_off[e]; mine && u < g->user_off[e + 1]; u++)
            memcpy((char *)out + row * (size_t)n++, (const char *)y + row * (size_t)g->users[u], row);
    }
    return n;
}

/* Rank r's rows into y, in the order pack_rows wrote them; -1 if it sent another count. */
static int unpack_rows(struct k3_cluster *c, int r, const struct k3_expert_groups *g, float *y)
{
    const struct xchg_header *h = message_in(c, r);
    const char *rows = (const char *)(h + 1);
    size_t row = sizeof(float) * (size_t)c->f->m->cfg.latent;
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        int e = g->expert[i];
        bool theirs = g->rank_of[i] == r;
        for (int u = g->user_off[e]; theirs && u < g->user_off[e + 1]; u++, n++)
            if (n < h->rows)
                memcpy((char *)y + row * (size_t)g->users[u], rows + row * (size_t)n, row);
    }
    return n == h->rows ? 0 : -1;
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
    int rows = pack_rows(c, g, y, (float *)(h + 1));
    *h = (struct xchg_header){-1, layer, c->step, rows};
    swap(c, sizeof *h + sizeof(float) * (size_t)rows * (size_t)c->f->m->cfg.latent, layer);
    c->next_exchange++;
    check_headers(c, layer);
    if (take_failure(c))
        return k3_errf(err, "rank %d: %s", c->failed_rank, c->failed_line);
    count_sent(c);
    for (int r = 0; r < c->ranks; r++)
        if (r != c->rank && unpack_rows(c, r, g, y))
            return k3_errf(err, "rank %d sent %d expert outputs for layer %d, not its share",
                           r, message_in(c, r)->rows, layer);
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
        *h = (struct xchg_header){c->failed_rank, layer, c->step, 0};
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
    size_t rows = sizeof(float) * (size_t)K3_CHUNK * (size_t)cfg->top_k * (size_t)cfg->latent;
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
