#!/bin/bash
# synth: the same config and seed give the same bytes; another seed gives other weights
# but the same tokenizer and config; the layout is K3's as shipped.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/synth-bytes"
rm -rf "$d" && mkdir -p "$d"
"$K3" synth --config k3-tiny --seed 3 --out "$d/a" -q || fail "synth a"
"$K3" synth --config k3-tiny --seed 3 --out "$d/b" -q || fail "synth b"
"$K3" synth --config k3-tiny --seed 4 --out "$d/c" -q || fail "synth c"
diff -r "$d/a" "$d/b" >/dev/null || fail "seed 3 twice gave different bytes"
cmp -s "$d/a/model-00002-of-00003.safetensors" "$d/c/model-00002-of-00003.safetensors" &&
  fail "seeds 3 and 4 gave the same weights"
cmp -s "$d/a/tiktoken.model" "$d/c/tiktoken.model" || fail "the tokenizer depends on the seed"
for f in config.json model.safetensors.index.json tiktoken.model tokenizer_config.json; do
  [[ -s "$d/a/$f" ]] || fail "$f missing"
done
grep -q '"text_config"' "$d/a/config.json" || fail "config.json has no text_config"
grep -q '"language_model.lm_head.weight"' "$d/a/model.safetensors.index.json" || fail "lm_head not indexed"
grep -q 'experts.63.w2.weight_scale' "$d/a/model.safetensors.index.json" || fail "experts not indexed"
[[ $(ls "$d/a"/*.safetensors | wc -l) -ge 3 ]] || fail "fewer than 3 shards"
ls "$d" | grep -q partial && fail "a partial folder was left behind"
finish
