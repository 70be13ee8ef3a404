#!/bin/bash
# Kernel throughput: GB/s of weights the bf16 and MXFP4 mat-vec kernels consume, per
# variant (scalar, avx2, avx512) at 1 and 2 threads, for k3-bench and full-K3 shapes,
# beside this machine's memory bandwidth measured in the same run (STREAM copy and a read
# sweep); k3-bench's per-token compute and the planner's MXFP4 rate per core; and GFLOP/s
# of the MXFP4 and bf16 mat-muls at full K3's expert shapes for 1 to 256 tokens per call
# against the cores' FMA peak measured in the same run (set gflops, --gflops-tokens).
# usage: bench/kernels.sh [kernels options...]   (bench/kernels.sh --help lists them with
#        their defaults; e.g. --variants avx512 --tokens 1,8 --reps 9 --sets bench,
#        or --sets gflops for the GFLOP/s table alone)
# Writes bench/results/kernels-<date>.csv (every measurement) and kernels-<date>.json (the
# per-core rates `k3-uring plan --calibration` reads, and the GFLOP/s table), and prints
# the tables.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/rel/bench/kernels"
stamp=$(date -u +%Y%m%d-%H%M%S)
out="$root/bench/results/kernels-$stamp.csv"
cal="$root/bench/results/kernels-$stamp.json"
mkdir -p "$(dirname "$bin")" "$root/bench/results"

# Built by the Makefile with the engine's flags and objects (-ffp-contract=off is part of
# the determinism contract).
make -C "$root" --no-print-directory build/rel/bench/kernels

for a in "$@"; do [[ $a == --help ]] && exec "$bin" --help; done
echo "kernels.sh: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs," \
     "L3 $(lscpu | sed -n 's/^L3 cache: *//p'); kernel $(uname -r); $(cc --version | head -1)"
echo "kernels.sh: $(git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || echo 'no git')"
"$bin" --csv "$out" --json "$cal" "$@"
echo "kernels.sh: wrote $out"
if grep -qs mxfp4_gbps_per_core "$cal"; then
  echo "kernels.sh: wrote $cal (k3-uring plan --calibration $cal)"
elif [[ -f $cal ]]; then
  echo "kernels.sh: wrote $cal (GFLOP/s only: no calibration in this run)"
fi
