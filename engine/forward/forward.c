#include "engine/forward/forward.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/kernels.h"
#include "engine/forward/layers.h"
#include "engine/kernels/mxfp4.h"
#include "numa/teams.h"

/* A routed expert whose record has landed, for its team to compute. */
struct expert_job {
    int expert;
    const uint8_t *record;
    double began, ended;  /* trace times of its computation */
};

/* What one compute team uses for routed experts (numa/teams.h), C = K3_CHUNK tokens. */
struct team_scratch {
    float *zt;            /* [C][H_l] one expert's gathered inputs */
    float *fg;            /* [C][moe_inter] SiTU(W1 z, W3 z) */
    float *yt;            /* [C][H_l] its outputs */
    struct expert_job *jobs; /* [C * k] this round's experts, in the order they landed */
    int n_jobs;
    uint64_t computed;    /* experts computed since the session began */
};

/* Scratch for one chunk of up to K3_CHUNK tokens (C below); shapes per buffer. */
struct k3_session_scratch {
    void *block;     /* the one allocation every buffer below lives in */
    float *p;        /* [C][H] live partial sum of the current AttnRes block */
    float *blocks;   /* [C][max_blocks][H] stored block representations B */
    float *a;        /* [C][H] mixed layer input */
    float *hn;       /* [C][H] normalized layer input */
    float *o;        /* [C][H] attention or FFN output */
    float *kq, *kk, *kv, *ku, *kz, *kout; /* [C][P] KDA projections and gated output */
    float *kfa;      /* [C][kda_head_dim] low-rank gate */
    float *kbeta;    /* [C][kda_heads] */
    float *mcq;      /* [C][q_lora] */
    float *mq;       /* [C][mla_heads * (nope + rope)] */
    float *mkv;      /* [C][kv_lora + rope] */
    float *mo, *mg;  /* [C][mla_heads * v_head] attention output and gate */
    float *mla_tmp;  /* [threads][max_ctx + 2 * kv_lora] */
    int threads;
    int n_teams;
    struct team_scratch *team; /* [n_teams] */
    float *fg;       /* [C][max(dense, shared, expert) width] SiTU(gate, up) of an MLP */
    float *rlogit;   /* [C][E] router logits */
    float *rkey;     /* [E] router selection keys */
    int *sel;        /* [C][k] selected experts, selection order */
    float *selw;     /* [C][k] their weights */
    float *z;        /* [C][H_l] latent inputs */
    float *y;        /* [C][k][H_l] expert output per (token, slot) */
    int *user_off;   /* [E + 1] CSR offsets of (token, slot) users per expert */
    int *users;      /* [C * k] token * k + slot */
    int *batch;      /* [min(E, C * k)] experts to read, ascending */
    float *pred_h;   /* [H] the hidden state a prediction routes */
    float *pred_logit; /* [E] */
    int *pred_idx;   /* [E] predicted experts */
    float *pred_w;   /* [E] */
    void *mxfp4;     /* the expert kernels' scratch: [threads] slots of [C][max(H_l, moe_inter)] */
};

static int max3(int a, int b, int c)
{
    int m = a > b ? a : b;
    return m > c ? m : c;
}

/* Activations per token of the widest expert mat-mul (w1, w3 read H_l; w2 moe_inter). */
static int expert_inputs(const struct k3_config *c)
{
    return c->latent > c->moe_inter ? c->latent : c->moe_inter;
}

/* Bump allocation of every scratch buffer from one block. */
struct bump {
    char *base;
    size_t used;
};

static void *take(struct bump *b, size_t bytes)
{
    void *p = b->base ? b->base + b->used : NULL;
    b->used += (bytes + 63) / 64 * 64;
    return p;
}

