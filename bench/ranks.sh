#!/bin/bash
# Beyond one box: the routed experts sharded over two mpirun ranks, each rank a
# box with its own emulated drives, against one rank with one box, I/O-bound.  One
# emulated set of 2 x DRIVES throttled drives (one block cgroup holds both boxes' limits);
# box 0 = the first DRIVES, holding a whole pack, box 1 = the others, holding a whole pack
# and rank 1's share (pack --ranks 2 --rank 1), each in its own folder on the same
# drives.  Alternating rounds, --no-cache (every record read every token), the trunk
# resident, prediction on:
#   one    1 rank on box 0
#   dealt  2 ranks, both on whole packs: each layer's chosen experts dealt out evenly
#          (engine/forward/moe.c: a predicted expert stays on the rank that prefetched it)
#   owner  the same, box 1 on its share: expert e read by rank e mod 2 (the busiest rank
#          reads 9.56 of 16 a layer on average)
# then one traced dealt run: the share of each rank's exchange time its drives kept
# reading (bench/ranks_overlap.py).
# Prints s/token of each, two/one (goal <= 0.55), the expert outputs sent between ranks
# per token, that all give the same ids, and the planner's projection for full K3 on 1,
# 2 and 4 boxes of 8 Gen4 drives.
# usage: bench/ranks.sh [CHECKPOINT] [DRIVES] [MBPS] [ROUNDS] [TOKENS]
#   CHECKPOINT  default: k3-bench's widths with 64 experts a layer (bench/configs/
#               k3-bench-64.json, 321 MB of experts a token), synthesized into
#               DATA's k3-bench-64 (bench/lib.sh) when missing (about 2.9 GB)
#   DRIVES 4 per box, MBPS 20 per drive, ROUNDS 3, TOKENS 8; BOX_THREADS (env) 1: each
#   "box" computes with that many threads (one box 1, two boxes 1 each: this machine's 2
#   cores are both boxes' cores, so each box gets the same compute)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=ranks.sh
source "$root/bench/lib.sh"
k3=$(realpath "${K3:-./k3-uring}")
ckpt=${1:-$bench_data/k3-bench-64}
drives=${2:-4}
mbps=${3:-20}
rounds=${4:-3}
tokens=${5:-8}
threads=${BOX_THREADS:-1}
check_uint DRIVES "$drives"
check_uint MBPS "$mbps"
check_uint ROUNDS "$rounds"
check_uint TOKENS "$tokens"
check_uint BOX_THREADS "$threads"
command -v mpirun >/dev/null || die "needs mpirun (make deps installs Open MPI)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
if [[ ! -f $ckpt/config.json ]]; then
  [[ -z ${1:-} ]] || die "$ckpt: no checkpoint (no config.json)"
  say "synthesizing $ckpt from bench/configs/k3-bench-64.json"
  # beside it first, so a run stopped halfway leaves no checkpoint that looks whole
  "$k3" synth --config "$root/bench/configs/k3-bench-64.json" --seed 1 --out "$ckpt.synth-$$" -q ||
    { rm -rf "$ckpt.synth-$$"; die "synth failed"; }
  mv "$ckpt.synth-$$" "$ckpt"
fi
name=ranks
out="$root/bench/results/ranks-$(date -u +%Y%m%d-%H%M%S).json"
say "checkpoint $ckpt; 2 boxes of $drives drives at $mbps MB/s; $rounds rounds of $tokens tokens"

size=$(( $(du -sb "$ckpt" | cut -f1) / drives / 1000000000 + 2 ))G
all=$("$root/bench/emulate.sh" up --drives $((2 * drives)) --size "$size" --mbps "$mbps" --name $name | tail -1)
tmp=$(mktemp -d)
# shellcheck disable=SC2064  # the paths as they are now
trap "rm -rf '$tmp'; '$root/bench/emulate.sh' down --name $name >/dev/null 2>&1 || true" EXIT
IFS=, read -ra list <<<"$all"
# folders SUB DRIVE...: "DRIVE/SUB,..": a pack's folders on those drives
folders() { local sub=$1 IFS=,; shift; local -a f=("${@/%//$sub}"); echo "${f[*]}"; }
box0=$(folders whole "${list[@]:0:drives}")
box1=$(folders whole "${list[@]:drives}")
box1_share=$(folders share "${list[@]:drives}")
IFS=, read -ra pack_dirs <<<"$box0,$box1,$box1_share"
mkdir -p "${pack_dirs[@]}"
"$k3" pack --checkpoint "$ckpt" --drives "$box0" -q
"$k3" pack --checkpoint "$ckpt" --drives "$box1" -q
"$k3" pack --checkpoint "$ckpt" --drives "$box1_share" --ranks 2 --rank 1 -q

