#include "engine/forward/layers.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "engine/kernels/kernels.h"

void k3_attn_res_mix(float *out, const float *const *cands, int n, const float *key, int H,
                     float eps)
{
    float alpha[K3_MAX_BLOCKS + 1];
    float max = -INFINITY;
    for (int j = 0; j < n; j++) {
        alpha[j] = k3_dot_f32(cands[j], key, H) * k3_rms_inv(cands[j], H, eps);
        max = alpha[j] > max ? alpha[j] : max;
    }
    float sum = 0;
    for (int j = 0; j < n; j++) {
        alpha[j] = expf(alpha[j] - max);
        sum += alpha[j];
    }
    for (int j = 0; j < n; j++)
        alpha[j] /= sum;
    for (int d = 0; d < H; d++) {
        float acc = 0;
        for (int j = 0; j < n; j++)
            acc += alpha[j] * cands[j][d];
        out[d] = acc;
    }
}

/* Index of the largest key not yet taken; the lower index wins ties.  Taken and
 * masked keys are -inf and never chosen. */
static int argmax_key(const float *key, int n)
{
    int best = -1;
    for (int e = 0; e < n; e++)
        if (key[e] > -INFINITY && (best < 0 || key[e] > key[best]))
            best = e;
    return best;
}

/* Group-limited selection (k3-model.md §3.7.3): a group scores the sum of its two best
 * keys; the experts outside the topk_group best groups are masked with -inf, as
 * Moonshot's gate does (`masked_fill(~score_mask, -inf)`), so none of them is ever chosen.
 * DeepSeek-V3's code sets them to 0 instead, which lets a dropped expert beat a kept one
 * whose key (sigmoid plus bias) is negative.  K3 itself has one group. */
static void mask_groups(const struct k3_config *c, float *key)
{
    int per = c->n_experts / c->n_group;
    float gscore[K3_MAX_GROUPS];
    for (int g = 0; g < c->n_group; g++) {
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            if (key[e] > a) {
                b = a;
                a = key[e];
            } else if (key[e] > b) {
                b = key[e];
            }
        }
        gscore[g] = a + b;
    }
    unsigned char keep[K3_MAX_GROUPS] = {0};
    for (int t = 0; t < c->topk_group; t++) {
        int best = -1;
        for (int g = 0; g < c->n_group; g++)
            if (!keep[g] && (best < 0 || gscore[g] > gscore[best]))
                best = g;
        keep[best] = 1;
    }
    for (int g = 0; g < c->n_group; g++)
        if (!keep[g])
            for (int e = g * per; e < (g + 1) * per; e++)
                key[e] = -INFINITY;
}

void k3_route(const struct k3_config *c, const float *logits, const float *bias, int *idx,
              float *weight, float *key)
{
    k3_route_k(c, logits, bias, c->top_k, idx, weight, key);
}

void k3_route_k(const struct k3_config *c, const float *logits, const float *bias, int k,
                int *idx, float *weight, float *key)
{
    for (int e = 0; e < c->n_experts; e++) {
        key[e] = k3_sigmoid(logits[e]) + bias[e];
        if (isnan(key[e])) /* a broken row must not break selection */
            key[e] = -FLT_MAX;
    }
    assert(k <= k3_route_choosable(c));
    if (k3_route_grouped(c))
        mask_groups(c, key);
    for (int j = 0; j < k; j++) {
        int e = argmax_key(key, c->n_experts);
        key[e] = -INFINITY;
        idx[j] = e;
    }
    k3_route_weigh(c, logits, idx, k, weight);
}

void k3_route_weigh(const struct k3_config *c, const float *logits, const int *idx, int k,
                    float *weight)
{
    float sum = 0;
    for (int j = 0; j < k; j++) {
        weight[j] = k3_sigmoid(logits[idx[j]]); /* the unbiased score */
        sum += weight[j];
    }
    /* Moonshot's gate renormalizes only when the config routes to more than one expert
     * (its own top_k, whatever k this call weighs). */
    bool renormalize = c->renormalize && c->top_k > 1;
    for (int j = 0; j < k; j++) {
        if (renormalize)
            weight[j] /= sum + K3_ROUTER_RENORM_EPS;
        weight[j] *= c->routed_scale;
    }
}

float k3_kda_gate(float u, float a_log_head, float lower_bound)
{
    return lower_bound * k3_sigmoid(expf(a_log_head) * u);
}

void k3_kda_head_step(float *S, const float *alpha, const float *k, const float *v,
                      const float *q, float beta, float *o, int d)
{
    /* Decay, then read r = v - Sᵀk from the decayed state (o holds Sᵀk for now). */
    for (int j = 0; j < d; j++)
        o[j] = 0;
    for (int i = 0; i < d; i++) {
        float *row = S + (size_t)i * d;
        for (int j = 0; j < d; j++) {
            row[j] *= alpha[i];
            o[j] += row[j] * k[i];
        }
    }
    float r[K3_MAX_HEAD_DIM];
    for (int j = 0; j < d; j++)
        r[j] = v[j] - o[j];
    /* Update S += β k rᵀ, then read the output from the updated state. */
    for (int j = 0; j < d; j++)
        o[j] = 0;
    for (int i = 0; i < d; i++) {
        float *row = S + (size_t)i * d;
        float bk = beta * k[i];
        for (int j = 0; j < d; j++) {
            row[j] += bk * r[j];
            o[j] += row[j] * q[i];
        }
    }
}

/* Causal depthwise conv over (ring, x) then SiLU, for channels [c0, c0+n); the ring
 * keeps the last W-1 raw inputs per channel, oldest first. */
