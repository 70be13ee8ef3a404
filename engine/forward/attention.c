/* Attention over a step's rows: KDA (§3.4) and MLA (§3.5).  Projections run over every
 * row at once (a layer's weights are read once per step); the recurrence and the cache
 * are each row's own sequence's, visited in row order, so a sequence's rows see each
 * other in position order and never another sequence's. */
#include <omp.h>
#include <string.h>

#include "engine/forward/forward_internal.h"
#include "engine/forward/layers.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/matrix.h"

void k3_kda_rows(struct k3_forward *f, const struct k3_step *st, int l)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_kda_weights *w = &f->m->w.layers[l].kda;
    struct k3_forward_scratch *s = f->s;
    int T = st->n, H = c->hidden, P = k3_kda_width(c), d = c->kda_head_dim;
    k3_matmul(w->q_proj, P, H, s->hn, H, s->kq, P, T);
    k3_matmul(w->k_proj, P, H, s->hn, H, s->kk, P, T);
    k3_matmul(w->v_proj, P, H, s->hn, H, s->kv, P, T);
    k3_matmul_bf16(w->f_a, d, H, s->hn, H, s->kfa, d, T);
    k3_matmul_bf16(w->f_b, P, d, s->kfa, d, s->ku, P, T);
    k3_matmul_bf16(w->b_proj, c->kda_heads, H, s->hn, H, s->kbeta, c->kda_heads, T);
    k3_matmul(w->g_proj, P, H, s->hn, H, s->kz, P, T);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < P; i++)
            s->ku[(size_t)t * P + i] += w->dt_bias[i];
    /* Each thread carries its heads through every row: one fork for the pass, not one a
     * row; a head's rows still go in row order. */
#pragma omp parallel for schedule(static) if (c->kda_heads > 1 && (long)T * d * d >= 4096)
    for (int h = 0; h < c->kda_heads; h++)
        for (int t = 0; t < T; t++) {
            size_t at = (size_t)t * P;
            struct k3_seq *q = st->seq[t];
            k3_kda_head(c, w, q->kda_state[l], q->conv_ring[l], s->kq + at, s->kk + at,
                        s->kv + at, s->ku + at, s->kbeta + (size_t)t * c->kda_heads, s->kz + at,
                        s->kout + at, h);
        }
    k3_matmul(w->o_proj, H, P, s->kout, P, s->o, H, T);
}

/* The latent cache row of each row's position: (norm(c_kv), k_pe). */
static void mla_cache_rows(struct k3_forward *f, const struct k3_step *st, int l)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_mla_weights *w = &f->m->w.layers[l].mla;
    struct k3_forward_scratch *s = f->s;
    int R = c->kv_lora, row = c->kv_lora + c->qk_rope;
    k3_matmul(w->kv_a, row, c->hidden, s->hn, c->hidden, s->mkv, row, st->n);
    for (int t = 0; t < st->n; t++) {
        float *dst = st->seq[t]->mla_cache[l] + (size_t)s->row_pos[t] * row;
        const float *kv = s->mkv + (size_t)t * row;
        k3_rmsnorm(dst, kv, w->kv_a_norm, R, K3_MLA_NORM_EPS);
        memcpy(dst + R, kv + R, sizeof(float) * (size_t)c->qk_rope); /* k_pe: no norm, NoPE */
    }
}

void k3_mla_rows(struct k3_forward *f, const struct k3_step *st, int l)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_mla_weights *w = &f->m->w.layers[l].mla;
    struct k3_forward_scratch *s = f->s;
    int T = st->n, H = c->hidden, R = c->kv_lora;
    int qh = c->qk_nope + c->qk_rope, n = c->mla_heads, V = k3_mla_out_width(c);

    k3_matmul(w->q_a, c->q_lora, H, s->hn, H, s->mcq, c->q_lora, T);
    for (int t = 0; t < T; t++) {
        float *cq = s->mcq + (size_t)t * c->q_lora;
        k3_rmsnorm(cq, cq, w->q_a_norm, c->q_lora, K3_MLA_NORM_EPS);
    }
    k3_matmul(w->q_b, n * qh, c->q_lora, s->mcq, c->q_lora, s->mq, n * qh, T);
    mla_cache_rows(f, st, l);
    /* A pass's rows each walk the cache once for a group of heads; a step of few rows
     * (decode) spreads its heads over the threads instead. */
    int per = T < 2 * s->threads ? 1 : k3_mla_heads_per_walk(c, f->max_ctx);
    int groups = (n + per - 1) / per;
    size_t tmp_stride = (size_t)per * ((size_t)f->max_ctx + 2 * (size_t)R);
#pragma omp parallel for schedule(dynamic)
    for (int tg = 0; tg < T * groups; tg++) {
        int t = tg / groups, h0 = tg % groups * per;
        k3_mla_heads(c, s->mq + (size_t)t * n * qh, st->seq[t]->mla_cache[l], s->row_pos[t] + 1,
                     w->kv_b, h0, n - h0 < per ? n - h0 : per, s->mo + (size_t)t * V,
                     s->mla_tmp + (size_t)omp_get_thread_num() * tmp_stride);
    }
    k3_matmul(w->g_proj, V, H, s->hn, H, s->mg, V, T);
    for (size_t i = 0; i < (size_t)T * V; i++)
        s->mo[i] *= k3_sigmoid(s->mg[i]);
    k3_matmul(w->o_proj, H, V, s->mo, V, s->o, H, T);
}
