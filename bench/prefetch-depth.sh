#!/bin/bash
# How deep prefetches may queue on each drive: k3-bench packed on DRIVES throttled drives,
# then rounds of --predict on at each --prefetch-depth in DEPTHS and of --predict off, all
# --no-cache (every record read every token).  Each prefetch chunk in flight is one a
# demand read may find ahead of it; deeper windows stream prefetches faster on fast drives
# and waste more when predictions miss.  Prints s/token, MB read per token and stall.
# usage: bench/prefetch-depth.sh CHECKPOINT [DRIVES] [MBPS] [ROUNDS] [DEPTHS]
set -euo pipefail
ckpt=${1:?usage: bench/prefetch-depth.sh CHECKPOINT [DRIVES] [MBPS] [ROUNDS] [DEPTHS]}
drives=${2:-8}
mbps=${3:-100}
rounds=${4:-3}
depths=${5:-1 2 4}
k3=$(realpath "${K3:-./k3-uring}")
root=$(cd "$(dirname "$0")/.." && pwd)
name=prefetch-depth
echo "prefetch-depth.sh: checkpoint $ckpt, $drives drives at $mbps MB/s, $rounds rounds, depths $depths" >&2

size=$(( $(du -sb "$ckpt" | cut -f1) / drives / 1000000000 + 3 ))G
list=$("$root/bench/emulate.sh" up --drives "$drives" --size "$size" --mbps "$mbps" --name $name | tail -1)
trap '"$root/bench/emulate.sh" down --name $name >/dev/null 2>&1 || true' EXIT
"$k3" pack --checkpoint "$ckpt" --drives "$list" -q

run() { # label args...
  local label=$1; shift
  sync; echo 3 >/proc/sys/vm/drop_caches
  "$root/bench/emulate.sh" exec --name $name -- "$k3" --drives "$list" --ids 5,17,300,1200 -n 6 \
    --ignore-eos --print-ids --no-cache "$@" 2>&1 >/dev/null | tail -1 |
    sed -n "s/.*, \([0-9.]*\) s\/token; \([0-9.]*\) MB read per token.*stall \([0-9.]*\) s\/token.*/$label: \1 s\/token, \2 MB\/token, stall \3 s/p"
}
for r in $(seq 1 "$rounds"); do
  echo "round $r"
  for depth in $depths; do run "predict, depth $depth" --predict on --prefetch-depth "$depth"; done
  run "predict off" --predict off
done
