/* The layer loop (k3-model.md §3): x = embed(token); per layer, attention then the
 * feed-forward, each reading an Attention-Residuals mix of the stored blocks and adding
 * into the live block; the output mixes every block, normalizes and projects to logits.
 * The stages (streaming, prediction, tracing) run beside it through stages.c. */
#include <string.h>

#include "engine/forward/forward_internal.h"
#include "engine/forward/layers.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/matrix.h"

/* ---- Attention Residuals (§3.2) ---------------------------------------------------- */

/* Before layer 0 the embedding (already in p) is the live partial sum; no block is
 * stored yet. */
static void res_start(struct attn_res *r)
{
    r->n_blocks = 0;
    r->p_empty = false;
}

/* out[j] = Mix(blocks[rows[j]] ∪ {p[rows[j]]}; key) for the n rows listed (rows NULL:
 * rows 0..n-1).  With no stored block, the mix of p alone is p. */
static void res_mix(const struct k3_config *c, const struct attn_res *r, const float *key,
                    const int *rows, int n, float *out)
{
    size_t H = (size_t)c->hidden, NB = (size_t)k3_max_blocks(c);
    for (int j = 0; j < n; j++) {
        size_t t = rows ? (size_t)rows[j] : (size_t)j;
        const float *cands[K3_MAX_BLOCKS + 1];
        for (int b = 0; b < r->n_blocks; b++)
            cands[b] = r->blocks + (t * NB + (size_t)b) * H;
        cands[r->n_blocks] = r->p + t * H;
        if (r->n_blocks)
            k3_attn_res_mix(out + (size_t)j * H, cands, r->n_blocks + 1, key, (int)H, c->rms_eps);
        else
            memcpy(out + (size_t)j * H, cands[0], sizeof(float) * H);
    }
}

/* At a block boundary p is stored as a block and the next add starts p anew. */
static void res_block_boundary(const struct k3_config *c, struct attn_res *r, int l, int T)
{
    if (l % c->attn_res_block)
        return;
    size_t H = (size_t)c->hidden, NB = (size_t)k3_max_blocks(c);
    for (int t = 0; t < T; t++)
        memcpy(r->blocks + ((size_t)t * NB + (size_t)r->n_blocks) * H, r->p + (size_t)t * H,
               sizeof(float) * H);
    r->n_blocks++;
    r->p_empty = true;
}

/* p += o (p = o right after a boundary). */
static void res_add(struct attn_res *r, const float *o, int T, int H)
{
    for (size_t i = 0; i < (size_t)T * H; i++)
        r->p[i] = r->p_empty ? o[i] : r->p[i] + o[i];
    r->p_empty = false;
}

static void norm_rows(float *dst, const float *src, const float *gain, int H, float eps, int T)
{
    for (int t = 0; t < T; t++)
        k3_rmsnorm(dst + (size_t)t * H, src + (size_t)t * H, gain, H, eps);
}

/* ---- the layer loop ---------------------------------------------------------------- */

static void attention(struct k3_forward *f, const struct k3_step *st, int l)
{
    if (f->m->cfg.attn[l] == K3_ATTN_KDA)
        k3_kda_rows(f, st, l);
    else
        k3_mla_rows(f, st, l);
}

static int feed_forward(struct k3_forward *f, int l, int T, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    struct k3_forward_scratch *s = f->s;
    if (k3_layer_is_moe(c, l))
        return k3_moe_rows(f, l, T, err);
    /* A dense layer predicts for the first MoE layer after it, the same way. */
    if (k3_stage_predict(f, l, K3_AT_FFN_INPUT, T, err))
        return -1;
    k3_mlp_rows(c, &f->m->w.layers[l].dense, c->dense_inter, s->hn, s->o, s->fg, T);
    return 0;
}

static void layer_hook(struct k3_forward *f, int layer, const float *x, const int *rows, int n)
{
    int H = f->m->cfg.hidden;
    for (int j = 0; f->hooks.on_layer && j < n; j++)
        f->hooks.on_layer(f->hooks.on_layer_ctx, f->s->row_pos[rows ? rows[j] : j], layer,
                          x + (size_t)j * H, H);
}

static int layer(struct k3_forward *f, const struct k3_step *st, int l, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    const struct k3_layer_weights *w = &f->m->w.layers[l];
    struct k3_forward_scratch *s = f->s;
    int T = st->n, H = c->hidden;

    res_mix(c, &s->res, w->attn_res_key, NULL, T, s->a);
    res_block_boundary(c, &s->res, l, T);
    norm_rows(s->hn, s->a, w->input_norm, H, c->rms_eps, T);
    int rc = k3_stage_enter(f, K3_STAGE_ATTENTION, l, err);
    if (!rc)
        attention(f, st, l);
    k3_stage_leave(f);
    if (rc)
        return -1;
    res_add(&s->res, s->o, T, H);

    res_mix(c, &s->res, w->mlp_res_key, NULL, T, s->a);
    norm_rows(s->hn, s->a, w->post_attn_norm, H, c->rms_eps, T);
    rc = k3_stage_enter(f, K3_STAGE_FFN, l, err) || feed_forward(f, l, T, err);
    k3_stage_leave(f);
    if (rc)
        return k3_err_prefix(err, "layer %d", l);
    res_add(&s->res, s->o, T, H);
    layer_hook(f, l, s->res.p, NULL, T);
    return k3_stage_predict(f, l, K3_AT_LAYER_OUTPUT, T, err);
}

/* logits of the rows that want them: the output mix over every block and the last
 * block's sum, the final norm, lm_head.  The layer hook sees every row's mix. */