static void layout_scratch(struct k3_session_scratch *s, struct bump *b, const struct k3_config *c,
                           int max_ctx)
{
    size_t C = K3_CHUNK, H = (size_t)c->hidden, P = (size_t)k3_kda_width(c), f = sizeof(float);
    size_t Hl = (size_t)c->latent, E = (size_t)c->n_experts, K = (size_t)c->top_k;
    size_t mla_out = (size_t)k3_mla_out_width(c);
    size_t ffn = (size_t)max3(c->dense_inter, k3_shared_inter(c), c->moe_inter);
    s->p = take(b, C * H * f);
    s->blocks = take(b, C * (size_t)k3_max_blocks(c) * H * f);
    s->a = take(b, C * H * f);
    s->hn = take(b, C * H * f);
    s->o = take(b, C * H * f);
    s->kq = take(b, C * P * f);
    s->kk = take(b, C * P * f);
    s->kv = take(b, C * P * f);
    s->ku = take(b, C * P * f);
    s->kz = take(b, C * P * f);
    s->kout = take(b, C * P * f);
    s->kfa = take(b, C * (size_t)c->kda_head_dim * f);
    s->kbeta = take(b, C * (size_t)c->kda_heads * f);
    s->mcq = take(b, C * (size_t)c->q_lora * f);
    s->mq = take(b, C * (size_t)c->mla_heads * (size_t)(c->qk_nope + c->qk_rope) * f);
    s->mkv = take(b, C * (size_t)(c->kv_lora + c->qk_rope) * f);
    s->mo = take(b, C * mla_out * f);
    s->mg = take(b, C * mla_out * f);
    s->mla_tmp = take(b, (size_t)s->threads * ((size_t)max_ctx + 2 * (size_t)c->kv_lora) * f);
    s->fg = take(b, C * ffn * f);
    s->rlogit = take(b, C * E * f);
    s->rkey = take(b, E * f);
    s->sel = take(b, C * K * sizeof(int));
    s->selw = take(b, C * K * f);
    s->z = take(b, C * Hl * f);
    s->team = take(b, (size_t)s->n_teams * sizeof *s->team);
    for (int i = 0; i < s->n_teams; i++) {
        struct team_scratch sizing, *ts = b->base ? &s->team[i] : &sizing;
        ts->zt = take(b, C * Hl * f);
        ts->fg = take(b, C * (size_t)c->moe_inter * f);
        ts->yt = take(b, C * Hl * f);
        ts->jobs = take(b, C * K * sizeof *ts->jobs);
    }
    s->y = take(b, C * K * Hl * f);
    s->user_off = take(b, (E + 1) * sizeof(int));
    s->users = take(b, C * K * sizeof(int));
    s->batch = take(b, E * sizeof(int));
    s->pred_h = take(b, H * f);
    s->pred_logit = take(b, E * f);
    s->pred_idx = take(b, E * sizeof(int));
    s->pred_w = take(b, E * f);
    s->mxfp4 = take(b, k3_mxfp4_scratch_bytes(K3_CHUNK, expert_inputs(c), s->threads));
}

uint64_t k3_session_scratch_bytes(const struct k3_config *c, int max_ctx, int threads, int teams)
{
    struct k3_session_scratch s = {.threads = threads, .n_teams = teams > 0 ? teams : 1};
    struct bump b = {0};
    layout_scratch(&s, &b, c, max_ctx);
    return b.used;
}

uint64_t k3_session_state_bytes(const struct k3_config *c, int max_ctx)
{
    uint64_t bytes = 0, d = (uint64_t)c->kda_head_dim, P = (uint64_t)k3_kda_width(c);
    for (int l = 0; l < c->n_layers; l++)
        bytes += c->attn[l] == K3_ATTN_KDA
                     ? 4 * ((uint64_t)c->kda_heads * d * d + 3 * P * (uint64_t)(c->conv_kernel - 1))
                     : 4 * (uint64_t)max_ctx * (uint64_t)(c->kv_lora + c->qk_rope);
    return bytes;
}

int k3_session_init(struct k3_session *ss, const struct k3_model *m,
                    struct k3_expert_store *experts, int max_ctx, struct k3_err *err)
{
    return k3_session_init_placed(ss, m, experts, max_ctx, NULL, err);
}