# shellcheck disable=SC2054  # one id list
args=(--ids 5,17,300,1200 -n "$tokens" --ignore-eos --print-ids --no-cache)
run_one() { # → stderr lines in $1, ids in $1.ids
  drop_caches
  "$root/bench/emulate.sh" exec --name $name -- "$k3" --drives "$box0" "${args[@]}" -t "$threads" \
    2>"$1" >"$1.ids"
}
run_two() { # OUT BOX1 [ARGS...]
  local out=$1 box=$2
  shift 2
  drop_caches
  "$root/bench/emulate.sh" exec --name $name -- mpirun --oversubscribe \
    -np 1 "$k3" --drives "$box0" "${args[@]}" -t "$threads" "$@" : \
    -np 1 "$k3" --drives "$box" "${args[@]}" -t "$threads" "$@" 2>"$out" >"$out.ids"
}
kb_between() { sed -n 's/.*per token: \([0-9.]*\) KB of expert outputs sent between ranks.*/\1/p' "$1"; }

rows=()
for r in $(seq 1 "$rounds"); do
  run_one "$tmp/one"
  run_two "$tmp/dealt" "$box1"
  run_two "$tmp/owner" "$box1_share"
  read -r one_t one_st one_mb _ < <(decode_stats <"$tmp/one")
  read -r d_t d_st d_mb _ < <(decode_stats <"$tmp/dealt")
  read -r o_t o_st o_mb _ < <(decode_stats <"$tmp/owner")
  kb=$(kb_between "$tmp/dealt")
  for run in dealt owner; do
    cmp -s "$tmp/one.ids" "$tmp/$run.ids" ||
      die "$run: two ranks gave other ids than one: $(cat "$tmp/one.ids") vs $(cat "$tmp/$run.ids")"
  done
  floor=$(echo "$one_mb / ($drives * $mbps)" | bc -l)
  printf 'round %d: one box %.3f s/token (%.0f MB/token; I/O floor %.3f s); two boxes dealt %.3f s/token (rank 0 read %.0f MB/token), %.3fx one; owner %.3f s/token (%.0f MB), %.3fx one; %s KB/token between ranks; ids identical\n' \
    "$r" "$one_t" "$one_mb" "$floor" "$d_t" "$d_mb" "$(echo "$d_t / $one_t" | bc -l)" \
    "$o_t" "$o_mb" "$(echo "$o_t / $one_t" | bc -l)" "$kb"
  rows+=("{\"round\":$r,\"one_s\":$one_t,\"one_stall_s\":$one_st,\"one_mb\":$one_mb,\"dealt_s\":$d_t,\"dealt_stall_s\":$d_st,\"dealt_rank0_mb\":$d_mb,\"owner_s\":$o_t,\"owner_stall_s\":$o_st,\"owner_rank0_mb\":$o_mb,\"kb_between_ranks\":${kb:-null}}")
done
# Full K3 on 2 x EPYC 7763 boxes (128 cores, 2 nodes, 256 GB) of 8 Gen4 drives, at this
# machine's measured kernel rates per core (bench/results/calibration.json).
plan=(plan --config k3 --drives 8 --drive-gbps 7 --cores 128 --numa-nodes 2 --ram 256G --ctx 4096
      --calibration "$root/bench/results/calibration.json")
pipelined() { "$k3" "${plan[@]}" "$@" 2>&1 | sed -n 's/^ *pipelined *\([0-9.]*\) s\/token.*/\1/p' | tail -1; }
# Do the drives keep reading while the ranks exchange?  One traced dealt run.
run_two "$tmp/traced" "$box1" --trace "$tmp/trace.json"
overlap=$(python3 "$root/bench/ranks_overlap.py" "$tmp/trace.json")
say "dealt, traced: $(echo "$overlap" | paste -sd';' -)"
proj=$(for b in 1 2 4; do pipelined --ranks "$b"; done | paste -sd, -)
proj_dealt=$(for b in 2 4; do pipelined --ranks "$b" --split dealt; done | paste -sd, -)
say "full K3, 8 x 7 GB/s drives a box, pipelined s/token (k3-uring ${plan[*]} --ranks B [--split dealt]): 1, 2, 4 boxes by owner $proj; 2, 4 dealt $proj_dealt"
printf '{"checkpoint":"%s","drives_per_box":%d,"mbps":%d,"tokens":%d,"threads_per_box":%d,"rounds":[%s],"k3_projection_1_2_4":[%s],"k3_projection_dealt_2_4":[%s],"exchange_overlap":"%s","load":"%s"}\n' \
  "$ckpt" "$drives" "$mbps" "$tokens" "$threads" "$(IFS=,; echo "${rows[*]}")" "$proj" "$proj_dealt" \
  "$(echo "$overlap" | paste -sd';' -)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" >"$out"
say "wrote $out"
