/* The feed-forward sublayers: the dense SiTU-GLU MLP and the latent MoE (§3.7-3.8).
 *
 * The MoE reads each expert the step's rows chose once, however many rows chose it, and
 * multiplies it for all of them; the whole union goes to the store at once and streams
 * through its slots; records are computed in the order they land, each by the team
 * whose node holds it, and the outputs are combined in selection order, never
 * arrival order.  Under mpirun a process reads and computes only its share of the chosen
 * experts; the others' outputs come from the peer hooks before the combine. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "engine/forward/forward_internal.h"
#include "engine/forward/layers.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/matrix.h"
#include "engine/kernels/mxfp4.h"
#include "numa/teams.h"

void k3_mlp_rows(const struct k3_config *c, const struct k3_mlp_weights *w, int I,
                 const float *in, float *out, float *act, int T)
{
    int H = c->hidden;
    k3_matmul_situ(w->gate, w->up, I, H, in, H, act, I, T, c->situ_beta, c->situ_linear_beta);
    k3_matmul(w->down, H, I, act, I, out, H, T);
}

/* Groups the n (row, slot) choices sel[] of E experts by expert (a counting sort). */
static void group_by_expert(struct k3_expert_groups *g, const int *sel, int n, int E)
{
    memset(g->user_off, 0, sizeof(int) * (size_t)(E + 1));
    for (int i = 0; i < n; i++)
        g->user_off[sel[i] + 1]++;
    g->n = 0;
    for (int e = 0; e < E; e++) {
        if (g->user_off[e + 1])
            g->expert[g->n++] = e;
        g->user_off[e + 1] += g->user_off[e];
    }
    for (int i = 0; i < n; i++) /* fill, then shift the offsets back */
        g->users[g->user_off[sel[i]]++] = i;
    for (int e = E; e > 0; e--)
        g->user_off[e] = g->user_off[e - 1];
    g->user_off[0] = 0;
}

/* One expert on the rows that chose it, y = W2·SiTU(W1 z, W3 z), by every thread of a
 * team (the leader gathers the inputs and scatters the outputs, the mat-vecs split their
 * rows over the team and return once it is done: numa/teams.h), or by one thread alone
 * (the leader, in its own buffers). */
static void run_expert(struct k3_forward *f, const struct expert_bufs *ts, bool leader,
                       const uint8_t *rec, int n_users, const int *users)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_record_layout *r = &f->m->record;
    struct k3_forward_scratch *s = f->s;
    int Hl = c->latent, I = c->moe_inter, K = c->top_k;
    if (leader)
        for (int u = 0; u < n_users; u++)
            memcpy(ts->zt + (size_t)u * Hl, s->z + (size_t)(users[u] / K) * Hl, sizeof(float) * Hl);
    k3numa_team_barrier();
    k3_matmul_mxfp4_situ(rec + r->off[K3_W1_PACKED], rec + r->off[K3_W1_SCALE],
                         rec + r->off[K3_W3_PACKED], rec + r->off[K3_W3_SCALE], I, Hl, ts->zt, Hl,
                         ts->fg, I, n_users, c->situ_beta, c->situ_linear_beta);
    k3_matmul_mxfp4(rec + r->off[K3_W2_PACKED], rec + r->off[K3_W2_SCALE], Hl, I, ts->fg, I,
                    ts->yt, Hl, n_users);
    if (leader)
        for (int u = 0; u < n_users; u++)
            memcpy(s->y + (size_t)users[u] * Hl, ts->yt + (size_t)u * Hl, sizeof(float) * Hl);
}

/* The rows of the team's buffers member m may use alone in a prompt pass's round. */
static struct expert_bufs member_slice(const struct k3_forward *f, const struct expert_bufs *whole,
                                       int member, int slice)
{
    size_t at = (size_t)member * (size_t)slice, Hl = (size_t)f->m->cfg.latent;
    return (struct expert_bufs){whole->zt + at * Hl, whole->fg + at * (size_t)f->m->cfg.moe_inter,
                                whole->yt + at * Hl};
}

/* A team's share of one round: the experts whose records landed in its node's buffers,
 * in landing order.  The small ones (at most alone_rows rows) are computed whole by
 * whichever member claims them first.  So are, in a prompt pass's round of many experts,
 * those that fit a member's slice of the team's buffers: there the barriers inside a
 * split expert would cost more than its split gains.  The others take the whole team,
 * and in such a round they are fenced by barriers, since the leader gathers into and
 * scatters out of rows the members' slices reuse. */
