/* config.json's quantization_config: the compressed-tensors block that tells Hugging Face
 * loaders how K3's routed experts are stored.
 *
 * Owns: the block as K3 ships it (K3_QUANT_CONFIG_JSON: presets and synth write it), and
 * the check that a block present in a config describes those bytes: compressed-tensors
 * "mxfp4-pack-quantized", E2M1 nibbles in groups of 32 under a uint8 E8M0 scale.
 * Does not own: the expert tensors' names, dtypes and shapes (model.c checks every one of
 * them), the MXFP4 arithmetic (engine/kernels/mxfp4.h).
 *
 * K3 ships the block in text_config (its config class copies it to the root when loaded,
 * so a re-saved config may carry it there too); both places are checked.  A config with no
 * block at all is read: the tensors alone pin the format (U8 weight_packed [out, in/2] and
 * U8 weight_scale [out, in/32], checked by name, dtype and shape), K3's own download always
 * has one, and checkpoints and packs synthesized before synth wrote it have none.  A block
 * that says anything else (a re-quantized upload: NVFP4, int4 pack-quantized, another
 * group size) is refused with the key and value named, rather than its bytes misread.
 */
#ifndef K3_QUANT_CONFIG_H
#define K3_QUANT_CONFIG_H

#include <jansson.h>

#include "engine/base/err.h"

/* K3's text_config.quantization_config, as released (keys sorted, as Hugging Face writes
 * config.json).  Its scope is K3's too: "targets": ["Linear"] with an ignore list that
 * leaves out the latent MoE projections, which ship BF16 (k3-model.md §1.1). */
#define K3_QUANT_CONFIG_JSON                                                                  \
    "{\"config_groups\": {\"group_0\": {\"format\": \"mxfp4-pack-quantized\", "               \
    "\"input_activations\": null, \"output_activations\": null, \"targets\": [\"Linear\"], "  \
    "\"weights\": {\"actorder\": null, \"block_structure\": null, \"dynamic\": false, "       \
    "\"group_size\": 32, \"num_bits\": 4, \"observer\": \"minmax\", \"observer_kwargs\": {}, " \
    "\"scale_dtype\": \"torch.uint8\", \"strategy\": \"group\", \"symmetric\": true, "        \
    "\"type\": \"float\", \"zp_dtype\": null}}}, \"format\": \"mxfp4-pack-quantized\", "      \
    "\"global_compression_ratio\": null, \"ignore\": [\"re:.*self_attn.*\", "                 \
    "\"re:.*shared_experts.*\", \"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\", "             \
    "\"re:.*lm_head.*\", \"re:.*vision_tower.*\", \"re:.*mm_projector.*\"], "                 \
    "\"kv_cache_scheme\": null, \"quant_method\": \"compressed-tensors\", "                   \
    "\"quantization_status\": \"compressed\"}"

/* Checks root's and text's quantization_config, where present (see above); file names the
 * config in the message. */
int k3_quant_config_check(const json_t *root, const json_t *text, const char *file,
                          struct k3_err *err);

#endif
