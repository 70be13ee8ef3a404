#!/bin/bash
# Bad input to `run` and `synth`: each case is a one-line error naming the file and the
# field or value, a non-zero exit, no crash, and no logits file left behind.
source "$(dirname "$0")/lib.sh"
ids=5,17,300
logits="$K3_TEST_TMP/bad-input.f32"
rm -f "$logits" "$logits.partial"
run() { "$K3" run --ids "$ids" -n 2 -q --logits-out "$logits" "$@"; }

d=$(tiny_copy missing-shard)
rm "$d/model-00002-of-00003.safetensors"
expect_error 1 "model-00002-of-00003.safetensors: No such file" run -m "$d"

d=$(tiny_copy truncated-shard)
truncate -s -1000 "$d/model-00003-of-00003.safetensors"
expect_error 1 "model-00003-of-00003.safetensors: truncated" run -m "$d"
expect_error 1 "model-00003-of-00003.safetensors: truncated" run -m "$d" --ram floor --io pread --no-cache --sync

d=$(tiny_copy wrong-shape)   # q_a_proj of layer 3: [64, 256] declared as [256, 64]
perl -0777 -pi -e 's/(layers\.3\.self_attn\.q_a_proj\.weight":\{"dtype":"BF16","shape":\[)64,256/${1}256,64/' \
  "$d/model-00001-of-00003.safetensors"
expect_error 1 "layers.3.self_attn.q_a_proj.weight: shape [256, 64], expected [64, 256]" run -m "$d"

d=$(tiny_copy wrong-dtype)   # an expert scale declared I8 instead of U8 (same size)
perl -0777 -pi -e 's/(layers\.1\.block_sparse_moe\.experts\.5\.w2\.weight_scale":\{"dtype":")U8/${1}I8/' \
  "$d/model-00001-of-00003.safetensors"
expect_error 1 "experts.5.w2.weight_scale: dtype I8, expected U8" run -m "$d"

# A_log ships padded to head_dim; the engine reads one value per head, the first num_heads
# (4 in k3-tiny), and the padding must be zero.
d=$(tiny_copy a-log-padding)
a_log=language_model.model.layers.0.self_attn.A_log
perl -MJSON::PP -e '
  my ($f, $t, $i, $v) = @ARGV;   # writes float v at index i of tensor t in shard f
  open(my $h, "+<:raw", $f) or die "$f: $!";
  read($h, my $n, 8); my $len = unpack("Q<", $n);
  read($h, my $j, $len); my $at = 8 + $len + decode_json($j)->{$t}{data_offsets}[0] + 4 * $i;
  seek($h, $at, 0); print $h pack("f<", $v); close($h) or die "$f: $!";' \
  "$d/$(jq -r --arg t "$a_log" '.weight_map[$t]' "$d/model.safetensors.index.json")" "$a_log" 5 0.25
expect_error 1 "tensor $a_log: 0.25 at index 5, where the padding past num_heads 4 must be zero" run -m "$d"

d=$(tiny_copy bad-json)
printf '{"architectures": [' >"$d/config.json"
expect_error 1 "config.json: line 1: malformed JSON" run -m "$d"

d=$(tiny_copy bad-index)
printf '{"weight_map": {"a": 1}}' >"$d/model.safetensors.index.json"
expect_error 1 "model.safetensors.index.json: weight_map.a" run -m "$d"

d=$(tiny_copy outside-family)
sed -i 's/"kimi_linear"/"deepseek_v3"/' "$d/config.json"
expect_error 1 "config.json: text_config.model_type" run -m "$d"

d=$(tiny_copy contradiction)
sed -i 's/"full_attn_layers": \[$/"full_attn_layers": [1,/' "$d/config.json"
expect_error 1 "config.json: text_config.linear_attn_config.full_attn_layers: layer 1 is listed twice" run -m "$d"

m=$(tiny_model)
expect_error 1 "token id 2048 (position 1) is outside the vocabulary [0, 2048)" \
  "$K3" run -m "$m" --ids 5,2048 -n 2 -q --logits-out "$logits"
expect_error 2 "--ids" "$K3" run -m "$m" --ids 5,x,7
expect_error 2 "-n: -1 is outside" "$K3" run -m "$m" --ids 5 -n -1
expect_error 2 "--top-p: 2 is outside" "$K3" run -m "$m" --ids 5 --top-p 2
expect_error 2 "--bogus: unknown option" "$K3" run -m "$m" --ids 5 --bogus
expect_error 1 "/nonexistent/config.json: No such file" "$K3" run -m /nonexistent --ids 5
expect_error 1 "--out $m: already exists" "$K3" synth --config k3-tiny --out "$m"
expect_error 1 "--config k3-huge: not a preset" "$K3" synth --config k3-huge --out "$K3_TEST_TMP/x"

[[ -e "$logits" || -e "$logits.partial" ]] && fail "a logits file was left behind"
finish