int k3_session_init_placed(struct k3_session *ss, const struct k3_model *m,
                           struct k3_expert_store *experts, int max_ctx,
                           const struct k3numa_plan *plan, struct k3_err *err)
{
    memset(ss, 0, sizeof *ss);
    const struct k3_config *c = &m->cfg;
    ss->m = m;
    ss->experts = experts;
    ss->max_ctx = max_ctx;
    ss->s = calloc(1, sizeof *ss->s);
    ss->kda_state = calloc((size_t)c->n_layers, sizeof(float *));
    ss->conv_ring = calloc((size_t)c->n_layers, sizeof(float *));
    ss->mla_cache = calloc((size_t)c->n_layers, sizeof(float *));
    if (!ss->s || !ss->kda_state || !ss->conv_ring || !ss->mla_cache ||
        k3numa_teams_create(&ss->teams, plan))
        goto oom;
    ss->s->threads = omp_get_max_threads();
    ss->s->n_teams = k3numa_teams_count(ss->teams);
    struct bump b = {0};
    layout_scratch(ss->s, &b, c, max_ctx); /* sizing pass */
    b.base = ss->s->block = aligned_alloc(64, b.used);
    if (!b.base)
        goto oom;
    b.used = 0;
    layout_scratch(ss->s, &b, c, max_ctx);
    k3_mxfp4_scratch_bind(ss->s->mxfp4, K3_CHUNK, expert_inputs(c), ss->s->threads);
    size_t d = (size_t)c->kda_head_dim, P = (size_t)k3_kda_width(c);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->attn[l] == K3_ATTN_KDA) {
            ss->kda_state[l] = calloc((size_t)c->kda_heads * d * d, sizeof(float));
            ss->conv_ring[l] = calloc(3 * P * (size_t)(c->conv_kernel - 1) + 1, sizeof(float));
            if (!ss->kda_state[l] || !ss->conv_ring[l])
                goto oom;
        } else {
            ss->mla_cache[l] =
                calloc((size_t)max_ctx * (size_t)(c->kv_lora + c->qk_rope), sizeof(float));
            if (!ss->mla_cache[l])
                goto oom;
        }
    }
    return 0;
oom:
    k3_session_free(ss);
    return k3_errf(err, "out of memory for a session of %d positions (%.1f MB of state)", max_ctx,
                   k3_session_state_bytes(c, max_ctx) / 1e6);
}

uint64_t k3_session_team_experts(const struct k3_session *ss, int team)
{
    return team >= 0 && team < ss->s->n_teams ? ss->s->team[team].computed : 0;
}

void k3_session_free(struct k3_session *ss)
{
    const struct k3_model *m = ss->m;
    for (int l = 0; m && l < m->cfg.n_layers; l++) {
        if (ss->kda_state)
            free(ss->kda_state[l]);
        if (ss->conv_ring)
            free(ss->conv_ring[l]);
        if (ss->mla_cache)
            free(ss->mla_cache[l]);
    }
    free(ss->kda_state);
    free(ss->conv_ring);
    free(ss->mla_cache);
    if (ss->s) {
        k3_mxfp4_scratch_unbind(ss->s->mxfp4);
        free(ss->s->block);
    }
    free(ss->s);
    k3numa_teams_destroy(ss->teams);
    memset(ss, 0, sizeof *ss);
}

/* ---- attention ------------------------------------------------------------------ */

static void kda_chunk(struct k3_session *ss, int l, int T)
{
    const struct k3_config *c = &ss->m->cfg;
    const struct k3_kda_weights *w = &ss->m->w.layers[l].kda;
    struct k3_session_scratch *s = ss->s;
    int H = c->hidden, P = k3_kda_width(c), d = c->kda_head_dim;
    k3_matmul_bf16(w->q_proj, P, H, s->hn, H, s->kq, P, T);
    k3_matmul_bf16(w->k_proj, P, H, s->hn, H, s->kk, P, T);
    k3_matmul_bf16(w->v_proj, P, H, s->hn, H, s->kv, P, T);
    k3_matmul_bf16(w->f_a, d, H, s->hn, H, s->kfa, d, T);
    k3_matmul_bf16(w->f_b, P, d, s->kfa, d, s->ku, P, T);
    k3_matmul_bf16(w->b_proj, c->kda_heads, H, s->hn, H, s->kbeta, c->kda_heads, T);
    k3_matmul_bf16(w->g_proj, P, H, s->hn, H, s->kz, P, T);
    for (int t = 0; t < T; t++) {
        float *u = s->ku + (size_t)t * P;
        for (int i = 0; i < P; i++)
            u[i] += w->dt_bias[i];
        /* The recurrence is sequential in time. */
        k3_kda_token(c, w, ss->kda_state[l], ss->conv_ring[l], s->kq + (size_t)t * P,
                     s->kk + (size_t)t * P, s->kv + (size_t)t * P, u,
                     s->kbeta + (size_t)t * c->kda_heads, s->kz + (size_t)t * P,
                     s->kout + (size_t)t * P);
    }
    k3_matmul_bf16(w->o_proj, H, P, s->kout, P, s->o, H, T);
}

