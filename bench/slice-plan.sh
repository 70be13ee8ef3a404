#!/bin/bash
# k3-slice's measured s/token against the planner's projection for the same slice and
# budget (goal: within 10%).
#
# k3-slice has every width of the released K3 (17.5 MB records, a 2.35 GB output head), so
# a token's reads and compute per layer are K3's.  The planner projects a decode step as
# max(reads over the drives, compute at per-core rates); its rates here are the ones
# bench/slice-project.sh measured on this slice with reads free (SLICE_CALIBRATION).  Two
# budgets:
#   1. this disk at its real speed: the trunk resident, --no-cache (every routed record
#      read every token), the disk's rate measured around each run (lib.sh read_rate: fio;
#      it drifts between modes); the projection at the rate before, after and their mean.
#      The run predicts (the default), so it should land between the planner's perfect
#      overlap (compared) and its figure without prediction (printed beside it).
#      This checks the planner's read side and its overlap, and shows what it leaves out:
#      the read path's CPU (checksums: the verify seconds a token, printed), which two
#      cores pay on their compute.
#   2. reads free, the limit fast drives approach: a budget that caches every record
#      (CACHED_RAM), a prompt long enough that its prefill reads every expert of every
#      layer, then decode steps that read nothing; against the planner at that budget
#      (no reads), with its figure for 8 x 7 GB/s and the trunk resident beside it (reads
#      15 ms a token there, under compute, plus the read path's CPU these steps do not
#      pay).  The rates came from such a run, so this checks the planner's composition
#      (the weight bytes of each piece, the budget's cache) and the runs' repeatability,
#      not the rates.  8 x 7 GB/s itself cannot be measured on slower storage: the drive
#      model only slows storage down, and the fastest storage a box may have (RAM through the
#      checksummed read path) delivers 0.4-2 GB/s.
#
# usage: bench/slice-plan.sh [MODEL]   MODEL: k3-slice's checkpoint folder (synthesized
#        there when missing: 13.8 GB, a few minutes) or its pack's drive folders (D0,D1,..);
#        default SLICE, else DATA's k3-slice (bench/lib.sh)
# knobs (environment), each printed with its value when the script starts:
#   K3            the binary                                   (./k3-uring)
#   THREADS       compute threads                              (2)
#   TOKENS        tokens each run generates                    (8)
#   ROUNDS        rounds of both parts, alternating; medians   (2)
#   PROMPT        part 1's prompt ids                          (163584,17,300,1200)
#   WARM_TOKENS   part 2's prompt length: each prefill position routes 16 of a layer's
#                 64 experts, so 48 leave one unread with odds 1e-6 a layer   (48)
#   CACHED_RAM    part 2's budget: the trunk, buffers and every record (14G)
#   SLICE_CALIBRATION  a bench/slice-project.sh JSON (default: run it now, on MODEL; its
#                 table of full K3 on stdout)
#   OUT           the JSON written                  (bench/results/slice-plan-DATE.json)
#   OMP_WAIT_POLICY                                            (passive: the box is shared)
# Writes OUT and a summary on stderr.
set -euo pipefail
prog=slice-plan.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
model=${1:-$slice_ckpt}
k3=$(realpath "${K3:-$root/k3-uring}")
threads=${THREADS:-2}
tokens=${TOKENS:-8}
rounds=${ROUNDS:-2}
prompt=${PROMPT:-163584,17,300,1200}
warm_tokens=${WARM_TOKENS:-48}
cached_ram=${CACHED_RAM:-14G}
calibration=${SLICE_CALIBRATION:-}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
check_uint THREADS "$threads"
check_uint TOKENS "$tokens"
((tokens >= 3)) || die "TOKENS: at least 3 (the first decode step is left out of the means)"
check_uint ROUNDS "$rounds"
check_uint WARM_TOKENS "$warm_tokens"
[[ -x $k3 ]] || die "$k3: not built (make)"
command -v python3 >/dev/null || die "needs python3"
command -v bc >/dev/null || die "needs bc"
for v in MODEL=$model K3=$k3 THREADS=$threads TOKENS=$tokens ROUNDS=$rounds PROMPT=$prompt \
         WARM_TOKENS=$warm_tokens CACHED_RAM=$cached_ram "SLICE_CALIBRATION=${calibration:-(run slice-project.sh)}" \
         OMP_WAIT_POLICY=$OMP_WAIT_POLICY; do
  say "$v"