static int output(struct k3_forward *f, const struct k3_step *st, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    struct k3_forward_scratch *s = f->s;
    int H = c->hidden, n = 0, n_logits = 0;
    for (int t = 0; t < st->n; t++) /* the rows wanting logits come first */
        if (st->want_logits && st->want_logits[t])
            s->out_rows[n++] = t;
    n_logits = n;
    for (int t = 0; f->hooks.on_layer && t < st->n; t++)
        if (!st->want_logits || !st->want_logits[t])
            s->out_rows[n++] = t;
    if (!n)
        return 0;
    if (k3_stage_enter(f, K3_STAGE_OUTPUT, c->n_layers, err)) {
        k3_stage_leave(f); /* the span opened before the segment failed to arrive */
        return -1;
    }
    res_mix(c, &s->res, f->m->w.out_res_key, s->out_rows, n, s->a);
    layer_hook(f, c->n_layers, s->a, s->out_rows, n);
    norm_rows(s->hn, s->a, f->m->w.final_norm, H, c->rms_eps, n_logits);
    if (n_logits)
        k3_matmul(f->m->w.lm_head, c->vocab, H, s->hn, H, st->logits, c->vocab, n_logits);
    k3_stage_leave(f);
    return 0;
}

/* Each row's position; the rows of a sequence must be adjacent, fit its context and
 * carry tokens of the vocabulary. */
static int place_rows(struct k3_forward *f, const struct k3_step *st, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    struct k3_forward_scratch *s = f->s;
    if (st->n < 1 || st->n > f->rows)
        return k3_errf(err, "a step of %d rows (1 to %d)", st->n, f->rows);
    s->decode = true;
    s->row_seq = st->seq;
    for (int t = 0; t < st->n; t++) {
        const struct k3_seq *q = st->seq[t];
        bool continues = t && st->seq[t - 1] == q;
        for (int u = 0; !continues && u < t; u++)
            if (st->seq[u] == q)
                return k3_errf(err, "step row %d: its sequence's rows are not adjacent", t);
        s->row_pos[t] = continues ? s->row_pos[t - 1] + 1 : q->pos;
        s->decode = s->decode && !continues && (t + 1 == st->n || st->seq[t + 1] != q);
        if (s->row_pos[t] >= q->max_ctx || q->max_ctx > f->max_ctx)
            return k3_errf(err, "context full: %d positions used, position %d does not fit in %d",
                           q->pos, s->row_pos[t], q->max_ctx);
        if (st->tokens[t] < 0 || st->tokens[t] >= c->vocab)
            return k3_errf(err, "token id %d (position %d) is outside the vocabulary [0, %d)",
                           st->tokens[t], s->row_pos[t], c->vocab);
    }
    return 0;
}

/* Rows checked, embedding, layers, output. */
static int run_rows(struct k3_forward *f, const struct k3_step *st, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    struct k3_forward_scratch *s = f->s;
    if (place_rows(f, st, err) || k3_stage_embed(f, st->tokens, st->n, s->res.p, err))
        return -1;
    res_start(&s->res);
    s->pred_layer = -1; /* no prediction of this step's yet */
    for (int l = 0; l < c->n_layers; l++) {
        int rc = k3_stage_enter(f, K3_STAGE_LAYER, l, err) || layer(f, st, l, err);
        k3_stage_leave(f);
        if (rc)
            return -1;
    }
    return output(f, st, err);
}

/* The peers (if any) see every step this process runs, and its end, failed or not. */
int k3_forward_step(struct k3_forward *f, const struct k3_step *st, struct k3_err *err)
{
    const struct k3_peer_hooks *peers = &f->hooks.peers;
    struct k3_forward_scratch *s = f->s;
    if (peers->step && peers->step(peers->ctx, st, err))
        return -1;
    int rc = run_rows(f, st, err);
    if (peers->step_done)
        peers->step_done(peers->ctx, rc != 0, err);
    if (rc)
        return -1;
    for (int t = 0; t < st->n; t++)
        if (t + 1 == st->n || st->seq[t + 1] != st->seq[t])
            st->seq[t]->pos = s->row_pos[t] + 1;
    f->stats.steps++;
    f->stats.rows += (uint64_t)st->n;
    f->stats.decode_steps += s->decode;
    f->stats.decode_rows += s->decode ? (uint64_t)st->n : 0;
    return 0;
}

int k3_forward_tokens(struct k3_forward *f, struct k3_seq *q, const int32_t *tokens, int n,
                      float *logits, bool all_logits, struct k3_err *err)
{
    const struct k3_config *c = &f->m->cfg;
    if (q->pos + n > q->max_ctx)
        return k3_errf(err, "context full: %d positions used, %d more do not fit in %d", q->pos,
                       n, q->max_ctx);
    struct k3_seq **seqs = f->s->pass_seq;
    bool *want = f->s->pass_want;
    for (int t = 0; t < f->rows; t++)
        seqs[t] = q;
    for (int done = 0; done < n; done += f->rows) {
        int T = n - done < f->rows ? n - done : f->rows;
        bool last = done + T == n;
        for (int t = 0; t < T; t++)
            want[t] = logits && (all_logits || (last && t == T - 1));
        struct k3_step st = {
            .n = T,
            .tokens = tokens + done,
            .seq = seqs,
            .want_logits = want,
            .logits = logits && all_logits ? logits + (size_t)done * c->vocab : logits,
        };
        if (k3_forward_step(f, &st, err))
            return -1;
    }
    return 0;
}