static void mla_chunk(struct k3_session *ss, int l, int T)
{
    const struct k3_config *c = &ss->m->cfg;
    const struct k3_mla_weights *w = &ss->m->w.layers[l].mla;
    struct k3_session_scratch *s = ss->s;
    int H = c->hidden, R = c->kv_lora, row = c->kv_lora + c->qk_rope;
    int qh = c->qk_nope + c->qk_rope, n = c->mla_heads, V = k3_mla_out_width(c);
    float *cache = ss->mla_cache[l];

    k3_matmul_bf16(w->q_a, c->q_lora, H, s->hn, H, s->mcq, c->q_lora, T);
    for (int t = 0; t < T; t++) {
        float *cq = s->mcq + (size_t)t * c->q_lora;
        k3_rmsnorm(cq, cq, w->q_a_norm, c->q_lora, K3_MLA_NORM_EPS);
    }
    k3_matmul_bf16(w->q_b, n * qh, c->q_lora, s->mcq, c->q_lora, s->mq, n * qh, T);
    k3_matmul_bf16(w->kv_a, row, H, s->hn, H, s->mkv, row, T);
    for (int t = 0; t < T; t++) {
        float *dst = cache + (size_t)(ss->pos + t) * row, *kv = s->mkv + (size_t)t * row;
        k3_rmsnorm(dst, kv, w->kv_a_norm, R, K3_MLA_NORM_EPS);
        memcpy(dst + R, kv + R, sizeof(float) * (size_t)c->qk_rope); /* k_pe: no norm, NoPE */
    }
    size_t tmp_stride = (size_t)ss->max_ctx + 2 * (size_t)R;
#pragma omp parallel for schedule(dynamic)
    for (int th = 0; th < T * n; th++) {
        int t = th / n, h = th % n;
        const float *q = s->mq + (size_t)t * n * qh + (size_t)h * qh;
        k3_mla_head(c, q, q + c->qk_nope, cache, ss->pos + t + 1,
                    w->kv_b + (size_t)h * (c->qk_nope + c->v_head) * R,
                    s->mo + (size_t)t * V + (size_t)h * c->v_head,
                    s->mla_tmp + (size_t)omp_get_thread_num() * tmp_stride);
    }
    k3_matmul_bf16(w->g_proj, V, H, s->hn, H, s->mg, V, T);
    for (size_t i = 0; i < (size_t)T * V; i++)
        s->mo[i] *= k3_sigmoid(s->mg[i]);
    k3_matmul_bf16(w->o_proj, H, V, s->mo, V, s->o, H, T);
}

/* ---- feed-forward ------------------------------------------------------------------ */

/* out[T][H] = SiTU MLP(in[T][H]) of width I; act [T][I] scratch. */
static void mlp(const struct k3_config *c, const struct k3_mlp_weights *w, int I,
                const float *in, float *out, float *act, int T)
{
    int H = c->hidden;
    k3_matmul_bf16_situ(w->gate, w->up, I, H, in, H, act, I, T, c->situ_beta, c->situ_linear_beta);
    k3_matmul_bf16(w->down, H, I, act, I, out, H, T);
}

/* One expert on the tokens that chose it, y = W2·SiTU(W1 z, W3 z), by every thread of a
 * team: the first gathers the inputs and scatters the outputs, the mat-vecs split their
 * rows over the team and return once it is done (numa/teams.h). */
