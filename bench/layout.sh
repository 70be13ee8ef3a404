#!/bin/bash
# Which placement reads faster: records striped over every drive (the default) or each
# record whole on one drive, round-robin (pack --chunk record)?  k3-bench packed both ways
# on the same emulated box, then alternating rounds of iobench (decode-shaped random
# expert reads, no compute) with the trunk resident and no cache, beside fio.
# usage: bench/layout.sh CHECKPOINT [DRIVES] [MBPS] [ROUNDS] [TOKENS]
set -euo pipefail
ckpt=${1:?usage: bench/layout.sh CHECKPOINT [DRIVES] [MBPS] [ROUNDS] [TOKENS]}
drives=${2:-4}
mbps=${3:-100}
rounds=${4:-3}
tokens=${5:-8}
k3=$(realpath "${K3:-./k3-uring}")
root=$(cd "$(dirname "$0")/.." && pwd)
prog=layout.sh
source "$root/bench/lib.sh"
name=layout
out="$root/bench/results/layout-$(date -u +%Y%m%d-%H%M%S).csv"
echo "layout.sh: $ckpt on $drives drives at $mbps MB/s, $rounds rounds of $tokens tokens" >&2
size=$(( 2 * $(du -sb "$ckpt" | cut -f1) / drives / 1000000000 + 4 ))G
list=$("$root/bench/emulate.sh" up --drives "$drives" --size "$size" --mbps "$mbps" --name $name | tail -1)
trap '"$root/bench/emulate.sh" down --name $name >/dev/null 2>&1 || true' EXIT
striped=$(echo "$list" | tr ',' '\n' | sed 's|$|/striped|' | paste -sd,)
whole=$(echo "$list" | tr ',' '\n' | sed 's|$|/whole|' | paste -sd,)
echo "$striped,$whole" | tr ',' '\n' | xargs mkdir -p
"$k3" pack --checkpoint "$ckpt" --drives "$striped" -q 2>/dev/null
"$k3" pack --checkpoint "$ckpt" --drives "$whole" --chunk record -q 2>/dev/null
iob() {
  drop_caches
  "$root/bench/emulate.sh" exec --name $name -- "$k3" iobench --drives "$1" --tokens "$tokens" \
    --ram trunk --no-cache 2>&1 >/dev/null | iobench_steady
}
echo "round,fio_GBps,striped_s_token,striped_GBps,whole_s_token,whole_GBps" >"$out"
for r in $(seq 1 "$rounds"); do
  fio=$("$root/bench/fio.sh" --drives "$striped" --bs 1M --iodepth 64 --file k3-uring.data --name $name 2>/dev/null)
  read -r st sg < <(iob "$striped")
  read -r wt wg < <(iob "$whole")
  echo "$r,$(echo "$fio / 1000000000" | bc -l),$st,$sg,$wt,$wg" >>"$out"
  printf 'round %d: fio %.3f GB/s; striped %.3f s/token (%.3f GB/s); whole records %.3f s/token (%.3f GB/s): striped %.2fx faster\n' \
    "$r" "$(echo "$fio / 1000000000" | bc -l)" "$st" "$sg" "$wt" "$wg" "$(echo "$wt / $st" | bc -l)"
done
echo "layout.sh: wrote $out" >&2