static void team_experts(void *arg, int team)
{
    struct k3_forward *f = arg;
    const struct k3_expert_groups *g = &f->s->groups;
    struct team_scratch *ts = &f->s->team[team];
    int member = 0, n_members = 1;
    k3numa_team_self(&member, &n_members);
    assert(member < f->s->threads);
    bool dealing = !f->s->decode && n_members > 1 && ts->n_jobs >= 4 * n_members;
    int slice = f->s->rows / n_members;
    for (int j = 0; j < ts->n_jobs; j++) {
        struct expert_job *job = &ts->jobs[j];
        int e = job->expert, n_users = g->user_off[e + 1] - g->user_off[e];
        const int *users = g->users + g->user_off[e];
        bool small = n_users <= f->s->alone_rows, alone = small || (dealing && n_users <= slice);
        if (alone && atomic_exchange(&job->claimed, 1))
            continue;
        bool leader = alone || member == 0;
        if (leader)
            job->began = k3_trace_now(f->hooks.trace);
        if (alone) {
            atomic_fetch_add(&ts->computed_whole, 1);
            struct expert_bufs mine = small ? ts->alone[member] : member_slice(f, &ts->whole, member, slice);
            k3numa_team_alone(true);
            run_expert(f, &mine, true, job->record, n_users, users);
            k3numa_team_alone(false);
        } else {
            if (dealing)
                k3numa_team_barrier();
            run_expert(f, &ts->whole, member == 0, job->record, n_users, users);
            if (dealing)
                k3numa_team_barrier();
        }
        if (leader)
            job->ended = k3_trace_now(f->hooks.trace);
    }
}

static void trace_round(struct k3_forward *f, int l)
{
    struct k3_forward_scratch *s = f->s;
    for (int i = 0; f->hooks.trace && i < s->n_teams; i++)
        for (int j = 0; j < s->team[i].n_jobs; j++) {
            const struct expert_job *job = &s->team[i].jobs[j];
            char args[64];
            snprintf(args, sizeof args, "\"layer\": %d, \"expert\": %d", l, job->expert);
            k3_trace_team_span(f->hooks.trace, i, k3numa_teams_node(f->teams, i), "expert", args,
                               job->began, job->ended);
        }
}

/* Computes the records of experts[0..n) as they land: whatever has landed (when the
 * store queues some of them, up to half its reads in flight, so that the other half
 * keeps the drives busy) goes to the teams whose nodes hold it, all teams computing at
 * once; then each record computed gives its slot back to the store for the next queued
 * read, until all n are done. */
static int routed_experts(struct k3_forward *f, int l, const int *experts, int n,
                          struct k3_err *err)
{
    struct k3_forward_scratch *s = f->s;
    struct k3_expert_store *store = f->experts;
    int round_max = n <= store->capacity ? n : store->capacity > 1 ? store->capacity / 2 : 1;
    for (int done = 0; done < n;) {
        for (int i = 0; i < s->n_teams; i++)
            s->team[i].n_jobs = 0;
        int taken = 0;
        struct k3_landed got;
        int rc = store->ops->next(store, true, &got, err);
        for (; rc == 0; rc = store->ops->next(store, false, &got, err)) {
            struct team_scratch *ts = &s->team[got.team % s->n_teams];
            s->round[taken] = got.index;
            ts->jobs[ts->n_jobs++] = (struct expert_job){experts[got.index], got.record, 0, 0, 0};
            ts->computed++;
            if (++taken == round_max || done + taken == n)
                break;
        }
        if (rc < 0)
            return -1;
        k3numa_teams_run(f->teams, team_experts, f);
        trace_round(f, l);
        for (int i = 0; i < taken; i++)
            if (store->ops->done(store, s->round[i], err))
                return -1;
        done += taken;
    }
    return 0;
}

/* Which rank reads and computes each chosen expert of layer l (share.h): its owner, or,
 * dealt, the rank a prediction already gave it (its record may be landing there) and the
 * others each to the least loaded rank, so the counts end within one of each other
 * whenever the predicted ones leave room.  Every rank computes the same hidden states,
 * hence the same prediction and the same assignment, with no message. */
static void assign_ranks(struct k3_forward_scratch *s, struct k3_share share, int l)
{
    struct k3_expert_groups *g = &s->groups;
    int load[K3_MAX_RANKS] = {0};
    bool predicted = share.dealt && s->pred_layer == l;
    for (int i = 0; i < g->n; i++) {
        int e = g->expert[i];
        g->rank_of[i] = k3_share_whole(share) ? 0 : !share.dealt ? e % share.ranks
                        : predicted ? s->pred_rank[e] : -1;
        if (g->rank_of[i] >= 0)
            load[g->rank_of[i]]++;
    }
    for (int i = 0; i < g->n; i++) {
        if (g->rank_of[i] >= 0)
            continue;
        int least = 0;
        for (int r = 1; r < share.ranks; r++)
            least = load[r] < load[least] ? r : least;
        g->rank_of[i] = least;
        load[least]++;
    }
}

