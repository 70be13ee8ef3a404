/* The loaded model: configuration, where its trunk weights are bound, and where the
 * routed experts live.
 *
 * Owns: the weight structs the forward pass reads (shapes in comments, [out, in]
 * row-major, y = W·x), the tensor plan a checkpoint folder's tensors are validated
 * against, the small tensors, binding segments.  Opening from packed drives or a
 * checkpoint seen as a pack is engine/pack/model_open.h's.
 * Does not own: the math (forward.h), sessions (state per conversation).
 *
 * Routed experts are never assumed resident: the forward pass asks the store for the
 * records of the experts a token routes to and computes each one as it arrives.
 */
#ifndef K3_MODEL_H
#define K3_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/kernels/matrix.h"
#include "engine/model/checkpoint.h"
#include "engine/model/config.h"
#include "engine/base/err.h"
#include "engine/model/share.h"
#include "engine/model/tensors.h"
#include "engine/model/trunk_type.h"

typedef uint16_t k3_bf16;

/* Matrices typed struct k3_mat are the trunk's large ones, held as bf16 or Q8_0
 * (trunk_type.h); the others are always bf16. */
struct k3_mlp_weights {       /* SiTU-GLU MLP of width I: dense layer 0 or the shared experts */
    struct k3_mat gate;        /* [I, H] */
    struct k3_mat up;          /* [I, H] */
    struct k3_mat down;        /* [H, I] */
};

struct k3_kda_weights {       /* P = kda_heads * kda_head_dim, d = kda_head_dim, W = conv kernel */
    struct k3_mat q_proj, k_proj, v_proj; /* [P, H] */
    const float *q_conv, *k_conv, *v_conv;   /* [P, W]; tap W-1 multiplies the current token */
    const k3_bf16 *f_a;        /* [d, H] decay gate, low rank */
    const k3_bf16 *f_b;        /* [P, d] */
    const k3_bf16 *b_proj;     /* [kda_heads, H] β logits */
    const float *a_log;        /* [d]; entries [0, kda_heads) live, per head */
    const float *dt_bias;      /* [P] */
    struct k3_mat g_proj;      /* [P, H] full-rank output gate */
    const float *o_norm;       /* [d], shared by all heads */
    struct k3_mat o_proj;      /* [H, P] */
};

struct k3_mla_weights {       /* n = mla_heads; per head nope+rope query dims, v value dims */
    struct k3_mat q_a;         /* [q_lora, H] */
    const float *q_a_norm;     /* [q_lora] */
    struct k3_mat q_b;         /* [n*(nope+rope), q_lora]; head rows [nope ; rope] */
    struct k3_mat kv_a;        /* [kv_lora+rope, H]; rows [latent ; k_pe] */
    const float *kv_a_norm;    /* [kv_lora] */
    const k3_bf16 *kv_b;       /* [n*(nope+v), kv_lora]; head rows [U^K (nope) ; U^V (v)] */
    struct k3_mat g_proj;      /* [n*v, H] output gate */
    struct k3_mat o_proj;      /* [H, n*v] */
};

struct k3_moe_weights {
    const k3_bf16 *router;     /* [E, H] */
    const float *router_bias;  /* [E] e_score_correction_bias: selection only */
    struct k3_mlp_weights shared; /* width n_shared * moe_inter */
    struct k3_mat latent_down; /* [H_l, H] routed_expert_down_proj */
    const float *latent_norm;  /* [H_l] routed_expert_norm */
    struct k3_mat latent_up;   /* [H, H_l] routed_expert_up_proj */
};

struct k3_layer_weights {
    const float *input_norm;     /* [H] before attention */
    const float *post_attn_norm; /* [H] before the FFN */
    /* AttnRes keys: res_norm ⊙ res_proj, the only form in which they appear.  The
     * product of two bf16 values is exact in f32. */
    float *attn_res_key;         /* [H] */
    float *mlp_res_key;          /* [H] */
    struct k3_kda_weights kda;   /* when attn[l] == K3_ATTN_KDA */
    struct k3_mla_weights mla;   /* when attn[l] == K3_ATTN_MLA */
    struct k3_mlp_weights dense; /* when l < first_k_dense_replace */
    struct k3_moe_weights moe;   /* otherwise */
};

struct k3_weights {
    const k3_bf16 *embed;        /* [V, H] */
    struct k3_mat lm_head;       /* [V, H] (the embedding when tied) */
    const float *final_norm;     /* [H] model.norm */
    float *out_res_key;          /* [H] output_attn_res_norm ⊙ output_attn_res_proj */
    struct k3_layer_weights *layers; /* [L] */
};

/* Where the six tensors of one expert sit in a checkpoint. */
struct k3_expert_loc {
    const struct k3_ckpt_tensor *part[K3_EXPERT_PARTS];
};

/* Every trunk tensor a config implies and where it sits in the trunk segments; when the
 * model comes from a checkpoint folder, also each tensor's checkpoint entry (checked for
 * dtype and shape) and each expert's six tensors. */
struct k3_ckpt_plan {
    struct k3_tensor_spec *specs;
    int n_specs;
    enum k3_dtype *dtypes;               /* [n_specs] as stored */
    struct k3_trunk_layout layout;       /* segments with the dtypes found */
    const struct k3_ckpt_tensor **trunk; /* [n_specs]; while a checkpoint is open */
    struct k3_expert_loc *experts;       /* [n_layers][n_experts]; while a checkpoint is open */
};

