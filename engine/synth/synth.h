/* `synth`: a checkpoint folder in K3's shipped layout, with seeded random weights.
 *
 * Owns: writing config.json, model.safetensors.index.json, the shards (trunk bf16/f32,
 * routed experts as MXFP4 weight_packed/weight_scale; the values from weights.h) and,
 * through vocab.h, the tiktoken.model and tokenizer_config.json.  The same config and seed give the same
 * bytes.  The folder appears complete or not at all (written aside, then renamed).
 * Does not own: the config (model/config.h), reading a checkpoint (model/checkpoint.h).
 */
#ifndef K3_SYNTH_H
#define K3_SYNTH_H

#include <stdint.h>

#include "engine/model/config.h"
#include "engine/base/err.h"

/* Where synth's progress goes: fn(ctx, line) once per line (no newline), e.g. one per
 * shard written.  The library never prints; the caller shows the lines or not. */
struct k3_synth_notes {
    void (*fn)(void *ctx, const char *line);
    void *ctx;
};

/* Writes the checkpoint of cfg with weights from seed into out_dir, which must not
 * exist.  notes: NULL for none. */
int k3_synth(const struct k3_config *cfg, uint64_t seed, const char *out_dir,
             const struct k3_synth_notes *notes, struct k3_err *err);

#endif