static void run_expert(struct k3_session *ss, struct team_scratch *ts, bool first,
                       const uint8_t *rec, int n_users, const int *users)
{
    const struct k3_config *c = &ss->m->cfg;
    const struct k3_record_layout *r = &ss->m->record;
    struct k3_session_scratch *s = ss->s;
    int Hl = c->latent, I = c->moe_inter, K = c->top_k;
    if (first)
        for (int u = 0; u < n_users; u++)
            memcpy(ts->zt + (size_t)u * Hl, s->z + (size_t)(users[u] / K) * Hl, sizeof(float) * Hl);
    k3numa_team_barrier();
    k3_matmul_mxfp4_situ(rec + r->off[K3_W1_PACKED], rec + r->off[K3_W1_SCALE],
                         rec + r->off[K3_W3_PACKED], rec + r->off[K3_W3_SCALE], I, Hl, ts->zt, Hl,
                         ts->fg, I, n_users, c->situ_beta, c->situ_linear_beta);
    k3_matmul_mxfp4(rec + r->off[K3_W2_PACKED], rec + r->off[K3_W2_SCALE], Hl, I, ts->fg, I,
                    ts->yt, Hl, n_users);
    if (first)
        for (int u = 0; u < n_users; u++)
            memcpy(s->y + (size_t)users[u] * Hl, ts->yt + (size_t)u * Hl, sizeof(float) * Hl);
}

/* A team's share of one round: the experts whose records landed in its node's buffers. */
static void team_experts(void *arg, int team)
{
    struct k3_session *ss = arg;
    struct k3_session_scratch *s = ss->s;
    struct team_scratch *ts = &s->team[team];
    int member = 0, n_members = 1;
    k3numa_team_self(&member, &n_members);
    for (int j = 0; j < ts->n_jobs; j++) {
        struct expert_job *job = &ts->jobs[j];
        int e = job->expert;
        if (member == 0)
            job->began = k3_trace_now(ss->trace);
        run_expert(ss, ts, member == 0, job->record, s->user_off[e + 1] - s->user_off[e],
                   s->users + s->user_off[e]);
        if (member == 0)
            job->ended = k3_trace_now(ss->trace);
    }
}

/* Computes the records of the batch as they land: whatever has landed goes to the teams
 * whose nodes hold it, all teams computing at once, until the batch is done. */
static int routed_experts(struct k3_session *ss, int l, const int *batch, int nb,
                          struct k3_err *err)
{
    struct k3_session_scratch *s = ss->s;
    struct k3_expert_store *store = ss->experts;
    for (int done = 0; done < nb;) {
        for (int i = 0; i < s->n_teams; i++)
            s->team[i].n_jobs = 0;
        struct k3_landed got;
        int rc = store->ops->next(store, true, &got, err);
        for (; rc == 0; rc = store->ops->next(store, false, &got, err)) {
            struct team_scratch *ts = &s->team[got.team % s->n_teams];
            ts->jobs[ts->n_jobs++] = (struct expert_job){batch[got.index], got.record, 0, 0};
            ts->computed++;
            if (++done == nb)
                break;
        }
        if (rc < 0)
            return -1;
        k3numa_teams_run(ss->teams, team_experts, ss);
        for (int i = 0; ss->trace && i < s->n_teams; i++)
            for (int j = 0; j < s->team[i].n_jobs; j++) {
                const struct expert_job *job = &s->team[i].jobs[j];
                char args[64];
                snprintf(args, sizeof args, "\"layer\": %d, \"expert\": %d", l, job->expert);
                k3_trace_team_span(ss->trace, i, k3numa_teams_node(ss->teams, i), "expert", args,
                                   job->began, job->ended);
            }
    }
    return 0;
}

/* Router prediction: layer next's router applied to h (normalized with next's gain when
 * renorm), its top-k' experts prefetched.  Decode only: a prompt chunk reads the union
 * of its experts per layer anyway. */