done

# Part 2 holds the whole slice in RAM: say so now, not after the disk rounds.
need_ram "CACHED_RAM=$cached_ram" "$cached_ram"

first=${model%%,*}
if [[ $model != *,* && ! -d $model ]]; then
  [[ -z ${1:-} ]] || die "$model: no such folder"
  say "synthesizing k3-slice at $model"
  # beside it first, so a run stopped halfway leaves no checkpoint that looks whole
  "$k3" synth --config k3-slice --seed 1 --out "$model.synth-$$" -q || { rm -rf "$model.synth-$$"; die "synth failed"; }
  mv "$model.synth-$$" "$model"
fi
if [[ -f $model/config.json ]]; then
  src=(-m "$model") config=$model/config.json n_drives=1
else
  [[ -f $first/k3-uring.manifest ]] || die "$first: neither a checkpoint (config.json) nor a pack (k3-uring.manifest)"
  src=(--drives "$model") config=k3-slice
  IFS=, read -ra folders <<<"$model"
  n_drives=${#folders[@]}
fi
stamp=$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$root/bench/results"
out=${OUT:-$root/bench/results/slice-plan-$stamp.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z $calibration ]]; then
  calibration=$root/bench/results/slice-project-$stamp.json
  say "measuring the planner's rates: bench/slice-project.sh $model"
  K3=$k3 THREADS=$threads OUT=$calibration "$root/bench/slice-project.sh" "$model" ||
    die "bench/slice-project.sh failed"
fi
[[ -f $calibration ]] || die "SLICE_CALIBRATION: $calibration: no such file"
say "load: $(uptime | sed 's/.*load average: //')"

calc() { printf '%.6f' "$(echo "$1" | bc -l)"; }
# plan ARGS...: the planner's s/token for k3-slice on this box's THREADS cores,
# "PIPELINED WITHOUT_PREDICTION" (perfect overlap; the drives idle before routing).
plan() {
  "$k3" plan --config "$config" --cores "$threads" --calibration "$calibration" "$@" |
    sed -n 's/^  \(pipelined\|without prediction\) *\([0-9.]*\) s\/token.*/\2/p' | paste -sd' '
}
# run ARGS...: a decode of k3-slice; its stderr (with --stats) in $tmp/err.
run() {
  "$k3" run "${src[@]}" -t "$threads" --ignore-eos --print-ids --stats "$@" >/dev/null 2>"$tmp/err" ||
    die "run ${src[*]} $*: $(tail -1 "$tmp/err")"
}
# steps_mean FIELD: the mean over decode steps (--stats lines "token N: ...", N from 1;
# the first left out: its buffers are cold) of FIELD: s or verify.
steps_mean() {
  awk -v f="$1" '/ token [0-9]+: / && !/ token 1: / {
      sum += f == "s" ? $4 : $(NF - 1); n++ }
    END { if (n) printf "%.6f\n", sum / n }' "$tmp/err"
}

