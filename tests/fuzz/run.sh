#!/bin/bash
# Runs every libFuzzer harness in build/fuzz/bin for SECONDS each, seeded from a
# synthetic k3-tiny checkpoint and its pack; crashes go to build/fuzz/crashes/<harness>/.
# usage: tests/fuzz/run.sh [SECONDS]
set -euo pipefail
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
# a shard header's JSON, behind 8 bytes that give the data size the fuzzer checks against
shard=$(ls "$m"/*.safetensors | head -1)
len=$(od -An -t u8 -N 8 "$shard" | tr -d ' ')
{ head -c 8 /dev/zero
  dd if="$shard" iflag=skip_bytes,count_bytes skip=8 count="$len" bs=64K status=none; } >"$work/header.seed"
corpus fuzz_safetensors "$work/header.seed" "$m/model.safetensors.index.json"
corpus fuzz_config "$m/config.json"
corpus fuzz_manifest "$root"/tests/fuzz/regressions/fuzz_manifest/*
{ cat "$m/tiktoken.model"; printf '\0'; cat "$m/tokenizer_config.json"; } >"$work/tokenizer.seed"
corpus fuzz_tokenizer "$work/tokenizer.seed"

status=0
for bin in "$work"/bin/fuzz_*; do
  name=$(basename "$bin")
  mkdir -p "$work/crashes/$name"
  log="$work/$name.log"
  if "$bin" -max_total_time="$seconds" -rss_limit_mb=4096 -artifact_prefix="$work/crashes/$name/" \
       -print_final_stats=1 "$work/corpus/$name" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "$name: $runs executions in $seconds s, no crash"
  else
    echo "$name: CRASH, see $log and $work/crashes/$name/"
    status=1
  fi
done
exit $status