static int predict(struct k3_session *ss, int next, const float *h, bool renorm, int T,
                   struct k3_err *err)
{
    const struct k3_model *m = ss->m;
    const struct k3_config *c = &m->cfg;
    struct k3_expert_store *store = ss->experts;
    if (T != 1 || next >= c->n_layers || !k3_layer_is_moe(c, next) || !store->ops->prefetch)
        return 0;
    struct k3_session_scratch *s = ss->s;
    const struct k3_layer_weights *w = &m->w.layers[next];
    const float *x = h;
    if (renorm) {
        k3_rmsnorm(s->pred_h, h, w->post_attn_norm, c->hidden, c->rms_eps);
        x = s->pred_h;
    }
    k3_matmul_bf16(w->moe.router, c->n_experts, c->hidden, x, c->hidden, s->pred_logit,
                   c->n_experts, 1);
    int k = ss->predict_k < c->n_experts ? ss->predict_k : c->n_experts;
    k3_route_k(c, s->pred_logit, w->moe.router_bias, k, s->pred_idx, s->pred_w, s->rkey);
    return store->ops->prefetch(store, next, s->pred_idx, k, err);
}

/* Latent MoE (§3.8) on the normalized inputs s->hn (s->a holds them before the norm);
 * output in s->o.  The reads are issued first; the prediction for the next layer, the
 * latent projection and the shared experts compute while they land; then each routed
 * expert computes as its record arrives. */
static int moe_chunk(struct k3_session *ss, int l, int T, struct k3_err *err)
{
    const struct k3_config *c = &ss->m->cfg;
    const struct k3_moe_weights *w = &ss->m->w.layers[l].moe;
    struct k3_session_scratch *s = ss->s;
    int H = c->hidden, Hl = c->latent, E = c->n_experts, K = c->top_k;

    k3_matmul_bf16(w->router, E, H, s->hn, H, s->rlogit, E, T);
    for (int t = 0; t < T; t++)
        k3_route(c, s->rlogit + (size_t)t * E, w->router_bias, s->sel + (size_t)t * K,
                 s->selw + (size_t)t * K, s->rkey);

    /* Group (token, slot) users by expert; read each chosen expert once per chunk, in
     * ascending expert order, in batches the store can hold. */
    memset(s->user_off, 0, sizeof(int) * (size_t)(E + 1));
    for (int i = 0; i < T * K; i++)
        s->user_off[s->sel[i] + 1]++;
    int n_batch = 0;
    for (int e = 0; e < E; e++) {
        if (s->user_off[e + 1])
            s->batch[n_batch++] = e;
        s->user_off[e + 1] += s->user_off[e];
    }
    for (int i = 0; i < T * K; i++) /* fill, then shift the offsets back */
        s->users[s->user_off[s->sel[i]]++] = i;
    for (int e = E; e > 0; e--)
        s->user_off[e] = s->user_off[e - 1];
    s->user_off[0] = 0;

    struct k3_expert_store *store = ss->experts;
    int first = n_batch < store->capacity ? n_batch : store->capacity;
    if (store->ops->begin(store, l, s->batch, first, err))
        return -1;
    if (ss->predict == K3_PREDICT_MOE_INPUT && predict(ss, l + 1, s->hn, false, T, err))
        return -1;
    if (ss->predict == K3_PREDICT_MOE_INPUT_NEXT && predict(ss, l + 1, s->a, true, T, err))
        return -1;
    k3_trace_begin(ss->trace, "shared + latent", NULL);
    k3_matmul_bf16(w->latent_down, Hl, H, s->hn, H, s->z, Hl, T);
    /* Shared experts see the full-width input; their output adds unweighted. */
    mlp(c, &w->shared, k3_shared_inter(c), s->hn, s->a, s->fg, T);
    k3_trace_end(ss->trace);
    for (int b0 = 0; b0 < n_batch; b0 += store->capacity) {
        int nb = n_batch - b0 < store->capacity ? n_batch - b0 : store->capacity;
        if ((b0 && store->ops->begin(store, l, s->batch + b0, nb, err)) ||
            routed_experts(ss, l, s->batch + b0, nb, err))
            return -1;
    }

    /* Combine in selection order, never arrival order; normalize once, project up. */
    for (int t = 0; t < T; t++) {
        float *lat = s->z + (size_t)t * Hl; /* z is no longer needed */
        const float *wt = s->selw + (size_t)t * K;
        const float *yt = s->y + (size_t)t * K * Hl;
        for (int i = 0; i < Hl; i++) {
            float acc = 0;
            for (int j = 0; j < K; j++)
                acc += wt[j] * yt[(size_t)j * Hl + i];
            lat[i] = acc;
        }
        k3_rmsnorm(lat, lat, w->latent_norm, Hl, c->rms_eps);
    }
    k3_matmul_bf16(w->latent_up, H, Hl, s->z, Hl, s->o, H, T);
    for (size_t i = 0; i < (size_t)T * H; i++)
        s->o[i] += s->a[i];
    return 0;
}