# disk_round R: part 1 once; appends to disk_rows and disk_ratio.
disk_round() {
  local before after s stall mb verify mean p_b p_a p_m p_np
  IFS=$'\t' read -r before _ < <(read_rate "$k3" "$model")
  run --ids "$prompt" -n "$tokens" --ram trunk --no-cache
  read -r _ stall mb _ < <(decode_stats <"$tmp/err")
  [[ -n ${mb:-} ]] || die "the run printed no closing statistics: $(tail -1 "$tmp/err")"
  s=$(steps_mean s) verify=$(steps_mean verify)
  IFS=$'\t' read -r after _ < <(read_rate "$k3" "$model")
  [[ -n $before && -n $after ]] || die "no read rate for $model"
  mean=$(calc "($before + $after) / 2")
  read -r p_b _ < <(plan --ram trunk --ctx "$ctx" --drives "$n_drives" --drive-gbps "$(calc "$before / $n_drives")")
  read -r p_a _ < <(plan --ram trunk --ctx "$ctx" --drives "$n_drives" --drive-gbps "$(calc "$after / $n_drives")")
  read -r p_m p_np < <(plan --ram trunk --ctx "$ctx" --drives "$n_drives" --drive-gbps "$(calc "$mean / $n_drives")")
  disk_ratio+=("$(calc "$s / $p_m")")
  say "disk, round $1: $s s/token ($mb MB read a token, stall $stall, verify $verify s a token); the disk read $before then $after GB/s; planned $p_b / $p_a s/token at those rates, $p_m at their mean (without prediction $p_np): measured ${disk_ratio[-1]}x"
  disk_rows+=("{\"s_per_token\":$s,\"mb_per_token\":$mb,\"stall_s\":$stall,\"verify_s\":$verify,\"disk_gbps_before\":$before,\"disk_gbps_after\":$after,\"planned_before\":$p_b,\"planned_after\":$p_a,\"planned_mean\":$p_m,\"planned_mean_without_prediction\":$p_np,\"measured_over_planned\":${disk_ratio[-1]}}")
}
# free_round R: part 2 once; appends to free_s.
free_round() {
  local records
  run --ids "$warm" -n "$tokens" --ram "$cached_ram" --predict off
  grep -q ' token 2: ' "$tmp/err" || die "the cached run printed no per-step statistics: $(tail -1 "$tmp/err")"
  records=$(decode_records_read <"$tmp/err")
  ((records == 0)) || die "the cached run's decode steps read $records records: raise CACHED_RAM ($cached_ram) or WARM_TOKENS ($warm_tokens)"
  free_s+=("$(steps_mean s)")
  say "reads free, round $1 ($warm_tokens-position prefill cached every record at --ram $cached_ram; decode steps read none): ${free_s[-1]} s/token"
}

# Rounds alternate the two parts, so a spell of load on the shared box lands in both.
ctx=$(( $(tr ',' '\n' <<<"$prompt" | wc -l) + tokens ))
warm=$(seq -s, 1000 $((1000 + warm_tokens - 1)))
disk_rows=() disk_ratio=() free_s=()
for r in $(seq 1 "$rounds"); do
  disk_round "$r"
  free_round "$r"
done
ctx2=$((warm_tokens + tokens))
read -r p_cached _ < <(plan --ram "$cached_ram" --ctx "$ctx2" --drives 8 --drive-gbps 7)
read -r p_fast _ < <(plan --ram trunk --ctx "$ctx2" --drives 8 --drive-gbps 7)
med_disk=$(printf '%s\n' "${disk_ratio[@]}" | median)
med_free=$(printf '%s\n' "${free_s[@]}" | median)
say "this disk, medians of $rounds rounds: measured $(printf %.3f "$med_disk")x the planner at the disk's mean rate around each run (rounds: ${disk_ratio[*]}; goal within 10%)"
say "reads free: $(printf %.4f "$med_free") s/token (rounds: ${free_s[*]}); planned $p_cached at --ram $cached_ram (no reads): measured $(calc "$med_free / $p_cached")x; on 8 x 7 GB/s with the trunk resident the planner says $p_fast: reads 15 ms a token, and their CPU, which these steps do not pay"

python3 - "$out" "$model" "$calibration" "$threads" "$tokens" "$prompt" "$warm_tokens" "$cached_ram" \
  "[$(IFS=,; echo "${disk_rows[*]}")]" "[$(IFS=,; echo "${free_s[*]}")]" "$p_cached" "$p_fast" \
  "$(uptime | sed 's/.*load average: //')" <<'EOF'
import json, statistics, sys
(out, model, calib, threads, tokens, prompt, warm, cached_ram, disk, free, p_cached, p_fast,
 load) = sys.argv[1:]
disk, free = json.loads(disk), json.loads(free)
json.dump({"source": "bench/slice-plan.sh: k3-slice measured against the planner",
           "model": model, "calibration": calib, "threads": int(threads), "tokens": int(tokens),
           "disk": {"prompt": prompt, "budget": "trunk", "no_cache": True, "rounds": disk,
                    "median_measured_over_planned":
                        statistics.median(r["measured_over_planned"] for r in disk)},
           "reads_free": {"warm_prompt_positions": int(warm), "budget": cached_ram,
                          "s_per_token": free, "planned_at_budget": float(p_cached),
                          "planned_8x7_trunk": float(p_fast),
                          "median_measured_over_planned": statistics.median(free) / float(p_cached)},
           "load": load}, open(out, "w"), indent=1)
EOF
say "wrote $out"