/* The chosen experts this process computes, ascending, into owned; their count. */
static int owned_experts(const struct k3_expert_groups *g, int rank, int *owned)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        if (g->rank_of[i] == rank)
            owned[n++] = g->expert[i];
    return n;
}

/* The other processes' experts' outputs into s->y (none when this one computes all). */
static int peer_outputs(struct k3_forward *f, int l, struct k3_err *err)
{
    const struct k3_peer_hooks *p = &f->hooks.peers;
    if (!p->exchange)
        return 0;
    k3_trace_begin(f->hooks.trace, "exchange", NULL);
    int rc = p->exchange(p->ctx, l, &f->s->groups, f->s->y, err);
    k3_trace_end(f->hooks.trace);
    return rc;
}

/* lat[t] = norm(Σ_j w[t][j] · y[t][j]) over the row's slots in selection order. */
static void combine_rows(const struct k3_config *c, struct k3_forward_scratch *s,
                         const float *latent_norm, int T)
{
    int Hl = c->latent, K = c->top_k;
    for (int t = 0; t < T; t++) {
        float *lat = s->lat + (size_t)t * Hl;
        const float *wt = s->selw + (size_t)t * K;
        const float *yt = s->y + (size_t)t * K * Hl;
        for (int i = 0; i < Hl; i++) {
            float acc = 0;
            for (int j = 0; j < K; j++)
                acc += wt[j] * yt[(size_t)j * Hl + i];
            lat[i] = acc;
        }
        k3_rmsnorm(lat, lat, latent_norm, Hl, c->rms_eps);
    }
}

/* Each row's k experts and their weights: the router's choice, or a replayed trace's
 * (hooks.routes) weighed by the router's scores. */
static int route_rows(struct k3_forward *f, int l, int T, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_moe_weights *w = &f->m->w.layers[l].moe;
    const struct k3_route_source *replay = f->hooks.routes;
    struct k3_forward_scratch *s = f->s;
    int H = c->hidden, E = c->n_experts, K = c->top_k;
    k3_matmul_bf16(w->router, E, H, s->hn, H, s->rlogit, E, T);
    for (int t = 0; t < T; t++) {
        const float *logit = s->rlogit + (size_t)t * E;
        int *sel = s->sel + (size_t)t * K;
        if (!replay) {
            k3_route(c, logit, w->router_bias, sel, s->selw + (size_t)t * K, s->rkey);
            continue;
        }
        if (replay->choose(replay->ctx, s->row_seq[t], s->row_pos[t], l, sel, err))
            return -1;
        k3_route_weigh(c, logit, sel, K, s->selw + (size_t)t * K);
    }
    return 0;
}

int k3_moe_rows(struct k3_forward *f, int l, int T, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_moe_weights *w = &f->m->w.layers[l].moe;
    struct k3_forward_scratch *s = f->s;
    struct k3_expert_store *store = f->experts;
    int H = c->hidden, Hl = c->latent, E = c->n_experts, K = c->top_k;

    if (route_rows(f, l, T, err))
        return -1;
    group_by_expert(&s->groups, s->sel, T * K, E);
    if (s->decode)
        f->stats.decode_experts[l] += (uint64_t)s->groups.n;

    /* The reads go out first; the next layer's prediction, the latent projection and the
     * shared experts compute while they land. */
    assign_ranks(s, f->hooks.peers.share, l);
    const int *chosen = s->owned;
    int n_chosen = owned_experts(&s->groups, f->hooks.peers.share.rank, s->owned);
    if (store->ops->begin(store, l, chosen, n_chosen, err) ||
        k3_stage_predict(f, l, K3_AT_FFN_INPUT, T, err))
        return -1;
    k3_trace_begin(f->hooks.trace, "shared + latent", NULL);
    k3_matmul(w->latent_down, Hl, H, s->hn, H, s->z, Hl, T);
    /* Shared experts see the full-width input; their output adds unweighted. */
    k3_mlp_rows(c, &w->shared, k3_shared_inter(c), s->hn, s->o, s->fg, T);
    k3_trace_end(f->hooks.trace);
    if (routed_experts(f, l, chosen, n_chosen, err))
        return -1;
    if (peer_outputs(f, l, err))
        return -1;

    combine_rows(c, s, w->latent_norm, T);
    k3_matmul(w->latent_up, H, Hl, s->lat, Hl, s->routed, H, T);
    for (size_t i = 0; i < (size_t)T * H; i++)
        s->o[i] += s->routed[i];
    return 0;
}
