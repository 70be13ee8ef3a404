/* The compute context's buffers, laid out once from one allocation, and a sequence's
 * state.  The layout function runs twice: once to size, once to place. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"
#include "engine/forward/layers.h"
#include "engine/forward/predict_ids.h"
#include "engine/kernels/mxfp4.h"
#include "numa/teams.h"

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

/* Bump allocation of every scratch buffer from one block (base NULL: sizing only). */
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

static void layout_attention(struct k3_forward_scratch *s, struct bump *b,
                             const struct k3_config *c, int max_ctx)
{
    size_t C = (size_t)s->rows, P = (size_t)k3_kda_width(c), f = sizeof(float);
    size_t mla_out = (size_t)k3_mla_out_width(c);
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
    s->mla_tmp = take(b, (size_t)s->threads * (size_t)k3_mla_heads_per_walk(c, max_ctx) *
                             ((size_t)max_ctx + 2 * (size_t)c->kv_lora) * f);
}

static struct expert_bufs expert_bufs(struct bump *b, const struct k3_config *c, size_t rows)
{
    size_t Hl = (size_t)c->latent, f = sizeof(float);
    struct expert_bufs e;
    e.zt = take(b, rows * Hl * f);
    e.fg = take(b, rows * (size_t)c->moe_inter * f);
    e.yt = take(b, rows * Hl * f);
    return e;
}

static void layout_ffn(struct k3_forward_scratch *s, struct bump *b, const struct k3_config *c)
{
    size_t C = (size_t)s->rows, H = (size_t)c->hidden, f = sizeof(float);
    size_t Hl = (size_t)c->latent, E = (size_t)c->n_experts, K = (size_t)c->top_k;
    s->fg = take(b, C * (size_t)max3(c->dense_inter, k3_shared_inter(c), c->moe_inter) * f);
    s->rlogit = take(b, C * E * f);
    s->rkey = take(b, E * f);
    s->sel = take(b, C * K * sizeof(int));
    s->selw = take(b, C * K * f);
    s->z = take(b, C * Hl * f);
    s->y = take(b, C * K * Hl * f);
    s->lat = take(b, C * Hl * f);
    s->routed = take(b, C * H * f);
    s->groups.expert = take(b, E * sizeof(int));
    s->groups.user_off = take(b, (E + 1) * sizeof(int));
    s->groups.users = take(b, C * K * sizeof(int));
    s->owned = take(b, E * sizeof(int));
    s->round = take(b, E * sizeof(int));
    s->groups.rank_of = take(b, E * sizeof(int));
    s->team = take(b, (size_t)s->n_teams * sizeof *s->team);
    if (b->base) /* the block is not zeroed: the teams' counters start at 0 */
        memset(s->team, 0, (size_t)s->n_teams * sizeof *s->team);
    long row_work = 3L * c->moe_inter * c->latent;
    s->alone_rows = (int)((K3_EXPERT_ALONE_MAX_WORK - 1) / row_work);
    if (s->alone_rows > s->rows)
        s->alone_rows = s->rows;
    for (int i = 0; i < s->n_teams; i++) {
        struct team_scratch sizing, *ts = b->base ? &s->team[i] : &sizing;
        ts->whole = expert_bufs(b, c, C);
        ts->alone = s->alone_rows ? take(b, (size_t)s->threads * sizeof *ts->alone) : NULL;
        for (int k = 0; s->alone_rows && k < s->threads; k++) {
            struct expert_bufs bufs = expert_bufs(b, c, (size_t)s->alone_rows);
            if (b->base)
                ts->alone[k] = bufs;
        }
        ts->jobs = take(b, E * sizeof *ts->jobs);
    }
}

