/* The forward pass: a session runs tokens through the model.
 *
 * Owns: per-conversation state (KDA recurrent state and conv rings, the MLA latent
 * cache, the position), the scratch buffers (allocated once per session, never per
 * token), and the layer loop with K3's Attention Residuals bookkeeping (§3.2).
 * A prompt runs in chunks of up to K3_CHUNK tokens, layer by layer, so each layer's
 * weights and experts are read once per chunk; every value a token gets is computed in
 * the same order as in one-token decode, so prefill and decode agree bytewise.
 * Does not own: weights (model.h), expert I/O (experts.h), sampling.
 */
#ifndef K3_FORWARD_H
#define K3_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/stream/experts.h"
#include "engine/model/model.h"
#include "engine/base/trace.h"

#define K3_CHUNK 32

/* Called with x after each layer (layer = 0..L-1) and the final mixed h (layer = L),
 * for every token; pos is the token's absolute position. */
typedef void (*k3_layer_hook)(void *ctx, int pos, int layer, const float *x, int H);

struct k3_session_scratch;
struct k3numa_plan;
struct k3numa_teams;

/* Where the trunk comes from when it is not all resident (stream.h): segment() makes a
 * segment's matrices available and bound before it is used; embed() writes the f32
 * embedding rows of T tokens. */
struct k3_trunk_source {
    int (*segment)(void *ctx, int seg, struct k3_err *err);
    int (*embed)(void *ctx, const int32_t *tokens, int T, float *out, struct k3_err *err);
    void *ctx;
};

/* Router prediction (decode): while layer l computes, layer l+1's router is applied to a
 * hidden state of layer l and its top-k' experts are prefetched. */
enum k3_predict_from {
    K3_PREDICT_OFF,
    K3_PREDICT_MOE_INPUT,      /* layer l's MoE input, normalized with its own gain */
    K3_PREDICT_MOE_INPUT_NEXT, /* layer l's mixed MoE input, normalized with l+1's gain */
    K3_PREDICT_LAYER_OUTPUT,   /* layer l's output, normalized with l+1's gain (later) */
};

struct k3_session {
    const struct k3_model *m;
    struct k3_expert_store *experts;
    int pos;                 /* tokens processed so far */
    int max_ctx;             /* positions the MLA cache holds */
    float **kda_state;       /* [L] → [kda_heads][d][d], NULL on MLA layers */
    float **conv_ring;       /* [L] → [3][P][W-1] raw inputs of q, k, v */
    float **mla_cache;       /* [L] → [max_ctx][kv_lora + rope], NULL on KDA layers */
    const struct k3_trunk_source *trunk; /* NULL: every segment resident */
    enum k3_predict_from predict;
    int predict_k;           /* experts prefetched per layer */
    struct k3_trace *trace;  /* NULL: none */
    struct k3_session_scratch *s;
    struct k3numa_teams *teams; /* who computes routed experts (numa/teams.h) */
    k3_layer_hook hook;
    void *hook_ctx;
};

int k3_session_init(struct k3_session *ss, const struct k3_model *m,
                    struct k3_expert_store *experts, int max_ctx, struct k3_err *err);
/* As k3_session_init, with a compute team per team of plan (numa/plan.h; NULL: one team
 * of every OpenMP thread).  Each routed expert is computed by the team that
 * k3_landed.team names, all teams at once; the output bytes do not depend on the plan. */
int k3_session_init_placed(struct k3_session *ss, const struct k3_model *m,
                           struct k3_expert_store *experts, int max_ctx,
                           const struct k3numa_plan *plan, struct k3_err *err);
void k3_session_free(struct k3_session *ss);
/* Routed experts team `team` has computed since the session began (0 for no such team). */
uint64_t k3_session_team_experts(const struct k3_session *ss, int team);

/* Runs n tokens at positions pos..pos+n-1.  logits: NULL, or [n][vocab] when
 * all_logits, or [vocab] for the last token only. */
int k3_forward(struct k3_session *ss, const int32_t *tokens, int n, float *logits,
               bool all_logits, struct k3_err *err);

/* Bytes of scratch a session allocates (activations of one chunk, attention rows, each
 * team's expert buffers). */
uint64_t k3_session_scratch_bytes(const struct k3_config *c, int max_ctx, int threads, int teams);

/* Bytes of state a session of max_ctx positions keeps (KDA + conv + MLA cache). */
uint64_t k3_session_state_bytes(const struct k3_config *c, int max_ctx);

#endif
