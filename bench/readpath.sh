#!/bin/bash
# The read path against fio on the same files: k3-uring iobench (decode-shaped reads of
# random expert records through io_uring, the pread pool, and the one-at-a-time sync
# baseline) alternated with fio's io_uring O_DIRECT random reads at the engine's chunk
# size (1 MiB) and queue depth (64), page cache dropped before each run.
# usage: bench/readpath.sh D0,D1,.. [ROUNDS] [TOKENS]
# Writes bench/results/readpath-<date>.csv and prints per-round ratios.
set -euo pipefail
drives=${1:?usage: bench/readpath.sh D0,D1,.. [ROUNDS] [TOKENS]}
rounds=${2:-3}
tokens=${3:-24}
k3=${K3:-./k3-uring}
root=$(cd "$(dirname "$0")/.." && pwd)
prog=readpath.sh
source "$root/bench/lib.sh"
out="$root/bench/results/readpath-$(date -u +%Y%m%d-%H%M%S).csv"
files=$(echo "$drives" | tr ',' '\n' | sed 's|$|/k3-uring.data|' | paste -sd:)
iobench() { # prints steady-state s/token and GB/s
  "$k3" iobench --drives "$drives" --tokens "$tokens" --ram trunk --no-cache "$@" 2>&1 >/dev/null |
    iobench_steady
}
fio_gbps() {
  fio --name=readpath --filename="$files" --rw=randread --bs=1M --iodepth=64 --direct=1 \
    --ioengine=io_uring --fixedbufs=1 --registerfiles=1 --runtime=6 --time_based \
    --group_reporting --output-format=json | fio_read_bw /dev/stdin | awk '{ print $1 / 1e9 }'
}
echo "round,fio_GBps,uring_GBps,uring_s_token,pread_GBps,pread_s_token,sync_GBps,sync_s_token" >"$out"
for r in $(seq 1 "$rounds"); do
  drop_caches; f=$(fio_gbps)
  drop_caches; read -r ut u < <(iobench --io uring)
  drop_caches; read -r pt p < <(iobench --io pread)
  drop_caches; read -r st s < <(iobench --io uring --sync)
  echo "$r,$f,$u,$ut,$p,$pt,$s,$st" >>"$out"
  printf 'round %d: fio %.2f GB/s; io_uring %.2f GB/s (%.2f of fio, %.3f s/token); pread pool %.2f GB/s; sync %.2f GB/s (%.3f s/token: io_uring is %.2fx faster)\n' \
    "$r" "$f" "$u" "$(echo "$u / $f" | bc -l)" "$ut" "$p" "$s" "$st" "$(echo "$st / $ut" | bc -l)"
done
echo "readpath.sh: wrote $out"