/* ---- the layer loop --------------------------------------------------------------- */

/* a[t] = Mix(B[t][0..nb) ∪ {p[t]}; key) for every token of the chunk. */
static void mix_chunk(const struct k3_config *c, struct k3_session_scratch *s, int nb,
                      const float *key, float *out, int T)
{
    size_t H = (size_t)c->hidden, NB = (size_t)k3_max_blocks(c);
    for (int t = 0; t < T; t++) {
        const float *cands[K3_MAX_BLOCKS + 1];
        for (int j = 0; j < nb; j++)
            cands[j] = s->blocks + ((size_t)t * NB + (size_t)j) * H;
        cands[nb] = s->p + (size_t)t * H;
        k3_attn_res_mix(out + (size_t)t * H, cands, nb + 1, key, (int)H, c->rms_eps);
    }
}

static void norm_chunk(float *dst, const float *src, const float *gain, int H, float eps, int T)
{
    for (int t = 0; t < T; t++)
        k3_rmsnorm(dst + (size_t)t * H, src + (size_t)t * H, gain, H, eps);
}

static int forward_chunk(struct k3_session *ss, const int32_t *tokens, int T, float *logits,
                         int logits_from, struct k3_err *err)
{
    const struct k3_model *m = ss->m;
    const struct k3_config *c = &m->cfg;
    struct k3_session_scratch *s = ss->s;
    int H = c->hidden;
    size_t NB = (size_t)k3_max_blocks(c);

    if (ss->trunk) {
        if (ss->trunk->embed(ss->trunk->ctx, tokens, T, s->p, err))
            return -1;
    } else {
        for (int t = 0; t < T; t++) {
            const uint16_t *row = m->w.embed + (size_t)tokens[t] * H;
            for (int i = 0; i < H; i++)
                s->p[(size_t)t * H + i] = k3_bf16_to_f32(row[i]);
        }
    }
    int nb = 0; /* stored blocks: the same count for every token */
    for (int l = 0; l < c->n_layers; l++) {
        if (ss->trace) {
            char args[32];
            snprintf(args, sizeof args, "\"layer\": %d", l);
            k3_trace_begin(ss->trace, "layer", args);
        }
        if (ss->trunk && ss->trunk->segment(ss->trunk->ctx, l + 1, err))
            return k3_err_prefix(err, "layer %d", l);
        const struct k3_layer_weights *w = &m->w.layers[l];
        /* p holds x, the previous layer's output (the embedding at l = 0). */
        if (nb)
            mix_chunk(c, s, nb, w->attn_res_key, s->a, T);
        else
            memcpy(s->a, s->p, sizeof(float) * (size_t)T * H);
        bool p_empty = false;
        if (l % c->attn_res_block == 0) { /* snapshot p as a block, then start anew */
            for (int t = 0; t < T; t++)
                memcpy(s->blocks + ((size_t)t * NB + (size_t)nb) * H, s->p + (size_t)t * H,
                       sizeof(float) * H);
            nb++;
            p_empty = true;
        }
        norm_chunk(s->hn, s->a, w->input_norm, H, c->rms_eps, T);
        k3_trace_begin(ss->trace, c->attn[l] == K3_ATTN_KDA ? "KDA" : "MLA", NULL);
        if (c->attn[l] == K3_ATTN_KDA)
            kda_chunk(ss, l, T);
        else
            mla_chunk(ss, l, T);
        k3_trace_end(ss->trace);
        for (size_t i = 0; i < (size_t)T * H; i++)
            s->p[i] = p_empty ? s->o[i] : s->p[i] + s->o[i];

        mix_chunk(c, s, nb, w->mlp_res_key, s->a, T);
        norm_chunk(s->hn, s->a, w->post_attn_norm, H, c->rms_eps, T);
        k3_trace_begin(ss->trace, k3_layer_is_moe(c, l) ? "MoE" : "MLP", NULL);
        if (k3_layer_is_moe(c, l)) {
            if (moe_chunk(ss, l, T, err))
                return k3_err_prefix(err, "layer %d", l);
        } else {
            /* A dense layer predicts for the first MoE layer after it, the same way. */
            if (ss->predict == K3_PREDICT_MOE_INPUT && predict(ss, l + 1, s->hn, false, T, err))
                return -1;
            if (ss->predict == K3_PREDICT_MOE_INPUT_NEXT && predict(ss, l + 1, s->a, true, T, err))
                return -1;
            mlp(c, &w->dense, c->dense_inter, s->hn, s->o, s->fg, T);
        }
        k3_trace_end(ss->trace);
        for (size_t i = 0; i < (size_t)T * H; i++)
            s->p[i] += s->o[i];
        if (ss->predict == K3_PREDICT_LAYER_OUTPUT && predict(ss, l + 1, s->p, true, T, err))
            return -1;
        k3_trace_end(ss->trace);
        if (ss->hook)
            for (int t = 0; t < T; t++)
                ss->hook(ss->hook_ctx, ss->pos + t, l, s->p + (size_t)t * H, H);
    }

    /* Output: mix over every stored block and the last block's sum, norm, lm_head. */
    int first = ss->hook ? 0 : logits_from;
    if (first < T && ss->trunk && ss->trunk->segment(ss->trunk->ctx, c->n_layers + 1, err))
        return -1;
    if (first < T) {
        k3_trace_begin(ss->trace, "output", NULL);
        int n = T - first;
        for (int t = first; t < T; t++) {
            const float *cands[K3_MAX_BLOCKS + 1];
            for (int j = 0; j < nb; j++)
                cands[j] = s->blocks + ((size_t)t * NB + (size_t)j) * H;
            cands[nb] = s->p + (size_t)t * H;
            k3_attn_res_mix(s->a + (size_t)(t - first) * H, cands, nb + 1, m->w.out_res_key, H,
                            c->rms_eps);
            if (ss->hook)
                ss->hook(ss->hook_ctx, ss->pos + t, c->n_layers, s->a + (size_t)(t - first) * H, H);
        }
        norm_chunk(s->hn, s->a, m->w.final_norm, H, c->rms_eps, n);
        if (logits && logits_from < T) {
            int skip = logits_from - first;
            k3_matmul_bf16(m->w.lm_head, c->vocab, H, s->hn + (size_t)skip * H, H, logits,
                           c->vocab, T - logits_from);
        }
        k3_trace_end(ss->trace);
    }
    ss->pos += T;
    return 0;
}

int k3_forward(struct k3_session *ss, const int32_t *tokens, int n, float *logits,
               bool all_logits, struct k3_err *err)
{
    const struct k3_config *c = &ss->m->cfg;
    if (ss->pos + n > ss->max_ctx)
        return k3_errf(err, "context full: %d positions used, %d more do not fit in %d", ss->pos,
                       n, ss->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return k3_errf(err, "token id %d (position %d) is outside the vocabulary [0, %d)",
                           tokens[i], ss->pos + i, c->vocab);
    for (int done = 0; done < n; done += K3_CHUNK) {
        int T = n - done < K3_CHUNK ? n - done : K3_CHUNK;
        bool last = done + T == n;
        float *out = NULL;
        int from = T;
        if (logits && all_logits) {
            out = logits + (size_t)done * c->vocab;
            from = 0;
        } else if (logits && last) {
            out = logits;
            from = T - 1;
        }
        if (forward_chunk(ss, tokens + done, T, out, from, err))
            return -1;
    }
    return 0;
}