static void layout_scratch(struct k3_forward_scratch *s, struct bump *b, const struct k3_config *c,
                           int max_ctx)
{
    size_t C = (size_t)s->rows, H = (size_t)c->hidden, E = (size_t)c->n_experts, f = sizeof(float);
    s->row_pos = take(b, C * sizeof(int));
    s->res.p = take(b, C * H * f);
    s->res.blocks = take(b, C * (size_t)k3_max_blocks(c) * H * f);
    s->a = take(b, C * H * f);
    s->hn = take(b, C * H * f);
    s->o = take(b, C * H * f);
    layout_attention(s, b, c, max_ctx);
    layout_ffn(s, b, c);
    s->pred_h = take(b, C * H * f);
    s->pred_logit = take(b, C * E * f);
    s->pred_idx = take(b, C * E * sizeof(int));
    s->pred_w = take(b, C * E * f);
    s->pred_list = take(b, E * sizeof(int));
    s->pred_got = take(b, C * sizeof(int));
    s->pred_mark = take(b, E * sizeof(bool));
    s->pred_rank = take(b, E * sizeof(int));
    s->out_rows = take(b, C * sizeof(int));
    s->pass_seq = take(b, C * sizeof *s->pass_seq);
    s->pass_want = take(b, C * sizeof *s->pass_want);
    s->mxfp4 = take(b, k3_mxfp4_scratch_bytes(s->rows, expert_inputs(c), s->threads));
}

uint64_t k3_forward_scratch_bytes(const struct k3_config *c, int max_ctx, int rows, int threads,
                                  int teams)
{
    struct k3_forward_scratch s = {.rows = rows, .threads = threads, .n_teams = teams > 0 ? teams : 1};
    struct bump b = {0};
    layout_scratch(&s, &b, c, max_ctx);
    return b.used;
}

int k3_forward_init(struct k3_forward *f, const struct k3_model *m,
                    struct k3_expert_store *experts, int max_ctx, int rows,
                    const struct k3numa_plan *plan, struct k3_err *err)
{
    memset(f, 0, sizeof *f);
    f->m = m;
    f->experts = experts;
    f->max_ctx = max_ctx;
    f->rows = rows;
    if (rows < 1)
        return k3_errf(err, "a pass of %d rows (at least 1)", rows);
    if (!(f->s = calloc(1, sizeof *f->s)) || k3numa_teams_create(&f->teams, plan) ||
        !(f->stats.decode_experts = calloc((size_t)m->cfg.n_layers, sizeof(uint64_t))))
        goto oom;
    f->s->threads = omp_get_max_threads();
    f->s->n_teams = k3numa_teams_count(f->teams);
    f->s->rows = rows;
    struct bump b = {0};
    layout_scratch(f->s, &b, &m->cfg, max_ctx);
    if (!(b.base = f->s->block = aligned_alloc(64, b.used)))
        goto oom;
    b.used = 0;
    layout_scratch(f->s, &b, &m->cfg, max_ctx);
    k3_mxfp4_scratch_bind(f->s->mxfp4, rows, expert_inputs(&m->cfg), f->s->threads);
    return 0;
oom:
    k3_forward_free(f);
    return k3_errf(err, "out of memory for the forward pass's scratch (%.1f MB)",
                   k3_forward_scratch_bytes(&m->cfg, max_ctx, rows, omp_get_max_threads(), 1) / 1e6);
}

void k3_forward_free(struct k3_forward *f)
{
    if (f->s) {
        k3_mxfp4_scratch_unbind(f->s->mxfp4);
        free(f->s->block);
    }
    free(f->s);
    k3numa_teams_destroy(f->teams);
    free(f->stats.decode_experts);
    if (f->id_pred)
        k3_id_predictor_free(f->id_pred);
    free(f->id_pred);
    memset(f, 0, sizeof *f);
}

uint64_t k3_forward_team_experts(const struct k3_forward *f, int team)
{
    return team >= 0 && team < f->s->n_teams ? f->s->team[team].computed : 0;
}

uint64_t k3_forward_experts_whole(const struct k3_forward *f)
{
    uint64_t n = 0;
    for (int i = 0; i < f->s->n_teams; i++)
        n += atomic_load(&f->s->team[i].computed_whole);
    return n;
}

/* ---- a sequence's state ------------------------------------------------------------ */

