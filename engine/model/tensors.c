#include "engine/model/tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct builder {
    struct k3_tensor_spec *specs;
    int n, cap;
    const char *prefix; /* "language_model.model." (or "language_model." for lm_head) */
    int layer;          /* -1 for global tensors */
    const char *scope;  /* name prefix inside the layer, e.g. "self_attn." */
};

static void add(struct builder *b, const char *suffix, enum k3_tensor_kind kind, enum k3_init init,
                enum k3_slot slot, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    struct k3_tensor_spec *s = &b->specs[b->n++];
    memset(s, 0, sizeof *s);
    if (b->layer < 0)
        snprintf(s->name, sizeof s->name, "%s%s", b->prefix, suffix);
    else
        snprintf(s->name, sizeof s->name, "%slayers.%d.%s%s", b->prefix, b->layer, b->scope,
                 suffix);
    s->kind = kind;
    s->init = init;
    s->layer = b->layer;
    s->slot = slot;
    s->ndim = ndim;
    s->shape[0] = d0;
    s->shape[1] = d1;
    s->shape[2] = d2;
    s->fan_in = ndim >= 2 ? d1 : d0;
}

/* A bf16 weight matrix [out, in]. */
static void mat(struct builder *b, const char *suffix, enum k3_slot slot, int64_t out, int64_t in)
{
    add(b, suffix, K3_T_MATRIX, K3_INIT_LINEAR, slot, 2, out, in, 0);
}

static void gain(struct builder *b, const char *suffix, enum k3_slot slot, int64_t n)
{
    add(b, suffix, K3_T_GAIN, K3_INIT_GAIN, slot, 1, n, 0, 0);
}

static void res_proj(struct builder *b, const char *suffix, enum k3_slot slot, int64_t h)
{
    add(b, suffix, K3_T_GAIN, K3_INIT_RES_PROJ, slot, 2, 1, h, 0);
}

static void kda_tensors(struct builder *b, const struct k3_config *c)
{
    int64_t H = c->hidden, P = k3_kda_width(c), d = c->kda_head_dim, W = c->conv_kernel;
    b->scope = "self_attn.";
    mat(b, "q_proj.weight", K3_SLOT_KDA_Q, P, H);
    mat(b, "k_proj.weight", K3_SLOT_KDA_K, P, H);
    mat(b, "v_proj.weight", K3_SLOT_KDA_V, P, H);
    add(b, "q_conv1d.weight", K3_T_F32, K3_INIT_CONV, K3_SLOT_KDA_QCONV, 3, P, 1, W);
    add(b, "k_conv1d.weight", K3_T_F32, K3_INIT_CONV, K3_SLOT_KDA_KCONV, 3, P, 1, W);
    add(b, "v_conv1d.weight", K3_T_F32, K3_INIT_CONV, K3_SLOT_KDA_VCONV, 3, P, 1, W);
    mat(b, "f_a_proj.weight", K3_SLOT_KDA_FA, d, H);
    mat(b, "f_b_proj.weight", K3_SLOT_KDA_FB, P, d);
    mat(b, "b_proj.weight", K3_SLOT_KDA_B, c->kda_heads, H);
    add(b, "A_log", K3_T_F32, K3_INIT_A_LOG, K3_SLOT_KDA_ALOG, 1, d, 0, 0);
    b->specs[b->n - 1].live = c->kda_heads;
    add(b, "dt_bias", K3_T_F32, K3_INIT_DT_BIAS, K3_SLOT_KDA_DTBIAS, 1, P, 0, 0);
    mat(b, "g_proj.weight", K3_SLOT_KDA_G, P, H);
    add(b, "o_norm.weight", K3_T_F32, K3_INIT_GAIN, K3_SLOT_KDA_ONORM, 1, d, 0, 0);
    mat(b, "o_proj.weight", K3_SLOT_KDA_O, H, P);
}