static void short_conv_silu(float *x, float *ring, const float *w, int c0, int n, int W)
{
    for (int c = c0; c < c0 + n; c++) {
        float *rc = ring + (size_t)c * (W - 1);
        const float *wc = w + (size_t)c * W;
        float acc = 0;
        for (int j = 0; j < W - 1; j++)
            acc += wc[j] * rc[j];
        acc += wc[W - 1] * x[c];
        for (int j = 0; j + 1 < W - 1; j++)
            rc[j] = rc[j + 1];
        if (W > 1)
            rc[W - 2] = x[c];
        x[c] = k3_silu(acc);
    }
}

static void l2_normalize(float *x, int d, float scale)
{
    float inv = scale / sqrtf(k3_dot_f32(x, x, d) + K3_KDA_L2_EPS);
    for (int i = 0; i < d; i++)
        x[i] *= inv;
}

void k3_kda_head(const struct k3_config *c, const struct k3_kda_weights *w, float *state,
                 float *ring, float *q, float *k, float *v, const float *u,
                 const float *beta_logit, const float *z, float *gated, int h)
{
    int d = c->kda_head_dim, P = k3_kda_width(c), W = c->conv_kernel, c0 = h * d;
    size_t ring_stride = (size_t)P * (W - 1);
    short_conv_silu(q, ring, w->q_conv, c0, d, W);
    short_conv_silu(k, ring + ring_stride, w->k_conv, c0, d, W);
    short_conv_silu(v, ring + 2 * ring_stride, w->v_conv, c0, d, W);
    l2_normalize(q + c0, d, 1.0f / sqrtf((float)d));
    l2_normalize(k + c0, d, 1.0f);
    float alpha[K3_MAX_HEAD_DIM];
    for (int i = 0; i < d; i++)
        alpha[i] = expf(k3_kda_gate(u[c0 + i], w->a_log[h], c->gate_lower_bound));
    float *o = gated + c0;
    k3_kda_head_step(state + (size_t)h * d * d, alpha, k + c0, v + c0, q + c0,
                     k3_sigmoid(beta_logit[h]), o, d);
    /* Normalize first, then gate (fla's FusedRMSNormGated). */
    k3_rmsnorm(o, o, w->o_norm, d, c->rms_eps);
    for (int i = 0; i < d; i++)
        o[i] *= k3_sigmoid(z[c0 + i]);
}

/* q̃ = (U^K)ᵀ q_nope, so that scores read the latent directly; summed over i in order. */
static void mla_absorb(const struct k3_config *c, const float *q_nope, const uint16_t *uk,
                       float *q_lat)
{
    int R = c->kv_lora;
    for (int r = 0; r < R; r++)
        q_lat[r] = 0;
    for (int i = 0; i < c->qk_nope; i++)
        k3_axpy_bf16(q_lat, q_nope[i], uk + (size_t)i * R, R);
}

/* In place: scores[s] = exp(scores[s] - max) / sum over the n_ctx scores. */
static void softmax_weights(float *scores, int n_ctx)
{
    float max = -INFINITY, sum = 0;
    for (int s = 0; s < n_ctx; s++)
        max = scores[s] > max ? scores[s] : max;
    for (int s = 0; s < n_ctx; s++) {
        scores[s] = expf(scores[s] - max);
        sum += scores[s];
    }
    for (int s = 0; s < n_ctx; s++)
        scores[s] = scores[s] / sum;
}

int k3_mla_heads_per_walk(const struct k3_config *c, int max_ctx)
{
    long per = (4L << 20) / (long)sizeof(float) / ((long)max_ctx + 2L * c->kv_lora);
    return per < 1 ? 1 : per > c->mla_heads ? c->mla_heads : (int)per;
}

void k3_mla_heads(const struct k3_config *c, const float *q, const float *cache, int n_ctx,
                  const uint16_t *kv_b, int h0, int nh, float *out, float *scratch)
{
    int R = c->kv_lora, row = c->kv_lora + c->qk_rope, qh = c->qk_nope + c->qk_rope;
    size_t head_rows = (size_t)(c->qk_nope + c->v_head) * R;
    float *scores = scratch, *q_lat = scores + (size_t)nh * n_ctx, *c_bar = q_lat + (size_t)nh * R;
    for (int j = 0; j < nh; j++)
        mla_absorb(c, q + (size_t)(h0 + j) * qh, kv_b + (size_t)(h0 + j) * head_rows, q_lat + (size_t)j * R);
    float scale = 1.0f / sqrtf((float)qh);
    for (int s = 0; s < n_ctx; s++) {
        const float *cs = cache + (size_t)s * row;
        for (int j = 0; j < nh; j++) {
            float sc = k3_dot_f32(q_lat + (size_t)j * R, cs, R);
            if (c->qk_rope)
                sc += k3_dot_f32(q + (size_t)(h0 + j) * qh + c->qk_nope, cs + R, c->qk_rope);
            scores[(size_t)j * n_ctx + s] = sc * scale;
        }
    }
    for (int j = 0; j < nh; j++) {
        softmax_weights(scores + (size_t)j * n_ctx, n_ctx);
        for (int r = 0; r < R; r++)
            c_bar[(size_t)j * R + r] = 0;
    }
    for (int s = 0; s < n_ctx; s++)
        for (int j = 0; j < nh; j++)
            k3_axpy_f32(c_bar + (size_t)j * R, scores[(size_t)j * n_ctx + s], cache + (size_t)s * row, R);
    for (int j = 0; j < nh; j++) {
        const uint16_t *uv = kv_b + (size_t)(h0 + j) * head_rows + (size_t)c->qk_nope * R;
        for (int i = 0; i < c->v_head; i++)
            out[(size_t)(h0 + j) * c->v_head + i] = k3_dot_bf16(uv + (size_t)i * R, c_bar + (size_t)j * R, R);
    }
}
