#!/bin/bash
# Random O_DIRECT reads of one file at several depths: fio (io_uring, fixed buffers and
# files) against k3io's io_uring and pread backends (bench/readbench.c), and io_uring again
# with its buffers on transparent huge pages ("io_uring+thp"; fio's buffers are plain
# malloc), alternating all four (this disk's speed drifts between runs), page cache
# dropped before each run.
# usage: bench/readbench.sh [FILE] [SECONDS] [ROUNDS] [DEPTHS] [BLOCK_KIB]
#   FILE       created (1 GiB of random bytes) if missing   default DATA's readtest (bench/lib.sh)
#   SECONDS    per run                                      default 10
#   ROUNDS     passes over the four tools per depth         default 2
#   DEPTHS     requests in flight                           default "1 8 32"
#   BLOCK_KIB  read size                                    default 1024
# Writes bench/results/readbench-<date>.csv and prints a table of MiB/s.
set -euo pipefail
prog=readbench.sh
source "$(cd "$(dirname "$0")" && pwd)/lib.sh"
file=${1:-$bench_data/readtest}
secs=${2:-10}
rounds=${3:-2}
depths=${4:-1 8 32}
bs_kib=${5:-1024}
size_mib=1024
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/rel/bench/readbench"
out="$root/bench/results/readbench-$(date -u +%Y%m%d-%H%M%S).csv"
mkdir -p "$(dirname "$bin")" "$root/bench/results"

make -C "$root" --no-print-directory build/rel/bench/readbench

if [[ ! -f $file || $(stat -c %s "$file") -lt $((size_mib << 20)) ]]; then
  echo "readbench.sh: creating $file ($size_mib MiB of random bytes)"
  mkdir -p "$(dirname "$file")"
  dd if=/dev/urandom of="$file" bs=1M count=$size_mib oflag=direct status=none
fi

drop_caches() { sync; if [[ $(id -u) -eq 0 ]]; then echo 3 >/proc/sys/vm/drop_caches; fi; }

# Prints "MiB/s p50_ms p99_ms" for one fio run.
run_fio() {
  fio --name=x --filename="$file" --rw=randread --bs="${bs_kib}k" --iodepth="$1" --direct=1 \
      --ioengine=io_uring --fixedbufs=1 --registerfiles=1 --size=${size_mib}M \
      --runtime="$secs" --time_based --output-format=json |
    jq -r '.jobs[0].read | "\(.bw_bytes / 1048576) \(.clat_ns.percentile["50.000000"] / 1e6) \(.clat_ns.percentile["99.000000"] / 1e6)"'
}

# Prints "MiB/s p50_ms p99_ms" for one readbench run: BACKEND DEPTH THP.
run_ours() {
  "$bin" "$file" --backend "$1" --depth "$2" --thp "$3" --block-kib "$bs_kib" \
         --size-mib "$size_mib" --seconds "$secs" | tail -1 | awk -F, '{print $6, $8, $9}'
}

echo "readbench.sh: $file, ${bs_kib} KiB random reads, depths $depths, $rounds rounds of $secs s;" \
     "kernel $(uname -r), $(fio --version), liburing $(pkg-config --modversion liburing)"
echo "tool,depth,round,mib_s,lat_p50_ms,lat_p99_ms" >"$out"
for qd in $depths; do
  for r in $(seq 1 "$rounds"); do
    for tool in fio io_uring pread io_uring+thp; do
      drop_caches
      case $tool in
        fio) res=$(run_fio "$qd") ;;
        io_uring+thp) res=$(run_ours io_uring "$qd" 1) ;;
        *) res=$(run_ours "$tool" "$qd" 0) ;;
      esac
      read -r mibs p50 p99 <<<"$res"
      printf '%-12s depth %-3s round %s: %8.1f MiB/s  p50 %7.3f ms  p99 %7.3f ms\n' \
             "$tool" "$qd" "$r" "$mibs" "$p50" "$p99"
      echo "$tool,$qd,$r,$mibs,$p50,$p99" >>"$out"
    done
  done
done
echo "readbench.sh: wrote $out"