static void mla_tensors(struct builder *b, const struct k3_config *c)
{
    int64_t H = c->hidden, n = c->mla_heads;
    b->scope = "self_attn.";
    mat(b, "q_a_proj.weight", K3_SLOT_MLA_QA, c->q_lora, H);
    gain(b, "q_a_layernorm.weight", K3_SLOT_MLA_QANORM, c->q_lora);
    mat(b, "q_b_proj.weight", K3_SLOT_MLA_QB, n * (c->qk_nope + c->qk_rope), c->q_lora);
    mat(b, "kv_a_proj_with_mqa.weight", K3_SLOT_MLA_KVA, c->kv_lora + c->qk_rope, H);
    gain(b, "kv_a_layernorm.weight", K3_SLOT_MLA_KVANORM, c->kv_lora);
    mat(b, "kv_b_proj.weight", K3_SLOT_MLA_KVB, n * (c->qk_nope + c->v_head), c->kv_lora);
    mat(b, "g_proj.weight", K3_SLOT_MLA_G, n * c->v_head, H);
    mat(b, "o_proj.weight", K3_SLOT_MLA_O, H, n * c->v_head);
}

static void ffn_tensors(struct builder *b, const struct k3_config *c, int l)
{
    int64_t H = c->hidden;
    if (!k3_layer_is_moe(c, l)) {
        b->scope = "mlp.";
        mat(b, "gate_proj.weight", K3_SLOT_DENSE_GATE, c->dense_inter, H);
        mat(b, "up_proj.weight", K3_SLOT_DENSE_UP, c->dense_inter, H);
        mat(b, "down_proj.weight", K3_SLOT_DENSE_DOWN, H, c->dense_inter);
        return;
    }
    int64_t S = k3_shared_inter(c);
    b->scope = "block_sparse_moe.";
    mat(b, "gate.weight", K3_SLOT_ROUTER, c->n_experts, H);
    add(b, "gate.e_score_correction_bias", K3_T_F32, K3_INIT_BIAS, K3_SLOT_ROUTER_BIAS, 1,
        c->n_experts, 0, 0);
    mat(b, "shared_experts.gate_proj.weight", K3_SLOT_SHARED_GATE, S, H);
    mat(b, "shared_experts.up_proj.weight", K3_SLOT_SHARED_UP, S, H);
    mat(b, "shared_experts.down_proj.weight", K3_SLOT_SHARED_DOWN, H, S);
    mat(b, "routed_expert_down_proj.weight", K3_SLOT_LATENT_DOWN, c->latent, H);
    gain(b, "routed_expert_norm.weight", K3_SLOT_LATENT_NORM, c->latent);
    mat(b, "routed_expert_up_proj.weight", K3_SLOT_LATENT_UP, H, c->latent);
}

/* Upper bound on tensors per layer: 6 common + 14 KDA (the larger attention) + 8 MoE. */
#define MAX_TENSORS_PER_LAYER 28
#define MAX_GLOBAL_TENSORS 5

int k3_trunk_specs(const struct k3_config *c, struct k3_tensor_spec **specs, int *n)
{
    int64_t H = c->hidden;
    struct builder bld = {.prefix = K3_TENSOR_PREFIX, .layer = -1};
    struct builder *b = &bld;
    b->specs = calloc(MAX_GLOBAL_TENSORS + (size_t)MAX_TENSORS_PER_LAYER * c->n_layers,
                      sizeof *b->specs);
    if (!b->specs)
        return -1;
    add(b, "embed_tokens.weight", K3_T_MATRIX, K3_INIT_EMBED, K3_SLOT_EMBED, 2, c->vocab, H, 0);
    gain(b, "norm.weight", K3_SLOT_FINAL_NORM, H);
    gain(b, "output_attn_res_norm.weight", K3_SLOT_OUT_RES_NORM, H);
    res_proj(b, "output_attn_res_proj.weight", K3_SLOT_OUT_RES_PROJ, H);
    for (int l = 0; l < c->n_layers; l++) {
        b->layer = l;
        b->scope = "";
        gain(b, "input_layernorm.weight", K3_SLOT_INPUT_NORM, H);
        gain(b, "post_attention_layernorm.weight", K3_SLOT_POST_ATTN_NORM, H);
        gain(b, "self_attention_res_norm.weight", K3_SLOT_ATTN_RES_NORM, H);
        res_proj(b, "self_attention_res_proj.weight", K3_SLOT_ATTN_RES_PROJ, H);
        gain(b, "mlp_res_norm.weight", K3_SLOT_MLP_RES_NORM, H);
        res_proj(b, "mlp_res_proj.weight", K3_SLOT_MLP_RES_PROJ, H);
        if (c->attn[l] == K3_ATTN_KDA)
            kda_tensors(b, c);
        else
            mla_tensors(b, c);
        ffn_tensors(b, c, l);
    }
    if (!c->tie_embeddings) {
        b->prefix = "language_model.";
        b->layer = -1;
        add(b, "lm_head.weight", K3_T_MATRIX, K3_INIT_LM_HEAD, K3_SLOT_LM_HEAD, 2, c->vocab, H, 0);
    }
    *specs = b->specs;
    *n = b->n;
    return 0;
}
enum k3_dtype k3_spec_dtype(const struct k3_tensor_spec *s)
{
    return s->kind == K3_T_F32 ? K3_DT_F32 : K3_DT_BF16;
}

