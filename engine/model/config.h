/* Model configuration: the `config.json` of a Kimi-K3-family checkpoint.
 *
 * Owns: parsing the root config and its nested `text_config` (jansson), refusing
 * configs outside the family or contradicting themselves (with the key named), the
 * derived quantities every other module uses (layer schedule, widths, expert record
 * size), and the named presets `k3`, `k3-tiny`, `k3-bench`, `k3-slice`.
 * Does not own: tensors (tensors.h), file I/O beyond reading config.json.
 */
#ifndef K3_CONFIG_H
#define K3_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

/* ε of the MLA q_a/kv_a norms: 1e-6 in the shipped modeling file, rms_norm_eps in
 * waste, kimi-k3-in-c and llama.cpp (k3-model.md §3.5, §8).  One place to change it. */
#define K3_MLA_NORM_EPS 1e-6f
/* ε inside the per-head L2 norm of KDA's q and k (fla uses 1e-6; waste 1e-12). */
#define K3_KDA_L2_EPS 1e-6f
/* Added to the sum of the selected router weights before renormalizing. */
#define K3_ROUTER_RENORM_EPS 1e-20f

/* Bounds the engine keeps small buffers on the stack for; configs beyond them are
 * refused at load (K3 uses 8 blocks, 1 group, head_dim 128). */
#define K3_MAX_LAYERS 4096
#define K3_MAX_BLOCKS 64
#define K3_MAX_GROUPS 256
#define K3_MAX_HEAD_DIM 1024
#define K3_MAX_TOPK 256

enum k3_attn_kind { K3_ATTN_KDA, K3_ATTN_MLA };

struct k3_config {
    int vocab;             /* vocab_size */
    int hidden;            /* hidden_size (H) */
    int n_layers;          /* num_hidden_layers (L) */
    float rms_eps;         /* rms_norm_eps */
    float situ_beta;       /* activation_situ_beta (gate cap) */
    float situ_linear_beta;/* activation_situ_linear_beta (up cap) */
    int dense_inter;       /* intermediate_size: the dense MLP width */
    int first_dense;       /* first_k_dense_replace */
    int moe_freq;          /* moe_layer_freq */

    /* MLA */
    int mla_heads;         /* num_attention_heads */
    int q_lora;            /* q_lora_rank */
    int kv_lora;           /* kv_lora_rank */
    int qk_nope, qk_rope, v_head;

    /* MoE */
    int n_experts;         /* num_experts (E) */
    int top_k;             /* num_experts_per_token (not the sampling `top_k`) */
    int n_shared;          /* num_shared_experts, fused into one MLP */
    int moe_inter;         /* moe_intermediate_size (I) */
    int latent;            /* routed_expert_hidden_size (H_l) */
    int n_group, topk_group; /* num_expert_group, topk_group (k3_route_grouped) */
    bool renormalize;      /* moe_renormalize (the router skips it at top_k 1) */
    float routed_scale;

    int attn_res_block;    /* attn_res_block_size (S) */

    /* KDA (linear_attn_config) */
    int kda_heads, kda_head_dim, conv_kernel;
    float gate_lower_bound;

    int bos_id, eos_id, pad_id;
    int max_positions;
    bool tie_embeddings;

    enum k3_attn_kind *attn;  /* [n_layers], from kda_layers/full_attn_layers */
    char *json;               /* the root config.json text, re-serialized */
};

/* Parses a root config.json text; name (a path) is used in error messages. */
int k3_config_parse(struct k3_config *cfg, const char *name, const char *text, size_t len,
                    struct k3_err *err);
int k3_config_load(struct k3_config *cfg, const char *path, struct k3_err *err);
/* Resolves "k3", "k3-tiny", "k3-bench", "k3-slice" or a path to a .json file. */
int k3_config_named(struct k3_config *cfg, const char *name_or_path, struct k3_err *err);
void k3_config_free(struct k3_config *cfg);

static inline bool k3_layer_is_moe(const struct k3_config *c, int l)
{
    return l >= c->first_dense && l % c->moe_freq == 0;
}
static inline int k3_kda_width(const struct k3_config *c) { return c->kda_heads * c->kda_head_dim; }
static inline int k3_mla_out_width(const struct k3_config *c) { return c->mla_heads * c->v_head; }
static inline int k3_shared_inter(const struct k3_config *c) { return c->n_shared * c->moe_inter; }
/* Stored AttnRes representations at most: the embedding plus one per completed block. */
static inline int k3_max_blocks(const struct k3_config *c)
{
    return (c->n_layers + c->attn_res_block - 1) / c->attn_res_block;
}
int k3_moe_layer_count(const struct k3_config *c);
/* Whether the router limits its choice to the topk_group best groups: whenever there are
 * more groups than it keeps, as Moonshot's gate decides (use_grouped_topk is not read). */
static inline bool k3_route_grouped(const struct k3_config *c)
{
    return c->n_group > 1 && c->n_group > c->topk_group;
}
/* Experts one row's routing can choose among: the kept groups' when grouped (the others
 * are masked out), else every expert.  At least top_k (config.c refuses less). */
static inline int k3_route_choosable(const struct k3_config *c)
{
    return k3_route_grouped(c) ? c->topk_group * (c->n_experts / c->n_group) : c->n_experts;
}

#endif
