/* `synth`: a checkpoint folder in K3's shipped layout, with seeded random weights.
 *
 * Owns: writing config.json, model.safetensors.index.json, the shards (trunk bf16/f32,
 * routed experts as MXFP4 weight_packed/weight_scale) and, through the tokenizer, the
 * tiktoken.model and tokenizer_config.json.  The same config and seed give the same
 * bytes.  The folder appears complete or not at all (written aside, then renamed).
 */
#ifndef K3_SYNTH_H
#define K3_SYNTH_H

#include <stdint.h>

#include "engine/model/config.h"
#include "engine/base/err.h"

int k3_synth(const struct k3_config *cfg, uint64_t seed, const char *out_dir, bool quiet,
             struct k3_err *err);

#endif