void k3_record_layout_init(struct k3_record_layout *r, const struct k3_config *c)
{
    int64_t I = c->moe_inter, Hl = c->latent;
    const int64_t rows[K3_EXPERT_PARTS] = {I, I, I, I, Hl, Hl};
    const int64_t cols[K3_EXPERT_PARTS] = {Hl / 2, Hl / 32, Hl / 2, Hl / 32, I / 2, I / 32};
    uint64_t off = 0;
    for (int p = 0; p < K3_EXPERT_PARTS; p++) {
        r->rows[p] = rows[p];
        r->cols[p] = cols[p];
        r->off[p] = off;
        r->len[p] = (uint64_t)(rows[p] * cols[p]);
        off += r->len[p];
    }
    r->bytes = off;
}

void k3_expert_tensor_name(char *buf, size_t len, int layer, int expert, enum k3_expert_part p)
{
    static const char *const part_names[K3_EXPERT_PARTS] = {
        "w1.weight_packed", "w1.weight_scale", "w3.weight_packed",
        "w3.weight_scale",  "w2.weight_packed", "w2.weight_scale",
    };
    snprintf(buf, len, "%slayers.%d.block_sparse_moe.experts.%d.%s", K3_TENSOR_PREFIX, layer,
             expert, part_names[p]);
}

int k3_trunk_layout_init(struct k3_trunk_layout *t, const struct k3_config *c,
                         const struct k3_tensor_spec *specs, int n, const uint64_t *bytes)
{
    t->n_segments = k3_seg_count(c);
    t->segment_bytes = calloc((size_t)t->n_segments, sizeof *t->segment_bytes);
    t->segment = calloc((size_t)n + 1, sizeof *t->segment);
    t->offset = calloc((size_t)n + 1, sizeof *t->offset);
    if (!t->segment_bytes || !t->segment || !t->offset) {
        k3_trunk_layout_free(t);
        return -1;
    }
    /* Vectors first, so a segment's small tensors sit in its first pieces and can be
     * loaded without the matrices; then the matrices. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if ((specs[i].kind == K3_T_MATRIX) != (pass == 1))
                continue;
            int seg = specs[i].layer >= 0 ? k3_seg_layer(specs[i].layer)
                      : specs[i].slot == K3_SLOT_EMBED ? K3_SEG_EMBED
                                                       : k3_seg_output(c);
            uint64_t at = (t->segment_bytes[seg] + K3_SEGMENT_TENSOR_ALIGN - 1) /
                          K3_SEGMENT_TENSOR_ALIGN * K3_SEGMENT_TENSOR_ALIGN;
            t->segment[i] = seg;
            t->offset[i] = at;
            t->segment_bytes[seg] = at + bytes[i];
        }
    return 0;
}

void k3_trunk_layout_free(struct k3_trunk_layout *t)
{
    free(t->segment_bytes);
    free(t->segment);
    free(t->offset);
    memset(t, 0, sizeof *t);
}
