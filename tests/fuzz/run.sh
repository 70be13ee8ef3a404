#!/bin/bash
# Runs every libFuzzer harness in build/fuzz/bin for SECONDS each, seeded from a
# synthetic k3-tiny checkpoint and its pack and from the committed corpus of each
# harness (tests/fuzz/regressions/<harness>/, replayed by make test); crashes go to
# build/fuzz/crashes/<harness>/.
# usage: tests/fuzz/run.sh [SECONDS]
set -euo pipefail
shopt -s nullglob
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
work="$root/build/fuzz"
k3="$root/k3-uring"
seeds="$work/seeds"
if [[ ! -d "$seeds/pack" ]]; then
  rm -rf "$seeds" && mkdir -p "$seeds/pack/a" "$seeds/pack/b"
  "$k3" synth --config k3-tiny --seed 1 --out "$seeds/model" -q
  "$k3" pack --checkpoint "$seeds/model" --drives "$seeds/pack/a,$seeds/pack/b" --replicas 2 -q 2>/dev/null
fi
m="$seeds/model"
corpus() { # harness files...
  local dir="$work/corpus/$1"; shift
  mkdir -p "$dir"
  for f in "$@"; do cp "$f" "$dir/"; done
}
for dir in "$root"/tests/fuzz/regressions/*/; do
  corpus "$(basename "$dir")" "$dir"*
done
# fuzz_safetensors is seeded from the committed corpus alone: small headers of a real
# shard's tensors.  A whole k3-tiny shard header (577 KB of JSON, 1,666 tensors) made
# every execution cost ~30 ms under ASan: 30 executions a second.
corpus fuzz_config "$m/config.json"
corpus fuzz_manifest "$root"/tests/fuzz/regressions/fuzz_manifest/*
{ cat "$m/tiktoken.model"; printf '\0'; cat "$m/tokenizer_config.json"; } >"$work/tokenizer.seed"
corpus fuzz_tokenizer "$work/tokenizer.seed"

status=0
for bin in "$work"/bin/fuzz_*; do
  name=$(basename "$bin")
  mkdir -p "$work/crashes/$name"
  log="$work/$name.log"
  # Headers are about structure, not scale; the cap also keeps the large inputs of
  # corpora grown before this cap from slowing every run.
  max_len=()
  [[ $name == fuzz_safetensors ]] && max_len=(-max_len=16384)
  if "$bin" -max_total_time="$seconds" -rss_limit_mb=4096 -artifact_prefix="$work/crashes/$name/" \
       "${max_len[@]}" -print_final_stats=1 "$work/corpus/$name" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    echo "$name: $runs executions in $seconds s ($rate a second), no crash"
  else
    echo "$name: CRASH, see $log and $work/crashes/$name/"
    status=1
  fi
done
exit $status
