#!/bin/bash
# The drive model (--drive-model, iouring/model.h) checked, then used to measure what the
# blk-throttle emulation hides: the pipelined read path against one record at a time.
# The pack lives in RAM (tmpfs), so the storage underneath is far faster than the model
# and every read time is the model's (a run says so when it is not; this script repeats
# that warning).
#
#   1. iobench over IOBENCH_DRIVES modelled drives sharing IOBENCH_MBPS (each drive
#      IOBENCH_MBPS / n): the read path's bandwidth against the model's (goal: within
#      5%), beside iobench without the model (what RAM and the checksums deliver, which
#      must be far above).
#   2. run --sync --predict off under the model at RATE_MBPS per drive against floor +
#      compute, floor being the bytes per token over N_DRIVES x RATE_MBPS plus a latency per
#      record (goal: within 5%).  compute two ways: the brief's, a run reading from RAM
#      without the model (its time less its wait for reads; one such run each side of the
#      modelled one); and the modelled run's own (its time less its wait), which makes the
#      check the run's wait against the floor.  On a loaded machine the two differ: a run
#      that sleeps on the model gets the CPU sooner when it wakes than a run that never
#      sleeps, so the first form moves with the load and the second does not.
#   3. at a rate where reading a token takes about as long as computing it: sync against
#      pipelined with --predict off and --predict on (ROUNDS rounds, medians); the share
#      of compute that cannot overlap reads (everything outside the MoE stages' shared +
#      routed part: embedding, the dense layer 0, attention and the router before routing
#      is known, the output head), measured from a trace of a RAM run, and the bound it
#      implies: U + max(C - U, the pipelined floor), C the sync run's own compute
#      (goal: pipelined <= 0.6 x sync where routed experts dominate compute).
# Every run: --no-cache (each routed record read every token), the trunk resident.
#
# usage: bench/drive-model.sh CHECKPOINT
# knobs (environment), each printed with its value when the script starts:
#   K3              the binary                               (./k3-uring)
#   WORK            folder for the packs, on tmpfs           (/dev/shm/k3-drive-model)
#   CHECKS          which checks to run                      ("1 2 3")
#   IOBENCH_MBPS    check 1: all the modelled drives, MB/s   (160: far under what RAM and
#                   the checksums deliver, so the model is what limits)
#   IOBENCH_DRIVES  check 1: drive counts                    ("1 2 4 8")
#   IOBENCH_TOKENS  check 1: decode steps iobench reads      (6)
#   RATE_MBPS       check 2: per-drive rate, MB/s            (60)
#   LATENCY_US      every model's per-read latency, us       (80)
#   N_DRIVES        checks 2 and 3: modelled drives          (4)
#   TOKENS          checks 2 and 3: tokens a run generates   (8)
#   ROUNDS          checks 2 and 3: rounds; medians kept     (3)
#   PROMPT          prompt ids                               (5,17,300,1200)
#   THREADS         compute threads of every run, 0 = a core each (0); fewer make a
#                   token's compute longer, so that read time ~ compute time comes at a
#                   slower model, one a disk can outrun (the pack off tmpfs: WORK)
#   OMP_WAIT_POLICY                                          (passive: the box is shared)
# Writes bench/results/drive-model-DATE.json, every run's statistics beside it (.log),
# and a summary on stderr.
set -euo pipefail
prog=drive-model.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
ckpt=${1:-${CKPT:?usage: bench/drive-model.sh CHECKPOINT (or CKPT=)}}
[[ -f $ckpt/config.json ]] || die "$ckpt: no config.json (a checkpoint folder as shipped)"
k3=$(realpath "${K3:-$root/k3-uring}")
work=${WORK:-/dev/shm/k3-drive-model}
checks=${CHECKS:-1 2 3}
iobench_mbps=${IOBENCH_MBPS:-160}
iobench_drives=${IOBENCH_DRIVES:-1 2 4 8}
iobench_tokens=${IOBENCH_TOKENS:-6}
rate_mbps=${RATE_MBPS:-60}
latency_us=${LATENCY_US:-80}
drives=${N_DRIVES:-4}
tokens=${TOKENS:-8}
rounds=${ROUNDS:-3}
prompt=${PROMPT:-5,17,300,1200}
threads=${THREADS:-0}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
py=/usr/bin/python3
[[ -x $py ]] || py=python3
command -v "$py" >/dev/null || die "needs python3 (the trace and the config)"
command -v bc >/dev/null || die "needs bc"
[[ -x $k3 ]] || die "$k3: not built (make)"
for v in K3=$k3 WORK=$work "CHECKS=$checks" IOBENCH_MBPS=$iobench_mbps \
         "IOBENCH_DRIVES=$iobench_drives" IOBENCH_TOKENS=$iobench_tokens RATE_MBPS=$rate_mbps \
         LATENCY_US=$latency_us N_DRIVES=$drives TOKENS=$tokens ROUNDS=$rounds PROMPT=$prompt \
         THREADS=$threads \
         OMP_WAIT_POLICY=$OMP_WAIT_POLICY; do
  say "$v"
