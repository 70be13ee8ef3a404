/* The tensor graph of a K3-family checkpoint, derived from its config.
 *
 * Owns: the one table of every trunk tensor (name, dtype, shape, how synth initializes
 * it, where the loader puts it) and the six tensors of a routed expert, plus the byte
 * layout of an expert record (w1, w3, w2 packed nibbles and E8M0 scales).  `synth`
 * writes from this table and the loader validates against it, so the two cannot drift.
 * Does not own: reading or writing files.
 */
#ifndef K3_TENSORS_H
#define K3_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/config.h"
#include "engine/model/safetensors.h"

#define K3_TENSOR_PREFIX "language_model.model."

/* How a trunk tensor is stored and kept. */
enum k3_tensor_kind {
    K3_T_MATRIX, /* BF16 as shipped; kept as bf16 and multiplied directly */
    K3_T_GAIN,   /* BF16 RMSNorm gain or AttnRes vector; widened to f32 at load */
    K3_T_F32,    /* F32 as shipped (A_log, dt_bias, convs, o_norm, bias); BF16 accepted */
};

/* How `synth` fills a tensor (k3-model.md §6.1 suggestions, scaled by fan-in). */
enum k3_init {
    K3_INIT_LINEAR,   /* N(0, gain / sqrt(fan_in)) */
    K3_INIT_EMBED,    /* N(0, 1) */
    K3_INIT_LM_HEAD,  /* N(0, 4 / sqrt(H)): logits with a real spread */
    K3_INIT_GAIN,     /* U(0.8, 1.2) */
    K3_INIT_RES_PROJ, /* N(0, H^-1/2) */
    K3_INIT_A_LOG,    /* log U(1, 16) on live heads, 0 on the padding */
    K3_INIT_DT_BIAS,  /* N(0, 0.5) */
    K3_INIT_CONV,     /* N(0, 0.25) */
    K3_INIT_BIAS,     /* N(0, 0.05) */
};

/* Which weight a table entry loads into (see model.h). */
enum k3_slot {
    K3_SLOT_EMBED, K3_SLOT_LM_HEAD, K3_SLOT_FINAL_NORM, K3_SLOT_OUT_RES_NORM, K3_SLOT_OUT_RES_PROJ,
    K3_SLOT_INPUT_NORM, K3_SLOT_POST_ATTN_NORM, K3_SLOT_ATTN_RES_NORM, K3_SLOT_ATTN_RES_PROJ,
    K3_SLOT_MLP_RES_NORM, K3_SLOT_MLP_RES_PROJ,
    K3_SLOT_KDA_Q, K3_SLOT_KDA_K, K3_SLOT_KDA_V, K3_SLOT_KDA_QCONV, K3_SLOT_KDA_KCONV,
    K3_SLOT_KDA_VCONV, K3_SLOT_KDA_FA, K3_SLOT_KDA_FB, K3_SLOT_KDA_B, K3_SLOT_KDA_ALOG,
    K3_SLOT_KDA_DTBIAS, K3_SLOT_KDA_G, K3_SLOT_KDA_ONORM, K3_SLOT_KDA_O,
    K3_SLOT_MLA_QA, K3_SLOT_MLA_QANORM, K3_SLOT_MLA_QB, K3_SLOT_MLA_KVA, K3_SLOT_MLA_KVANORM,
    K3_SLOT_MLA_KVB, K3_SLOT_MLA_G, K3_SLOT_MLA_O,
    K3_SLOT_DENSE_GATE, K3_SLOT_DENSE_UP, K3_SLOT_DENSE_DOWN,
    K3_SLOT_ROUTER, K3_SLOT_ROUTER_BIAS, K3_SLOT_SHARED_GATE, K3_SLOT_SHARED_UP,
    K3_SLOT_SHARED_DOWN, K3_SLOT_LATENT_DOWN, K3_SLOT_LATENT_NORM, K3_SLOT_LATENT_UP,
};

struct k3_tensor_spec {
    char name[160];
    enum k3_tensor_kind kind;
    enum k3_init init;
    int layer;             /* -1 for global tensors */
    enum k3_slot slot;
    int ndim;
    int64_t shape[3];
    int64_t fan_in;        /* for K3_INIT_LINEAR */
    int live;              /* K3_INIT_A_LOG: entries that are real heads */
};

/* Every trunk tensor the config implies, in a fixed order (global, then layer by
 * layer).  *specs is malloc'd. */
int k3_trunk_specs(const struct k3_config *c, struct k3_tensor_spec **specs, int *n);

/* The dtype a spec is shipped in (synth writes it; the loader also accepts BF16 for
 * K3_T_F32, as the sources disagree on those small tensors). */
enum k3_dtype k3_spec_dtype(const struct k3_tensor_spec *s);

/* ---- trunk segments -------------------------------------------------------------- */

/* The trunk is stored and loaded as segments: 0 the embedding, 1 + l layer l, L + 1 the
 * output tensors (final norm, output AttnRes, lm_head).  Inside a segment the vectors
 * (norm gains, biases, convs...) come first, then the matrices, each group in spec order
 * and every tensor at a K3_SEGMENT_TENSOR_ALIGN-aligned offset. */
#define K3_SEGMENT_TENSOR_ALIGN 64

/* Segment ids by name: the numbering above, which the pack format freezes. */
#define K3_SEG_EMBED 0
static inline int k3_seg_layer(int layer) { return 1 + layer; }
static inline int k3_seg_output(const struct k3_config *c) { return c->n_layers + 1; }
static inline int k3_seg_count(const struct k3_config *c) { return c->n_layers + 2; }

struct k3_trunk_layout {
    int n_segments;
    uint64_t *segment_bytes; /* [n_segments] */
    int *segment;            /* [n_specs] */
    uint64_t *offset;        /* [n_specs] inside the segment */
};

/* Lays out n specs whose stored sizes are bytes[i] (the dtype found, not assumed). */
int k3_trunk_layout_init(struct k3_trunk_layout *t, const struct k3_config *c,
                         const struct k3_tensor_spec *specs, int n, const uint64_t *bytes);
void k3_trunk_layout_free(struct k3_trunk_layout *t);

/* ---- routed experts ------------------------------------------------------------ */

enum k3_expert_part {
    K3_W1_PACKED, K3_W1_SCALE, /* gate:  [I, H_l/2], [I, H_l/32] */
    K3_W3_PACKED, K3_W3_SCALE, /* up:    [I, H_l/2], [I, H_l/32] */
    K3_W2_PACKED, K3_W2_SCALE, /* down:  [H_l, I/2], [H_l, I/32] */
    K3_EXPERT_PARTS
};

/* Byte layout of one expert record: the six tensors back to back in part order. */
struct k3_record_layout {
    uint64_t off[K3_EXPERT_PARTS];
    uint64_t len[K3_EXPERT_PARTS];
    int64_t rows[K3_EXPERT_PARTS], cols[K3_EXPERT_PARTS]; /* shape as stored (U8) */
    uint64_t bytes;
};

void k3_record_layout_init(struct k3_record_layout *r, const struct k3_config *c);

/* "language_model.model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight_packed" etc. */
void k3_expert_tensor_name(char *buf, size_t len, int layer, int expert, enum k3_expert_part p);

#endif
