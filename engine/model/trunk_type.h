/* The trunk's type: which of a bf16 checkpoint's trunk matrices are held as Q8_0.
 *
 * Owns: the names (`--trunk-type bf16|q8_0`), the rule by tensor role, and the type a
 * tensor plan shows.  Does not own: the Q8_0 format and arithmetic (kernels/q8_0.h), when
 * quantization happens (pack: as the pack is written; -m DIR: as each segment lands,
 * model.h).
 *
 * The rule (q8_0): the large projections every token multiplies, where the bytes are:
 * KDA q/k/v/g/o, MLA q_a/q_b/kv_a/g/o, the dense MLP (gate, up, down), the shared
 * experts (gate, up, down), the latent MoE's down and up projections, and lm_head; each
 * only when its rows are whole Q8_0 blocks (in % 32 == 0; every named config's are).
 * Stay bf16 (as shipped):
 *   - the embedding: a token reads one row of it, never a mat-vec, so its bytes cost
 *     nothing per token, and its bf16 row is the model's exact input (quantizing would
 *     only halve its memory: 2.35 GB of full K3's, a resident cost the budget already
 *     lets stream);
 *   - the routers: their logits choose the experts, a discrete decision a small error
 *     can flip;
 *   - the KDA decay gate (f_a, f_b) and β logits (b_proj): small, and they feed
 *     exponentials and sigmoids;
 *   - MLA's kv_b: absorbed into the query head by head (forward/layers.c) as bf16 rows;
 *   - every vector (norm gains, biases, convs, AttnRes keys): f32 already.
 */
#ifndef K3_TRUNK_TYPE_H
#define K3_TRUNK_TYPE_H

#include <stdbool.h>

#include "engine/base/err.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensors.h"

enum k3_trunk_type { K3_TRUNK_BF16, K3_TRUNK_Q8_0 };

/* -1 in an option: the type the pack holds (bf16 for a checkpoint folder). */
#define K3_TRUNK_AS_STORED (-1)

/* "bf16" or "q8_0" into *t: 0, or -1 with err naming what is known. */
int k3_trunk_type_parse(const char *name, enum k3_trunk_type *t, struct k3_err *err);
const char *k3_trunk_type_name(enum k3_trunk_type t);

/* The spec's role is one Q8_0 takes (the rule above). */
bool k3_spec_takes_q8_0(const struct k3_tensor_spec *s);

/* The dtype a spec is held in under trunk type t. */
enum k3_dtype k3_spec_trunk_dtype(const struct k3_tensor_spec *s, enum k3_trunk_type t);

/* The trunk type n specs' dtypes show: 0, or -1 with err (naming file) when they mix
 * types or hold a matrix in a dtype the rule does not give it. */
int k3_trunk_type_of(const struct k3_tensor_spec *specs, const enum k3_dtype *dtypes, int n,
                     enum k3_trunk_type *t, const char *file, struct k3_err *err);

#endif