static size_t kda_state_floats(const struct k3_config *c)
{
    return (size_t)c->kda_heads * (size_t)c->kda_head_dim * (size_t)c->kda_head_dim;
}

static size_t conv_ring_floats(const struct k3_config *c)
{
    return 3 * (size_t)k3_kda_width(c) * (size_t)(c->conv_kernel - 1);
}

static size_t mla_cache_floats(const struct k3_config *c, int max_ctx)
{
    return (size_t)max_ctx * (size_t)(c->kv_lora + c->qk_rope);
}

uint64_t k3_seq_state_bytes(const struct k3_config *c, int max_ctx)
{
    uint64_t floats = 0;
    for (int l = 0; l < c->n_layers; l++)
        floats += c->attn[l] == K3_ATTN_KDA ? kda_state_floats(c) + conv_ring_floats(c)
                                            : mla_cache_floats(c, max_ctx);
    return floats * sizeof(float);
}

int k3_seq_init(struct k3_seq *q, const struct k3_config *c, int max_ctx, struct k3_err *err)
{
    memset(q, 0, sizeof *q);
    q->max_ctx = max_ctx;
    q->n_layers = c->n_layers;
    q->kda_state = calloc((size_t)c->n_layers, sizeof(float *));
    q->conv_ring = calloc((size_t)c->n_layers, sizeof(float *));
    q->mla_cache = calloc((size_t)c->n_layers, sizeof(float *));
    bool ok = q->kda_state && q->conv_ring && q->mla_cache;
    for (int l = 0; ok && l < c->n_layers; l++) {
        if (c->attn[l] == K3_ATTN_KDA) {
            q->kda_state[l] = calloc(kda_state_floats(c), sizeof(float));
            q->conv_ring[l] = calloc(conv_ring_floats(c) + 1, sizeof(float));
            ok = q->kda_state[l] && q->conv_ring[l];
        } else {
            ok = (q->mla_cache[l] = calloc(mla_cache_floats(c, max_ctx), sizeof(float)));
        }
    }
    if (ok)
        return 0;
    k3_seq_free(q);
    return k3_errf(err, "out of memory for a sequence of %d positions (%.1f MB of state)", max_ctx,
                   k3_seq_state_bytes(c, max_ctx) / 1e6);
}

void k3_seq_reset(struct k3_seq *q, const struct k3_config *c)
{
    for (int l = 0; l < q->n_layers; l++) {
        if (q->kda_state[l])
            memset(q->kda_state[l], 0, kda_state_floats(c) * sizeof(float));
        if (q->conv_ring[l])
            memset(q->conv_ring[l], 0, (conv_ring_floats(c) + 1) * sizeof(float));
    }
    /* The MLA cache needs no clearing: a row is written before any query reads it. */
    q->pos = 0;
}

int k3_seq_copy(struct k3_seq *dst, const struct k3_seq *src, const struct k3_config *c)
{
    if (src->pos > dst->max_ctx || src->n_layers != dst->n_layers)
        return -1;
    for (int l = 0; l < src->n_layers; l++) {
        if (src->kda_state[l]) {
            memcpy(dst->kda_state[l], src->kda_state[l], kda_state_floats(c) * sizeof(float));
            memcpy(dst->conv_ring[l], src->conv_ring[l], (conv_ring_floats(c) + 1) * sizeof(float));
        } else {
            memcpy(dst->mla_cache[l], src->mla_cache[l],
                   mla_cache_floats(c, src->pos) * sizeof(float));
        }
    }
    dst->pos = src->pos;
    return 0;
}

void k3_seq_free(struct k3_seq *q)
{
    for (int l = 0; l < q->n_layers; l++) {
        if (q->kda_state)
            free(q->kda_state[l]);
        if (q->conv_ring)
            free(q->conv_ring[l]);
        if (q->mla_cache)
            free(q->mla_cache[l]);
    }
    free(q->kda_state);
    free(q->conv_ring);
    free(q->mla_cache);
    memset(q, 0, sizeof *q);
}
