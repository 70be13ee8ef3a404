/* What runs beside the math, called by the layer loop at its stages: the read path
 * brings a segment in before its weights are used (when the trunk is not all resident),
 * the trace opens a span per stage, and a decode step predicts the next layer's experts
 * and prefetches them while this layer computes.  None of it changes a byte of output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward/forward_internal.h"
#include "engine/forward/layers.h"
#include "engine/forward/predict_ids.h"
#include "engine/kernels/kernels.h"

static const char *stage_name(const struct k3_config *c, enum k3_stage stage, int l)
{
    switch (stage) {
    case K3_STAGE_LAYER: return "layer";
    case K3_STAGE_ATTENTION: return c->attn[l] == K3_ATTN_KDA ? "KDA" : "MLA";
    case K3_STAGE_FFN: return k3_layer_is_moe(c, l) ? "MoE" : "MLP";
    case K3_STAGE_OUTPUT: return "output";
    }
    return "?";
}

/* The span opens first, so that a wait for the stage's weights shows inside it. */
int k3_stage_enter(struct k3_forward *f, enum k3_stage stage, int l, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_trunk_source *trunk = f->hooks.trunk;
    char args[32] = "";
    if (stage == K3_STAGE_LAYER)
        snprintf(args, sizeof args, "\"layer\": %d", l);
    k3_trace_begin(f->hooks.trace, stage_name(c, stage, l), args[0] ? args : NULL);
    if (!trunk || (stage != K3_STAGE_LAYER && stage != K3_STAGE_OUTPUT))
        return 0;
    if (stage == K3_STAGE_OUTPUT)
        return trunk->segment(trunk->ctx, k3_seg_output(c), err);
    return trunk->segment(trunk->ctx, k3_seg_layer(l), err) ? k3_err_prefix(err, "layer %d", l) : 0;
}

void k3_stage_leave(struct k3_forward *f)
{
    k3_trace_end(f->hooks.trace);
}

int k3_stage_embed(struct k3_forward *f, const int32_t *tokens, int T, float *out,
                   struct k3_err *err)
{
    const struct k3_trunk_source *trunk = f->hooks.trunk;
    if (trunk)
        return trunk->embed(trunk->ctx, tokens, T, out, err);
    int H = f->m->cfg.hidden;
    for (int t = 0; t < T; t++) {
        const uint16_t *row = f->m->w.embed + (size_t)tokens[t] * H;
        for (int i = 0; i < H; i++)
            out[(size_t)t * H + i] = k3_bf16_to_f32(row[i]);
    }
    return 0;
}

/* The hidden states --predict-from routes at this point, or NULL when it routes
 * another; *renorm: normalize them with the next layer's gain first. */
static const float *predict_source(const struct k3_forward *f, enum k3_predict_point at,
                                   bool *renorm)
{
    const struct k3_forward_scratch *s = f->s;
    *renorm = true;
    switch (f->hooks.predict) {
    case K3_PREDICT_MOE_INPUT: *renorm = false; return at == K3_AT_FFN_INPUT ? s->hn : NULL;
    case K3_PREDICT_MOE_INPUT_NEXT: return at == K3_AT_FFN_INPUT ? s->a : NULL;
    case K3_PREDICT_LAYER_OUTPUT: return at == K3_AT_LAYER_OUTPUT ? s->res.p : NULL;
    case K3_PREDICT_IDS: case K3_PREDICT_OFF: break;
    }
    return NULL;
}

/* Dealt experts (share.h): the predicted union (pred_mark) dealt out by position, each
 * expert's rank kept for layer's assignment (moe.c), which keeps a predicted expert on the
 * rank that prefetched it. */
static void deal_predicted(struct k3_forward_scratch *s, struct k3_share share, int E, int layer)
{
    for (int e = 0, i = 0; e < E; e++)
        s->pred_rank[e] = s->pred_mark[e] ? i++ % share.ranks : -1;
    s->pred_layer = layer;
}

/* The union of every row's top-k predicted experts for layer that this process would be
 * given, best ranks first; row_k: how many row t has, when fewer than k (NULL: k each). */
