#!/bin/bash
# make bench: the whole benchmark, every figure a ratio measured in this run.
#   1. kernels: GB/s of weights per core (the planner's calibration)
#   2. for N in DRIVE_COUNTS: an emulated box of N drives at MBPS each (bench/emulate.sh;
#      plain folders, unthrottled, where that is impossible), k3-bench packed onto it,
#      fio's ceiling on the same files, then the engine, ROUNDS times each, alternating:
#        sync      --sync --predict off    one record at a time, no overlap
#        pipeline  --predict off           reads overlap compute within a layer
#        predict   --predict on            and the next layer's experts are prefetched
#        floor     --predict on --ram floor  the trunk streamed too (bytes per token grow)
#      with --no-cache (every record read every token); one token traced (Perfetto);
#   3. the planner's projection for each box against what was measured, and full K3;
#   4. bench/results/bench-<date>.{json,md} and PNG plots (gnuplot).
# Knobs (environment, defaults): CKPT=/work/data/k3-bench (made with synth if missing),
#   DRIVE_COUNTS="1 2 4 8", MBPS=100, ROUNDS=3, TOKENS=6, CALIBRATION (a kernels JSON to
#   reuse instead of running the kernels bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=bench
source "$root/bench/lib.sh"
k3=$root/k3-uring
ckpt=${CKPT:-/work/data/k3-bench}
counts=${DRIVE_COUNTS:-1 2 4 8}
mbps=${MBPS:-100}
rounds=${ROUNDS:-3}
tokens=${TOKENS:-6}
stamp=$(date -u +%Y%m%d-%H%M%S)
res="$root/bench/results"
work="$res/tmp/bench-$stamp"
mkdir -p "$work"
echo "bench: every knob: CKPT=$ckpt DRIVE_COUNTS=\"$counts\" MBPS=$mbps ROUNDS=$rounds TOKENS=$tokens CALIBRATION=${CALIBRATION:-}" >&2
echo "bench: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(git -C "$root" log -1 --format='commit %h')" >&2

# 1. kernels → calibration (the MXFP4 and bf16 per-core rates, one thread, weights in RAM);
#    CALIBRATION=FILE reuses one measured earlier (the kernels bench takes minutes)
if [[ -n "${CALIBRATION:-}" ]]; then
  cal=$CALIBRATION
else
  "$root/bench/kernels.sh" --sets bench --reps 5 >"$work/kernels.txt" 2>&1 ||
    { cat "$work/kernels.txt" >&2; exit 1; }
  cal=$(sed -n 's/^kernels.sh: wrote \(.*\.json\) .*/\1/p' "$work/kernels.txt")
fi
[[ -f "$cal" ]] || { echo "bench: no calibration ($cal)" >&2; exit 1; }
[[ "$cal" -ef "$res/calibration.json" ]] || cp "$cal" "$res/calibration.json"
mx=$(sed -n 's/.*"mxfp4_gbps_per_core": *\([0-9.]*\).*/\1/p' "$cal" | head -1)
bf=$(sed -n 's/.*"bf16_gbps_per_core": *\([0-9.]*\).*/\1/p' "$cal" | head -1)
echo "bench: calibration: MXFP4 $mx GB/s per core, bf16 $bf GB/s per core ($cal)" >&2

[[ -d "$ckpt" ]] || "$k3" synth --config k3-bench --seed 1 --out "$ckpt"

