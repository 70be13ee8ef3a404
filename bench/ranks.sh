#!/bin/bash
# Beyond one box (issue 21): the routed experts sharded over two mpirun ranks, each rank a
# box with its own emulated drives, against one rank with one box, I/O-bound.  One
# emulated set of 2 x DRIVES throttled drives (one block cgroup holds both boxes' limits);
# box 0 = the first DRIVES, holding a whole pack (the one-box baseline reads it; rank 0
# reads its share of it), box 1 = the others, holding rank 1's share (pack --ranks 2
# --rank 1).  Alternating rounds, --no-cache (every record read every token), the trunk
# resident, prediction on:
#   one   1 rank, THREADS threads, box 0
#   two   2 ranks, THREADS/2 threads each (this machine's cores are shared by the two
#         "boxes"; I/O-bound, so compute is not what is measured), boxes 0 and 1
# Prints s/token of each, two/one (goal <= 0.55), the expert outputs sent between ranks
# per token, that both give the same ids, and the planner's projection for full K3 on 1,
# 2 and 4 boxes of 8 Gen4 drives.
# usage: bench/ranks.sh [CHECKPOINT] [DRIVES] [MBPS] [ROUNDS] [TOKENS]
#   CHECKPOINT  default: k3-bench's widths with 64 experts a layer (bench/configs/
#               k3-bench-64.json, 321 MB of experts a token), synthesized into
#               $bench_emulate_root/../k3-bench-64 when missing (about 2.9 GB)
#   DRIVES 4 per box, MBPS 20 per drive, ROUNDS 3, TOKENS 8; THREADS (env) 2
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=ranks.sh
source "$root/bench/lib.sh"
k3=$(realpath "${K3:-./k3-uring}")
ckpt=${1:-$(dirname "$bench_emulate_root")/k3-bench-64}
drives=${2:-4}
mbps=${3:-20}
rounds=${4:-3}
tokens=${5:-8}
threads=${THREADS:-2}
check_uint DRIVES "$drives"
check_uint MBPS "$mbps"
check_uint ROUNDS "$rounds"
check_uint TOKENS "$tokens"
check_uint THREADS "$threads"
command -v mpirun >/dev/null || die "needs mpirun (make deps installs Open MPI)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
if [[ ! -f $ckpt/config.json ]]; then
  [[ -z ${1:-} ]] || die "$ckpt: no checkpoint (no config.json)"
  say "synthesizing $ckpt from bench/configs/k3-bench-64.json"
  "$k3" synth --config "$root/bench/configs/k3-bench-64.json" --seed 1 --out "$ckpt" -q
fi
name=ranks
out="$root/bench/results/ranks-$(date -u +%Y%m%d-%H%M%S).json"
say "checkpoint $ckpt; 2 boxes of $drives drives at $mbps MB/s; $rounds rounds of $tokens tokens"

size=$(( $(du -sb "$ckpt" | cut -f1) / drives / 1000000000 + 2 ))G
all=$("$root/bench/emulate.sh" up --drives $((2 * drives)) --size "$size" --mbps "$mbps" --name $name | tail -1)
trap "'$root/bench/emulate.sh' down --name $name >/dev/null 2>&1 || true" EXIT
IFS=, read -ra list <<<"$all"
box0=$(IFS=,; echo "${list[*]:0:drives}")
box1=$(IFS=,; echo "${list[*]:drives}")
"$k3" pack --checkpoint "$ckpt" --drives "$box0" -q
"$k3" pack --checkpoint "$ckpt" --drives "$box1" --ranks 2 --rank 1 -q

args=(--ids 5,17,300,1200 -n "$tokens" --ignore-eos --print-ids --no-cache)
run_one() { # → stderr lines in $1, ids in $1.ids
  drop_caches
  "$root/bench/emulate.sh" exec --name $name -- "$k3" --drives "$box0" "${args[@]}" -t "$threads" \
    2>"$1" >"$1.ids"
}
run_two() {
  drop_caches
  local t=$(( threads / 2 > 0 ? threads / 2 : 1 ))
  "$root/bench/emulate.sh" exec --name $name -- mpirun --oversubscribe \
    -np 1 "$k3" --drives "$box0" "${args[@]}" -t "$t" : -np 1 "$k3" --drives "$box1" "${args[@]}" -t "$t" \
    2>"$1" >"$1.ids"
}
kb_between() { sed -n 's/.*per token: \([0-9.]*\) KB of expert outputs sent between ranks.*/\1/p' "$1"; }

tmp=$(mktemp -d)
rows=()
for r in $(seq 1 "$rounds"); do
  run_one "$tmp/one"
  run_two "$tmp/two"
  read -r one_t one_st one_mb _ < <(decode_stats <"$tmp/one")
  read -r two_t two_st two_mb _ < <(decode_stats <"$tmp/two")
  kb=$(kb_between "$tmp/two")
  same=true
  cmp -s "$tmp/one.ids" "$tmp/two.ids" || same=false
  floor=$(echo "$one_mb / ($drives * $mbps)" | bc -l)
  printf 'round %d: one box %.3f s/token (%.0f MB/token; I/O floor %.3f s), two boxes %.3f s/token (rank 0 read %.0f MB/token), two/one %.3f; %s KB/token between ranks; same ids: %s\n' \
    "$r" "$one_t" "$one_mb" "$floor" "$two_t" "$two_mb" "$(echo "$two_t / $one_t" | bc -l)" "$kb" "$same"
  [[ $same == true ]] || die "two ranks gave other ids than one: $(cat "$tmp/one.ids") vs $(cat "$tmp/two.ids")"
  rows+=("{\"round\":$r,\"one_s\":$one_t,\"one_stall_s\":$one_st,\"one_mb\":$one_mb,\"two_s\":$two_t,\"two_stall_s\":$two_st,\"rank0_mb\":$two_mb,\"kb_between_ranks\":${kb:-null}}")
done
proj=$(for b in 1 2 4; do "$k3" plan --config k3 --drives 8 --ranks "$b" 2>&1 | sed -n 's/^ *pipelined *\([0-9.]*\) s\/token.*/\1/p' | head -1; done | paste -sd, -)
say "full K3, 8 x 7 GB/s drives a box, pipelined s/token on 1, 2, 4 boxes (plan --ranks): $proj"
printf '{"checkpoint":"%s","drives_per_box":%d,"mbps":%d,"tokens":%d,"threads":%d,"rounds":[%s],"k3_projection_1_2_4":[%s],"load":"%s"}\n' \
  "$ckpt" "$drives" "$mbps" "$tokens" "$threads" "$(IFS=,; echo "${rows[*]}")" "$proj" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" >"$out"
rm -rf "$tmp"
say "wrote $out"