static int predicted_union(struct k3_forward_scratch *s, struct k3_share share, int E, int k,
                           int T, int layer, const int *row_k)
{
    int n = 0;
    memset(s->pred_mark, 0, sizeof(bool) * (size_t)E);
    for (int rank = 0; rank < k; rank++)
        for (int t = 0; t < T; t++) {
            if (row_k && rank >= row_k[t])
                continue;
            int e = s->pred_idx[(size_t)t * E + rank];
            if (!s->pred_mark[e]) {
                s->pred_mark[e] = true;
                s->pred_list[n++] = e;
            }
        }
    if (share.dealt)
        deal_predicted(s, share, E, layer);
    int kept = 0;
    for (int j = 0; j < n; j++) {
        int e = s->pred_list[j];
        if (share.dealt ? s->pred_rank[e] == share.rank : k3_share_owns(share, e))
            s->pred_list[kept++] = e;
    }
    return kept;
}

/* --predict-from ids, once layer l's experts are chosen: the counts learn them (every
 * step), and a decode step prefetches each row's best guesses for the next layer. */
static int predict_from_ids(struct k3_forward *f, int l, enum k3_predict_point at, int T,
                            struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    struct k3_expert_store *store = f->experts;
    struct k3_forward_scratch *s = f->s;
    int next = l + 1, E = c->n_experts, m = f->m->moe_index[l];
    if (at != K3_AT_FFN_INPUT || m < 0)
        return 0;
    k3_id_predictor_learn(f->id_pred, m, s->sel, T);
    if (!s->decode || next >= c->n_layers || !k3_layer_is_moe(c, next) || !store->ops->prefetch)
        return 0;
    int k = f->hooks.predict_k < E ? f->hooks.predict_k : E;
    for (int t = 0; t < T; t++)
        s->pred_got[t] = k3_id_predictor_guess(f->id_pred, m, t, k, s->pred_idx + (size_t)t * E);
    int n = predicted_union(s, f->hooks.peers.share, E, k, T, next, s->pred_got);
    return store->ops->prefetch(store, next, s->pred_list, n, err);
}

int k3_forward_predict_ids(struct k3_forward *f, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    int moe = k3_moe_layer_count(c);
    if (!(f->id_pred = calloc(1, sizeof *f->id_pred)))
        return k3_errf(err, "out of memory");
    return k3_id_predictor_init(f->id_pred, moe, c->n_experts, c->top_k, f->rows, err);
}

/* Decode steps only: a prompt step reads the union of its rows' experts anyway. */
int k3_stage_predict(struct k3_forward *f, int l, enum k3_predict_point at, int T,
                     struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    struct k3_expert_store *store = f->experts;
    struct k3_forward_scratch *s = f->s;
    int next = l + 1, H = c->hidden, E = c->n_experts;
    if (f->hooks.predict == K3_PREDICT_IDS)
        return f->id_pred ? predict_from_ids(f, l, at, T, err) : 0;
    bool renorm;
    const float *h = predict_source(f, at, &renorm);
    if (!h || !s->decode || next >= c->n_layers || !k3_layer_is_moe(c, next) ||
        !store->ops->prefetch)
        return 0;
    /* The next layer's router may be in a segment still streaming in: route with its
     * bytes, not whatever its slot held before. */
    const struct k3_trunk_source *trunk = f->hooks.trunk;
    int ready = trunk ? trunk->ahead(trunk->ctx, k3_seg_layer(next), err) : 0;
    if (ready)
        return ready < 0 ? -1 : 0;
    const struct k3_layer_weights *w = &f->m->w.layers[next];
    if (renorm) {
        for (int t = 0; t < T; t++)
            k3_rmsnorm(s->pred_h + (size_t)t * H, h + (size_t)t * H, w->post_attn_norm, H,
                       c->rms_eps);
        h = s->pred_h;
    }
    k3_matmul_bf16(w->moe.router, E, H, h, H, s->pred_logit, E, T);
    /* No more than the router can choose: a grouped router masks the dropped groups'
     * experts out, so --prefetch-k 24 of 2 kept groups of 8 asks for 16. */
    int choosable = k3_route_choosable(c);
    int k = f->hooks.predict_k < choosable ? f->hooks.predict_k : choosable;
    for (int t = 0; t < T; t++)
        k3_route_k(c, s->pred_logit + (size_t)t * E, w->moe.router_bias, k,
                   s->pred_idx + (size_t)t * E, s->pred_w + (size_t)t * E, s->rkey);
    int n = predicted_union(s, f->hooks.peers.share, E, k, T, next, NULL);
    return store->ops->prefetch(store, next, s->pred_list, n, err);
}
