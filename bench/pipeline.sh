#!/bin/bash
# Pipelined decode against the synchronous path on an emulated box whose read time per
# token is about the compute time per token (where overlap matters most): k3-bench packed on
# DRIVES throttled drives, then alternating rounds of
#   sync      --sync --predict off   one record at a time, nothing overlapped
#   pipeline  --predict off          a layer's reads overlap its shared experts and
#                                    routed experts compute as records land
#   predict   --predict on           and the next layer's likely experts are prefetched
# all with --no-cache (every record read every token) and the trunk resident, beside
# fio's ceiling on the same drives.  The I/O floor is the bytes read per token over fio's
# bandwidth; the compute time is the sync path's time per token minus its time waiting
# for reads.
# usage: bench/pipeline.sh [CHECKPOINT] [DRIVES] [MBPS] [ROUNDS] [TOKENS]
# CHECKPOINT, MBPS, ROUNDS and TOKENS default to run.sh's (bench/lib.sh); DRIVES to 2: one
# box, where run.sh sweeps DRIVE_COUNTS.  Read time per token is MB/token over DRIVES x
# MBPS: choose MBPS so that it is near the compute time (each round prints both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=pipeline.sh
source "$root/bench/lib.sh"
ckpt=${1:-$bench_default_ckpt}
drives=${2:-2}
mbps=${3:-$bench_default_mbps}
rounds=${4:-$bench_default_rounds}
tokens=${5:-$bench_default_tokens}
k3=$(realpath "${K3:-./k3-uring}")
[[ -f $ckpt/config.json ]] || die "$ckpt: no checkpoint (no config.json); k3-uring synth --config k3-bench --out $ckpt makes one"
check_uint DRIVES "$drives"
check_uint MBPS "$mbps"
check_uint ROUNDS "$rounds"
check_uint TOKENS "$tokens"
name=pipeline
out="$root/bench/results/pipeline-$(date -u +%Y%m%d-%H%M%S).json"
echo "pipeline.sh: checkpoint $ckpt, $drives drives at $mbps MB/s, $rounds rounds of $tokens tokens" >&2

packed_box "$k3" "$ckpt" $name "$drives" "$mbps"
list=$box_drives

run() { # args... → decode_stats
  drop_caches
  "$root/bench/emulate.sh" exec --name $name -- "$k3" --drives "$list" --ids 5,17,300,1200 \
    -n "$tokens" --ignore-eos --print-ids --no-cache "$@" 2>&1 >/dev/null | decode_stats
}
rows=()
for r in $(seq 1 "$rounds"); do
  fio=$("$root/bench/fio.sh" --drives "$list" --bs 1M --iodepth 64 --file k3-uring.data --name $name)
  read -r s_t s_st mb _ < <(run --sync --predict off)
  read -r p_t p_st _ _ < <(run --predict off)
  read -r q_t q_st _ _ < <(run --predict on)
  # printf, not bc's own output: bc prints .797 for 0.797, which is not JSON
  floor=$(printf '%.6f' "$(echo "$mb * 1000000 / $fio" | bc -l)")
  compute=$(printf '%.6f' "$(echo "$s_t - $s_st" | bc -l)")
  bound=$(echo "if ($floor > $compute) $floor else $compute" | bc -l)
  printf 'round %d: fio %.0f MB/s, %.0f MB/token: I/O floor %.3f s, compute %.3f s; sync %.3f s; pipeline %.3f s (%.2fx bound, %.2fx sync); predict %.3f s (%.2fx bound, %.2fx sync, stall %.3f s)\n' \
    "$r" "$(echo "$fio / 1000000" | bc -l)" "$mb" "$floor" "$compute" "$s_t" "$p_t" \
    "$(echo "$p_t / $bound" | bc -l)" "$(echo "$p_t / $s_t" | bc -l)" "$q_t" \
    "$(echo "$q_t / $bound" | bc -l)" "$(echo "$q_t / $s_t" | bc -l)" "$q_st"
  rows+=("{\"round\":$r,\"fio_Bps\":$fio,\"mb_per_token\":$mb,\"io_floor_s\":$floor,\"compute_s\":$compute,\"sync_s\":$s_t,\"sync_stall_s\":$s_st,\"pipeline_s\":$p_t,\"pipeline_stall_s\":$p_st,\"predict_s\":$q_t,\"predict_stall_s\":$q_st}")
done
printf '{"checkpoint":"%s","drives":%d,"mbps":%d,"tokens":%d,"rounds":[%s]}\n' "$ckpt" "$drives" \
  "$mbps" "$tokens" "$(IFS=,; echo "${rows[*]}")" >"$out"
echo "pipeline.sh: wrote $out" >&2
