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
prog=prefetch-depth.sh
source "$root/bench/lib.sh"
name=prefetch-depth
echo "prefetch-depth.sh: checkpoint $ckpt, $drives drives at $mbps MB/s, $rounds rounds, depths $depths" >&2

packed_box "$k3" "$ckpt" $name "$drives" "$mbps"
list=$box_drives

run() { # label args...
  local label=$1 t st mb; shift
  drop_caches
  read -r t st mb _ < <("$root/bench/emulate.sh" exec --name $name -- "$k3" --drives "$list" \
    --ids 5,17,300,1200 -n 6 --ignore-eos --print-ids --no-cache "$@" 2>&1 >/dev/null | decode_stats)
  echo "$label: $t s/token, $mb MB/token, stall $st s"
}
for r in $(seq 1 "$rounds"); do
  echo "round $r"
  for depth in $depths; do run "predict, depth $depth" --predict on --prefetch-depth "$depth"; done
  run "predict off" --predict off
done