emulated=1
name=bench
down() { "$root/bench/emulate.sh" down --name $name >/dev/null 2>&1 || true; }
trap down EXIT INT TERM
# run MODE ARGS...: one engine run inside the box; prints "s/token stall MB/token ready%"
engine() {
  drop_caches
  local cmd=("$k3" --drives "$list" --ids 5,17,300,1200 -n "$tokens" --ignore-eos --print-ids --no-cache "$@")
  if ((emulated)); then cmd=("$root/bench/emulate.sh" exec --name $name -- "${cmd[@]}"); fi
  "${cmd[@]}" 2>&1 >/dev/null | decode_stats
}
rows=()
for n in $counts; do
  size=$(( $(du -sb "$ckpt" | cut -f1) / n / 1000000000 + 3 ))G
  if list=$("$root/bench/emulate.sh" up --drives "$n" --size "$size" --mbps "$mbps" --name $name 2>"$work/emulate-$n.log" | tail -1); then
    emulated=1
  else
    emulated=0
    echo "bench: no emulated box ($(tail -1 "$work/emulate-$n.log")); plain folders, unthrottled" >&2
    list=$(for i in $(seq 1 "$n"); do mkdir -p "$work/plain$n/d$i"; echo "$work/plain$n/d$i"; done | paste -sd,)
  fi
  "$k3" pack --checkpoint "$ckpt" --drives "$list" -q 2>>"$work/pack.log"
  for r in $(seq 1 "$rounds"); do
    # the engine keeps 64 chunks of at most 1 MiB in flight over all drives
    fioargs=(--drives "$list" --bs 1M --iodepth $(( 64 / n > 0 ? 64 / n : 1 )) --file k3-uring.data)
    ((emulated)) && fioargs+=(--name $name)
    fio=$("$root/bench/fio.sh" "${fioargs[@]}" 2>>"$work/fio.log")
    read -r s_t s_st mb _ < <(engine --sync --predict off)
    read -r p_t p_st _ _ < <(engine --predict off)
    read -r q_t q_st _ q_hit < <(engine --predict on)
    read -r f_t f_st f_mb _ < <(engine --predict on --ram floor)
    proj=$("$k3" plan --config "$ckpt/config.json" --drives "$n" --drive-gbps "$(echo "$fio / $n / 1000000000" | bc -l)" \
      --cores "$(nproc)" --ram trunk --ctx 16 --calibration "$res/calibration.json" |
      sed -n 's/^  pipelined *\([0-9.]*\) s\/token.*/\1/p')
    row="{\"drives\":$n,\"round\":$r,\"emulated\":$emulated,\"mbps\":$mbps,\"fio_Bps\":$fio,\"mb_per_token\":$mb,"
    row+="\"sync_s\":$s_t,\"sync_stall_s\":$s_st,\"pipeline_s\":$p_t,\"pipeline_stall_s\":$p_st,"
    row+="\"predict_s\":$q_t,\"predict_stall_s\":$q_st,\"predict_ready_pct\":$q_hit,"
    row+="\"floor_s\":$f_t,\"floor_mb_per_token\":$f_mb,\"plan_s\":$proj}"
    rows+=("$row")
    echo "bench: $n drives, round $r: fio $(echo "$fio / 1000000" | bc) MB/s; sync $s_t, pipeline $p_t, predict $q_t s/token (floor budget $f_t); plan $proj" >&2
  done
  if [[ $n == "$(echo "$counts" | awk '{print $NF}')" ]]; then # trace one token on the largest box
    cmd=("$k3" --drives "$list" --ids 5,17,300,1200 -n 2 --ignore-eos --print-ids --no-cache --trace "$res/trace-$stamp.json")
    ((emulated)) && cmd=("$root/bench/emulate.sh" exec --name $name -- "${cmd[@]}")
    "${cmd[@]}" >/dev/null 2>&1
  fi
  down
done
json="$res/bench-$stamp.json"
printf '{"stamp":"%s","knobs":{"ckpt":"%s","mbps":%s,"rounds":%s,"tokens":%s},"calibration":{"mxfp4":%s,"bf16":%s},"runs":[%s]}\n' \
  "$stamp" "$ckpt" "$mbps" "$rounds" "$tokens" "$mx" "$bf" "$(IFS=,; echo "${rows[*]}")" >"$json"
python3 "$root/bench/report.py" "$json"
rm -rf "$work"