done
say "load: $(uptime | sed 's/.*load/load/')"

# The pack takes about the checkpoint's size in RAM; leave 4 GB beside it.
need=$(( $(du -sb "$ckpt" | cut -f1) / 1000000000 + 4 ))
mkdir -p "$work"
free_gb=$(( $(df -B1 --output=avail "$work" | tail -1) / 1000000000 ))
((free_gb >= need)) || die "$work has $free_gb GB free; the pack needs about $need GB (set WORK)"
[[ $(stat -f -c %T "$work") == tmpfs ]] || warn "$work is not tmpfs: the storage may be slower than the model"
trap 'rm -rf "$work"' EXIT

model() { echo "--drive-model ${1}MB/s,${latency_us}us"; }
ratio() { printf '%.4f' "$(echo "($1) / ($2)" | bc -l)"; }
calc() { printf '%.6f' "$(echo "$1" | bc -l)"; }
med() { printf '%.4f' "$(printf '%s\n' "$@" | median)"; }
json_list() { local IFS=,; echo "[$*]"; }
# warn_late FILE WHAT: repeats a run's note that the storage was slower than the model.
warn_late() { if grep -q "slower than the drive model" "$1"; then warn "$2: $(grep -m1 'slower than' "$1")"; fi; }

# pack_on N: the checkpoint packed over N folders in $work; sets list.
pack_on() {
  rm -rf "$work"/d*
  list=$(for i in $(seq 0 $(($1 - 1))); do mkdir -p "$work/d$i"; printf '%s,' "$work/d$i"; done)
  list=${list%,}
  "$k3" pack --checkpoint "$ckpt" --drives "$list" -q >/dev/null || die "pack over $1 drives"
}
# iobench ARGS...: its steady-state GB/s.
iobench() {
  "$k3" iobench --drives "$list" --tokens "$iobench_tokens" --ram trunk --no-cache "$@" \
    2>"$work/err" >/dev/null || die "iobench $*: $(tail -1 "$work/err")"
  cat "$work/err" >>"$log"
  warn_late "$work/err" "iobench $*"
  iobench_steady <"$work/err" | cut -d' ' -f2
}
# run ARGS...: "S_PER_TOKEN STALL_S_PER_TOKEN MB_PER_TOKEN" of a decode.
run() {
  "$k3" --drives "$list" --ids "$prompt" -n "$tokens" --ignore-eos --print-ids --no-cache -t "$threads" "$@" \
    2>"$work/err" >/dev/null || die "run $*: $(tail -1 "$work/err")"
  cat "$work/err" >>"$log"
  warn_late "$work/err" "run $*"
  sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token; \([0-9.]*\) MB read per token.*stall \([0-9.]*\) s\/token.*/\1 \3 \2/p' "$work/err"
}
# ram_compute: seconds a token of a sync run reading from RAM, less its wait for reads.
ram_compute() {
  local t st
  read -r t st _ < <(run --sync --predict off)
  calc "$t - $st"
}