int k3_ckpt_plan_init(struct k3_ckpt_plan *p, const struct k3_checkpoint *ck,
                      const struct k3_config *c, struct k3_err *err);
void k3_ckpt_plan_free(struct k3_ckpt_plan *p);

/* A stored tensor (in file) against what the config implies: dtype want or alt, and
 * shape; -1 with err naming both. */
int k3_tensor_check(const char *file, const char *name, enum k3_dtype dtype, int ndim,
                    const int64_t *shape, enum k3_dtype want, enum k3_dtype alt, int want_ndim,
                    const int64_t *want_shape, struct k3_err *err);
/* The other dtype a spec's tensor may be stored as (the sources disagree on the small F32
 * tensors: BF16 is accepted), or its own. */
enum k3_dtype k3_spec_alt_dtype(const struct k3_tensor_spec *s);
int64_t k3_spec_numel(const struct k3_tensor_spec *s);

struct k3_packed;

/* The trunk is held as segments (tensors.h).  Every small tensor is copied (as f32) into
 * `vectors` when the model opens and stays there; a segment's matrices are used in place
 * wherever the segment is bound: the memory a stream (stream.h) reads it into. */
struct k3_model {
    struct k3_config cfg;
    struct k3_weights w;
    struct k3_record_layout record;   /* byte layout of one expert record */
    struct k3_packed *packed;         /* packed drives, or a checkpoint folder seen as a
                                       * pack (packed->checkpoint) */
    struct k3_ckpt_plan plan;
    int *moe_index;                   /* [n_layers] position among MoE layers, or -1 */
    const uint8_t **segment_base;     /* [n_segments] where each is bound; NULL: not */
    float *vectors;                   /* every small tensor, f32 */
    enum k3_trunk_type trunk_type;    /* how the large matrices are held (trunk_type.h) */
    bool quantize_on_land;            /* a checkpoint's bf16 trunk held as Q8_0: each
                                       * segment quantized in place as it lands */
    bool from_checkpoint;             /* a checkpoint folder, not packed drives */
    const char *where;                /* packed drives: the first drive's folder */
};

/* Opening and closing go through a pack (engine/pack/model_open.h); these are the steps
 * it takes of the model's own.  k3_model_init: the config is parsed into m->cfg; the
 * record layout and the per-layer tables.  k3_model_alloc_vectors: the arena for every
 * small tensor (after the plan).  k3_model_checkpoint_vectors: each small tensor read
 * from its shard (the plan's entries still open).  k3_model_vector_prefix: the bytes of
 * segment seg up to the end of its last small tensor; k3_model_load_vectors copies them
 * (as f32) out of the segment's bytes at raw, v being where the next one goes.
 * k3_model_check_a_log: A_log's padding past num_heads is zero (where names the source).
 * k3_model_free: what the model holds, not its pack. */
int k3_model_init(struct k3_model *m, struct k3_err *err);
int k3_model_alloc_vectors(struct k3_model *m, struct k3_err *err);
int k3_model_checkpoint_vectors(struct k3_model *m, const struct k3_checkpoint *ck,
                                struct k3_err *err);
uint64_t k3_model_vector_prefix(const struct k3_ckpt_plan *p, int seg);
float *k3_model_load_vectors(struct k3_model *m, int seg, const uint8_t *raw, float *v);
int k3_model_check_a_log(const struct k3_model *m, const char *where, struct k3_err *err);
void k3_model_free(struct k3_model *m);

/* Holds the trunk as `want` (enum k3_trunk_type, or K3_TRUNK_AS_STORED), before a
 * stream opens: a checkpoint folder's bf16 trunk becomes Q8_0 segment by segment as it
 * lands (its reads and memory stay bf16's; pack it for half of both); a pack holds one
 * type, and opening it as the other is refused naming both.  -1 with err. */
int k3_model_use_trunk_type(struct k3_model *m, int want, struct k3_err *err);

/* Segment seg's bytes have just landed whole at base (read, checked): with
 * quantize_on_land its large matrices become Q8_0 in place (each at its offset). */
void k3_model_segment_landed(const struct k3_model *m, int seg, uint8_t *base);

/* The dtype trunk tensor i is multiplied in once its segment is bound. */
enum k3_dtype k3_model_held_dtype(const struct k3_model *m, int i);

/* Points every matrix of segment seg at base (the segment's bytes as laid out). */
void k3_model_bind_segment(struct k3_model *m, int seg, const uint8_t *base);

/* Object index of an expert record in the pack. */
uint64_t k3_model_record_object(const struct k3_model *m, int layer, int expert);

/* What names the model wherever it was opened from: XXH3-64 of config.json (as parsed and
 * re-serialized), the trunk tensor table (each tensor's name, dtype and shape) and every
 * small tensor's values as loaded (norm gains, biases, convs, gates' vectors).  A
 * checkpoint folder and any pack of it give the same id, and it costs no read beyond what
 * opening did.  It does not see the matrices or the experts: two models that differ only
 * there (a fine-tune that left every small tensor alone) share it.  A pack's model_xxh64
 * (pack_format.h) sees every byte, but a checkpoint folder has no such hash.  0 when out
 * of memory. */
uint64_t k3_model_id(const struct k3_model *m);

#endif
