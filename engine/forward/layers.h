/* The pieces of a K3 layer that carry the model's math (k3-model.md §3), each a
 * function of plain arrays so unit tests can check it on hand-made inputs.
 *
 * Owns: AttnRes mixing, the router, KDA's per-token recurrence, MLA attention in the
 * absorbed form, SiTU-GLU.  Does not own: projections (kernels.h), the layer loop and
 * buffers (forward.c), expert I/O (expert_store.h).
 */
#ifndef K3_LAYERS_H
#define K3_LAYERS_H

#include <stdint.h>

#include "engine/model/config.h"
#include "engine/model/model.h"

/* AttnRes: out = Σ_j softmax_j(N(c_j)·key) c_j over the n candidates c_0..c_{n-1}.
 * Mixes the raw candidates.  out may alias any candidate (it is written element by
 * element after all scores are known). */
void k3_attn_res_mix(float *out, const float *const *cands, int n, const float *key, int H,
                     float eps);

/* Router (§3.7), as Moonshot's gate: logits [E] → idx[k] in selection order (descending
 * biased score, lower index first on ties; only the kept groups' experts when grouped,
 * k3_route_grouped) and their weights (unbiased sigmoid, renormalized unless top_k is 1,
 * scaled).  scratch: [E] floats. */
void k3_route(const struct k3_config *c, const float *logits, const float *bias, int *idx,
              float *weight, float *scratch);
/* The same selection for any k <= k3_route_choosable(c) (router prediction takes k' of
 * them). */
void k3_route_k(const struct k3_config *c, const float *logits, const float *bias, int k,
                int *idx, float *weight, float *scratch);
/* The weights the router gives experts idx[0..k) chosen elsewhere (a replayed trace):
 * their unbiased scores, renormalized and scaled as k3_route's own. */
void k3_route_weigh(const struct k3_config *c, const float *logits, const int *idx, int k,
                    float *weight);

/* KDA decay gate of one channel: g = lb·σ(exp(a_log_head)·u), in (lb, 0). */
float k3_kda_gate(float u, float a_log_head, float lower_bound);

/* One delta-rule step for one head (§3.4.6).  S [d][d] (row = key index), alpha [d]
 * decays, k and q L2-normalized, beta in (0, 1).  Writes o [d] from the updated state. */
void k3_kda_head_step(float *S, const float *alpha, const float *k, const float *v,
                      const float *q, float beta, float *o, int d);

/* The KDA recurrence of head h for one token, after the projections:
 * q, k, v [P]: raw projections (the head's channels overwritten); u [P]: f_b(f_a h) +
 * dt_bias; beta_logit [heads]; z [P]: g_proj output.  Updates the head's state
 * [d][d] of state [heads][d][d] and its channels of ring [3][P][W-1] (the previous raw
 * inputs of q, k, v).  Writes the head's part of gated [P], the normalized and gated
 * head outputs that o_proj takes.  Heads share nothing, so they may run on any threads
 * in any order. */
void k3_kda_head(const struct k3_config *c, const struct k3_kda_weights *w, float *state,
                 float *ring, float *q, float *k, float *v, const float *u,
                 const float *beta_logit, const float *z, float *gated, int h);

/* MLA attention of one query's heads [h0, h0 + nh), absorbed form (§3.5.6).
 * q [heads][nope + rope]: the query's heads, each (q_nope, q_pe); cache rows
 * [n_ctx][kv_lora + rope] hold (c, k_pe); kv_b: kv_b_proj, [heads][nope + v][kv_lora].
 * Writes out [heads][v] for the heads asked.  The heads share one walk over the cache
 * (each cache row is read once for all of them), and each head's arithmetic is the same
 * whatever nh: the bytes do not depend on how heads are grouped.
 * scratch: nh * (n_ctx + 2 * kv_lora) floats. */
void k3_mla_heads(const struct k3_config *c, const float *q, const float *cache, int n_ctx,
                  const uint16_t *kv_b, int h0, int nh, float *out, float *scratch);
/* How many heads may share one walk over a cache of up to max_ctx rows: all of them,
 * unless their scratch (mostly scores) would pass 4 MiB a thread. */
int k3_mla_heads_per_walk(const struct k3_config *c, int max_ctx);

#endif
