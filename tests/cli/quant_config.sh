#!/bin/bash
# config.json's quantization_config (engine/model/quant_config.h): synth writes K3's block
# in text_config, also for a config file that has none, so that Hugging Face loaders unpack
# the experts; a checkpoint without the block is read, to the same bytes; one whose block
# describes other bytes (a re-quantized upload) is refused, the key and value named, by
# run and pack alike.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/quant-config"
rm -rf "$d" && mkdir -p "$d"
m=$(tiny_model)

# K3's block as released (compressed-tensors MXFP4: E2M1 in groups of 32, uint8 E8M0
# scales), written out here on its own so that a change to the engine's copy shows.
cat >"$d/k3-block.json" <<'EOF'
{"config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "input_activations": null,
   "output_activations": null, "targets": ["Linear"],
   "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 32,
     "num_bits": 4, "observer": "minmax", "observer_kwargs": {}, "scale_dtype": "torch.uint8",
     "strategy": "group", "symmetric": true, "type": "float", "zp_dtype": null}}},
 "format": "mxfp4-pack-quantized", "global_compression_ratio": null,
 "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
   "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"],
 "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"}
EOF
jq -e --slurpfile want "$d/k3-block.json" '.text_config.quantization_config == $want[0]' \
  "$m/config.json" >/dev/null || fail "synth k3-tiny: text_config.quantization_config is not K3's"
jq -e 'has("quantization_config") | not' "$m/config.json" >/dev/null ||
  fail "synth k3-tiny: a root quantization_config (K3 ships it in text_config only)"

# A config file without the block: synth adds K3's.
jq 'del(.text_config.quantization_config)' "$m/config.json" >"$d/bare.json"
"$K3" synth --config "$d/bare.json" --seed 1 --out "$d/from-bare" -q || fail "synth --config bare.json"
jq -e --slurpfile want "$d/k3-block.json" '.text_config.quantization_config == $want[0]' \
  "$d/from-bare/config.json" >/dev/null || fail "synth of a config without the block wrote none"

# Without the block (a checkpoint synth wrote before it wrote one): the same logits.
args=(--ids 5,17,300,1200 -n 4 --print-ids --ram trunk)
"$K3" run -m "$m" "${args[@]}" -q --logits-out "$d/want.f32" >"$d/want.ids" 2>"$d/err" ||
  fail "run: $(cat "$d/err")"
cp -r "$m" "$d/none"
jq 'del(.text_config.quantization_config)' "$m/config.json" >"$d/none/config.json"
same_as_want "no quantization_config" -m "$d/none"

# A block that says other bytes: refused, by run and by pack.
wrong() { # wrong NAME JQ-EDIT: a copy of the tiny model whose config.json has the edit
  cp -r "$m" "$d/$1"
  jq "$2" "$m/config.json" >"$d/$1/config.json"
  echo "$d/$1"
}
w=$(wrong nvfp4 '.text_config.quantization_config.format = "nvfp4-pack-quantized"')
expect_error 1 "$w/config.json: text_config.quantization_config.format: \"nvfp4-pack-quantized\", expected \"mxfp4-pack-quantized\"" \
  "$K3" run -m "$w" --ids 5 -n 1
expect_error 1 "text_config.quantization_config.format: \"nvfp4-pack-quantized\"" \
  "$K3" pack --checkpoint "$w" --drives "$d/drive-nvfp4" -q
w=$(wrong int4 '.text_config.quantization_config.config_groups.group_0.weights.num_bits = 8 |
                .text_config.quantization_config.config_groups.group_0.weights.type = "int"')
expect_error 1 "text_config.quantization_config.config_groups.group_0.weights.num_bits: 8, expected 4" \
  "$K3" run -m "$w" --ids 5 -n 1
w=$(wrong group16 '.text_config.quantization_config.config_groups.group_0.weights.group_size = 16')
expect_error 1 "weights.group_size: 16, expected 32" "$K3" run -m "$w" --ids 5 -n 1
# A re-saved config whose root block (where K3's config class copies text_config's) differs.
w=$(wrong root '.quantization_config = (.text_config.quantization_config | .quant_method = "fp8")')
expect_error 1 "$w/config.json: quantization_config.quant_method: \"fp8\", expected \"compressed-tensors\"" \
  "$K3" run -m "$w" --ids 5 -n 1
finish