mkdir -p "$root/bench/results"
stamp=$(date -u +%Y%m%d-%H%M%S)
out="$root/bench/results/drive-model-$stamp.json"
log="$root/bench/results/drive-model-$stamp.log"
: >"$log"
json=("\"checkpoint\":\"$ckpt\"" "\"latency_us\":$latency_us")

# ---- 1. bandwidth through iobench ----
if [[ " $checks " == *" 1 "* ]]; then
  rows=()
  for n in $iobench_drives; do
    pack_on "$n"
    per=$(calc "$iobench_mbps / $n")
    ceiling=$(iobench)
    # shellcheck disable=SC2046
    got=$(iobench $(model "$per"))
    want=$(calc "$iobench_mbps / 1000")
    say "iobench, $n drives of $per MB/s: $got GB/s against the model's $want GB/s ($(ratio "$got" "$want")x); RAM without the model $ceiling GB/s"
    rows+=("{\"drives\":$n,\"drive_MBps\":$per,\"model_GBps\":$want,\"got_GBps\":$got,\"ram_GBps\":$ceiling}")
  done
  json+=("\"iobench\":$(json_list "${rows[@]}")")
fi

pack_on "$drives"
cfg=$("$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); c=c.get("text_config",c)
print(c["num_hidden_layers"]-c.get("first_k_dense_replace",1), c["num_experts_per_token"])' "$ckpt/config.json")
read -r moe_layers top_k <<<"$cfg"
records=$((moe_layers * top_k))
c_ram=

# ---- 2. --sync under the model: floor + compute ----
if [[ " $checks " == *" 2 "* ]]; then
  c_l=() s_l=() st_l=() r_l=() w_l=()
  for r in $(seq 1 "$rounds"); do
    c_before=$(ram_compute)
    # shellcheck disable=SC2046
    read -r s st mb < <(run --sync --predict off $(model "$rate_mbps"))
    c_after=$(ram_compute)
    c=$(calc "($c_before + $c_after) / 2")
    floor=$(calc "$mb / ($drives * $rate_mbps) + $records * $latency_us / 1000000")
    c_l+=("$c") s_l+=("$s") st_l+=("$st") r_l+=("$(ratio "$s" "$c + $floor")") w_l+=("$(ratio "$st" "$floor")")
    say "sync round $r, $drives drives of $rate_mbps MB/s: $s s/token; floor $floor ($mb MB, $records records a token); against RAM compute $c ($c_before, $c_after) + floor: ${r_l[-1]}x; against its own compute $(calc "$s - $st") + floor (its wait $st against the floor): ${w_l[-1]}x"
  done
  c_ram=$(med "${c_l[@]}")
  say "sync under the model, medians: ${s_l[*]} s/token are $(med "${r_l[@]}")x RAM compute + floor (rounds ${r_l[*]}), $(med "${w_l[@]}")x their own compute + floor (rounds ${w_l[*]})"
  json+=("\"sync\":{\"drives\":$drives,\"drive_MBps\":$rate_mbps,\"records_per_token\":$records,\"mb_per_token\":$mb,\"floor_s\":$floor,\"ram_compute_s\":$(json_list "${c_l[@]}"),\"s_per_token\":$(json_list "${s_l[@]}"),\"stall_s\":$(json_list "${st_l[@]}"),\"over_ram_compute_plus_floor\":$(json_list "${r_l[@]}"),\"over_own_compute_plus_floor\":$(json_list "${w_l[@]}")}")
fi

# ---- 3. pipelined against sync at read time ~ compute time ----
if [[ " $checks " == *" 3 "* ]]; then
  # What cannot overlap reads: a token's compute outside its MoE stages' shared + routed
  # part (from the "shared + latent" span to the MoE span's end), from a RAM run's trace
  # (its first token left out), as a share of that run's compute.
  read -r t_tr st_tr mb < <(run --sync --predict off --trace "$work/ram.json")
  u_tr=$("$py" - "$work/ram.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("tid") == 1 and e["ph"] in "BE"]
stack, tokens = [], []
for e in ev:
    if e["ph"] == "B":
        stack.append(e)
        if e["name"] == "token":
            tokens.append({"over": 0.0})
        elif e["name"] == "shared + latent" and stack[-2]["name"] == "MoE":
            stack[-2]["shared_at"] = e["ts"]
    else:
        b = stack.pop()
        if b["name"] == "token":
            tokens[-1]["dur"] = e["ts"] - b["ts"]
        elif b["name"] == "MoE" and tokens and "shared_at" in b:
            tokens[-1]["over"] += e["ts"] - b["shared_at"]
done = [t for t in tokens[1:] if "dur" in t]
print(f"{sum(t['dur'] - t['over'] for t in done) / len(done) / 1e6:.6f}")
EOF
)
  share=$(ratio "$u_tr" "$t_tr - $st_tr")
  [[ -n $c_ram ]] || c_ram=$(ram_compute)
  rate=$(calc "$mb / $c_ram / $drives" | xargs printf %.0f) # a token's reads take its compute
  # floors: every record's bytes at the rate, a latency per record (sync) or per MoE
  # layer (pipelined: a layer's reads go out together)
  f_sync=$(calc "$mb / ($drives * $rate) + $records * $latency_us / 1000000")
  f_pipe=$(calc "$mb / ($drives * $rate) + $moe_layers * $latency_us / 1000000")
  ts_l=() st_l=() tp_l=() tq_l=() rp_l=() rq_l=() b_l=()
  for r in $(seq 1 "$rounds"); do
    # shellcheck disable=SC2046
    read -r ts st _ < <(run --sync --predict off $(model "$rate"))
    # shellcheck disable=SC2046
    read -r tp _ _ < <(run --predict off $(model "$rate"))
    # shellcheck disable=SC2046
    read -r tq _ _ < <(run --predict on $(model "$rate"))
    c=$(calc "$ts - $st")
    u=$(calc "$share * $c")
    bound=$(calc "o = $c - $u; if ($f_pipe > o) o = $f_pipe; $u + o")
    ts_l+=("$ts") st_l+=("$st") tp_l+=("$tp") tq_l+=("$tq")
    rp_l+=("$(ratio "$tp" "$ts")") rq_l+=("$(ratio "$tq" "$ts")") b_l+=("$(ratio "$bound" "$ts")")
    say "overlap round $r, $drives drives of $rate MB/s: sync $ts s/token (compute $c, wait $st against a floor of $f_sync); pipelined $tp (${rp_l[-1]}x sync); with prediction $tq (${rq_l[-1]}x sync); bound ${b_l[-1]}x sync"
  done
  say "at $drives drives of $rate MB/s (a token's reads ~ its compute), medians: pipelined $(med "${rp_l[@]}")x sync, with prediction $(med "${rq_l[@]}")x sync; compute that cannot overlap reads $share of it (traced: $u_tr of $(calc "$t_tr - $st_tr") s/token), which bounds pipelined to $(med "${b_l[@]}")x sync"
  json+=("\"overlap\":{\"drives\":$drives,\"drive_MBps\":$rate,\"ram_compute_s\":$c_ram,\"sync_floor_s\":$f_sync,\"pipeline_floor_s\":$f_pipe,\"unoverlappable_share\":$share,\"traced_unoverlappable_s\":$u_tr,\"traced_compute_s\":$(calc "$t_tr - $st_tr"),\"sync_s\":$(json_list "${ts_l[@]}"),\"sync_stall_s\":$(json_list "${st_l[@]}"),\"pipeline_s\":$(json_list "${tp_l[@]}"),\"predict_s\":$(json_list "${tq_l[@]}"),\"pipeline_over_sync\":$(json_list "${rp_l[@]}"),\"predict_over_sync\":$(json_list "${rq_l[@]}"),\"bound_over_sync\":$(json_list "${b_l[@]}")}")
fi

json+=("\"load\":\"$(uptime | sed 's/.*load average: //')\"")
echo "{$(json_list "${json[@]}" | sed 's/^\[//; s/\]$//')}" >"$out"
"$py" -c 'import json,sys; json.load(open(sys.argv[1]))' "$out" || die "$out: not JSON"
say "wrote $out (every run's statistics in $log)"
