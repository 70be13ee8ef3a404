#!/bin/bash
# The drive model (--drive-model, iouring/model.h) checked, then used to measure what the
# blk-throttle emulation hides: the pipelined read path against one record at a time.
# The pack lives in RAM (tmpfs), so the storage underneath is far faster than the model
# and every read time is the model's (each run says so when it is not).
#
#   1. iobench over IOBENCH_DRIVES modelled drives of RATE_MBPS each: the read path's
#      bandwidth against drives x RATE_MBPS (goal: within 5%), beside iobench without the
#      model (the RAM's ceiling, which must be far above).
#   2. run --sync --predict off under the model against floor + compute, where floor is
#      the bytes per token over DRIVES x RATE_MBPS plus a latency per record, and compute
#      the same run reading from RAM without the model (goal: within 5%).
#   3. at a rate where reading a token takes about as long as computing it: sync against
#      pipelined with --predict off and --predict on; the share of compute that cannot
#      overlap reads (everything outside the MoE stages' shared + routed part: embedding,
#      the dense layer 0, attention and the router before routing is known, the output
#      head), measured from a trace of the RAM run, and the bound it implies for the
#      pipelined run (goal: pipelined <= 0.6 x sync).
# Every run: --no-cache (each routed record read every token), the trunk resident.
#
# usage: bench/drive-model.sh CHECKPOINT
# knobs (environment), each printed with its value when the script starts:
#   K3              the binary                               (./k3-uring)
#   WORK            folder for the packs, on tmpfs           (/dev/shm/k3-drive-model)
#   RATE_MBPS       per-drive rate of checks 1 and 2, MB/s   (60: 8 drives stay far
#                   under what the RAM and checksums deliver on a loaded 2-core box)
#   LATENCY_US      per-read latency, microseconds           (80)
#   IOBENCH_DRIVES  drive counts of check 1                  ("1 2 4 8")
#   IOBENCH_TOKENS  decode steps iobench reads               (6)
#   DRIVES          drives of checks 2 and 3                 (4)
#   TOKENS          tokens generated per run                 (8)
#   ROUNDS          rounds of checks 2 and 3; medians kept   (3)
#   PROMPT          prompt ids                               (5,17,300,1200)
#   OMP_WAIT_POLICY                                          (passive: the box is shared)
# Writes bench/results/drive-model-DATE.json and a summary on stderr.
set -euo pipefail
prog=drive-model.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
ckpt=${1:?usage: bench/drive-model.sh CHECKPOINT}
[[ -f $ckpt/config.json ]] || die "$ckpt: no config.json (a checkpoint folder as shipped)"
k3=$(realpath "${K3:-$root/k3-uring}")
work=${WORK:-/dev/shm/k3-drive-model}
rate_mbps=${RATE_MBPS:-60}
latency_us=${LATENCY_US:-80}
iobench_drives=${IOBENCH_DRIVES:-1 2 4 8}
iobench_tokens=${IOBENCH_TOKENS:-6}
drives=${DRIVES:-4}
tokens=${TOKENS:-8}
rounds=${ROUNDS:-3}
prompt=${PROMPT:-5,17,300,1200}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
py=/usr/bin/python3
[[ -x $py ]] || py=python3
command -v "$py" >/dev/null || die "needs python3 (the trace and the JSON)"
[[ -x $k3 ]] || die "$k3: not built (make)"
for v in K3=$k3 WORK=$work RATE_MBPS=$rate_mbps LATENCY_US=$latency_us \
         "IOBENCH_DRIVES=$iobench_drives" IOBENCH_TOKENS=$iobench_tokens DRIVES=$drives \
         TOKENS=$tokens ROUNDS=$rounds PROMPT=$prompt OMP_WAIT_POLICY=$OMP_WAIT_POLICY; do
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

# pack_on N: the checkpoint packed over N folders in $work; sets list.
pack_on() {
  rm -rf "$work"/d*
  list=$(for i in $(seq 0 $(($1 - 1))); do mkdir -p "$work/d$i"; printf '%s,' "$work/d$i"; done)
  list=${list%,}
  "$k3" pack --checkpoint "$ckpt" --drives "$list" -q >/dev/null || die "pack over $1 drives"
}
# iobench's steady-state GB/s (its summary line).
iobench_gbps() {
  "$k3" iobench --drives "$list" --tokens "$iobench_tokens" --ram trunk --no-cache "$@" 2>&1 >/dev/null |
    tee -a "$log" | sed -n 's/.*s\/token, \([0-9.]*\) GB\/s;.*/\1/p'
}
# run ARGS...: "S_PER_TOKEN STALL_S_PER_TOKEN MB_PER_TOKEN" of a decode, its stderr kept
# in $log.
run() {
  "$k3" --drives "$list" --ids "$prompt" -n "$tokens" --ignore-eos --print-ids --no-cache "$@" \
    2>"$work/err" >/dev/null || die "run $*: $(tail -1 "$work/err")"
  cat "$work/err" >>"$log"
  if grep -q "slower than the drive model" "$work/err"; then warn "run $*: $(grep 'slower than' "$work/err")"; fi
  sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) s\/token; \([0-9.]*\) MB read per token.*stall \([0-9.]*\) s\/token.*/\1 \3 \2/p' "$work/err"
}
model() { echo "--drive-model ${1}MB/s,${latency_us}us"; }
ratio() { printf '%.4f' "$(echo "($1) / ($2)" | bc -l)"; }
calc() { printf '%.6f' "$(echo "$1" | bc -l)"; }
med() { printf '%s\n' "$@" | median; }
json_list() { local IFS=,; echo "[$*]"; }

mkdir -p "$root/bench/results"
stamp=$(date -u +%Y%m%d-%H%M%S)
out="$root/bench/results/drive-model-$stamp.json"
log="$root/bench/results/drive-model-$stamp.log"
: >"$log"

# ---- 1. bandwidth through iobench ----
io_rows=()
for n in $iobench_drives; do
  pack_on "$n"
  ceiling=$(iobench_gbps)
  # shellcheck disable=SC2046
  got=$(iobench_gbps $(model "$rate_mbps"))
  want=$(calc "$n * $rate_mbps / 1000")
  say "iobench, $n drives: $got GB/s under the model of $want GB/s ($(ratio "$got" "$want")x); RAM without it $ceiling GB/s"
  io_rows+=("{\"drives\":$n,\"model_GBps\":$want,\"got_GBps\":$got,\"ram_GBps\":$ceiling}")
done

# ---- 2. --sync under the model: floor + compute ----
pack_on "$drives"
cfg=$("$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); c=c.get("text_config",c)
print(c["num_hidden_layers"]-c.get("first_k_dense_replace",1), c["num_experts_per_token"])' "$ckpt/config.json")
read -r moe_layers top_k <<<"$cfg"
records=$((moe_layers * top_k))
# compute: a run reading from RAM without the model, less its wait for those reads (the
# model's runs read the same bytes from RAM, hidden inside the modelled wait)
compute() { # → seconds a token: a RAM run's, less its wait for reads
  local t st
  read -r t st _ < <(run --sync --predict off)
  calc "$t - $st"
}
c_list=() s_list=() st_list=() r2_list=() w2_list=()
for r in $(seq 1 "$rounds"); do
  c_before=$(compute)
  # shellcheck disable=SC2046
  read -r s st mb < <(run --sync --predict off $(model "$rate_mbps"))
  c_after=$(compute)
  c=$(calc "($c_before + $c_after) / 2")
  floor=$(calc "$mb * 1000000 / ($drives * $rate_mbps * 1000000) + $records * $latency_us / 1000000")
  c_list+=("$c") s_list+=("$s") st_list+=("$st")
  r2_list+=("$(ratio "$s" "$c + $floor")") w2_list+=("$(ratio "$st" "$floor")")
  say "sync round $r, $drives drives at $rate_mbps MB/s: $s s/token under the model; compute $c ($c_before, $c_after) + floor $floor ($mb MB, $records records a token): ${r2_list[-1]}x; its wait for reads $st s/token: ${w2_list[-1]}x the floor"
done
c_sync=$(med "${c_list[@]}")
r2=$(med "${r2_list[@]}")
say "sync under the model against floor + compute: median ${r2}x (rounds: ${r2_list[*]}); its wait against the floor: median $(med "${w2_list[@]}")x"

# ---- 3. pipelined against sync at read time ~ compute time ----
# What cannot overlap reads: the token's compute outside each MoE stage's shared + routed
# part (from its "shared + latent" span to the MoE span's end), in a RAM run's trace
# (first token left out), as a share of that run's compute.
read -r t_traced st_traced _ < <(run --sync --predict off --trace "$work/ram.json")
read -r u_traced < <("$py" - "$work/ram.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("tid") == 1 and e["ph"] in "BE"]
stack, tokens = [], []
for e in ev:
    if e["ph"] == "B":
        stack.append(e)
        if e["name"] == "token":
            tokens.append({"t": e["ts"], "over": 0.0})
        elif e["name"] == "shared + latent" and stack[-2]["name"] == "MoE":
            stack[-2]["shared_at"] = e["ts"]
    else:
        b = stack.pop()
        if b["name"] == "token":
            tokens[-1]["dur"] = e["ts"] - b["ts"]
        elif b["name"] == "MoE" and tokens and "shared_at" in b:
            tokens[-1]["over"] += e["ts"] - b["shared_at"]
done = [t for t in tokens[1:] if "dur" in t]
under = sum(t["dur"] - t["over"] for t in done)
print(f"{under / len(done) / 1e6:.6f}")
EOF
)
# a per-drive rate at which the reads of a token take the compute's time
rate3=$(echo "$mb / $c_sync / $drives" | bc -l | xargs printf %.0f)
# the pipelined floor: every record's bytes at the rate, a latency per MoE layer; the
# sync floor: a latency per record
f_pipe=$(calc "$mb / ($drives * $rate3) + $moe_layers * $latency_us / 1000000")
f_sync=$(calc "$mb / ($drives * $rate3) + $records * $latency_us / 1000000")
c3_l=() t_sync_l=() t_pipe_l=() t_pred_l=() rp_l=() rq_l=() rs_l=()
for r in $(seq 1 "$rounds"); do
  c=$(compute)
  # shellcheck disable=SC2046
  read -r ts _ < <(run --sync --predict off $(model "$rate3"))
  # shellcheck disable=SC2046
  read -r tp _ < <(run --predict off $(model "$rate3"))
  # shellcheck disable=SC2046
  read -r tq _ < <(run --predict on $(model "$rate3"))
  c3_l+=("$c") t_sync_l+=("$ts") t_pipe_l+=("$tp") t_pred_l+=("$tq")
  rp_l+=("$(ratio "$tp" "$ts")") rq_l+=("$(ratio "$tq" "$ts")") rs_l+=("$(ratio "$ts" "$c + $f_sync")")
  say "overlap round $r at $rate3 MB/s x $drives drives: compute $c; sync $ts (${rs_l[-1]}x compute + floor); pipelined $tp (${rp_l[-1]}x sync); with prediction $tq (${rq_l[-1]}x sync)"
done
t_sync=$(med "${t_sync_l[@]}") t_pipe=$(med "${t_pipe_l[@]}") t_pred=$(med "${t_pred_l[@]}")
c3=$(med "${c3_l[@]}")
share=$(ratio "$u_traced" "$t_traced - $st_traced")
unoverlap=$(calc "$share * $c3")
bound=$(calc "o = $c3 - $unoverlap; if ($f_pipe > o) o = $f_pipe; $unoverlap + o")
say "at $rate3 MB/s x $drives drives (reads ~ compute), medians: sync $t_sync s/token ($(med "${rs_l[@]}")x compute + floor); pipelined $t_pipe ($(med "${rp_l[@]}")x sync), with prediction $t_pred ($(med "${rq_l[@]}")x sync); compute that cannot overlap reads: $share of $c3 s = $unoverlap s/token (traced run), which bounds the pipelined run to $bound s/token ($(ratio "$bound" "$t_sync")x sync)"

printf '{"checkpoint":"%s","load":"%s","rate_MBps":%s,"latency_us":%s,"iobench":%s,' \
  "$ckpt" "$(uptime | sed 's/.*load average: //')" "$rate_mbps" "$latency_us" "$(json_list "${io_rows[@]}")" >"$out"
printf '"sync":{"drives":%d,"records_per_token":%d,"mb_per_token":%s,"floor_s":%s,"compute_s":%s,"model_s":%s,"model_stall_s":%s,"over_compute_plus_floor":%s,"stall_over_floor":%s},' \
  "$drives" "$records" "$mb" "$floor" "$(json_list "${c_list[@]}")" "$(json_list "${s_list[@]}")" \
  "$(json_list "${st_list[@]}")" "$(json_list "${r2_list[@]}")" "$(json_list "${w2_list[@]}")" >>"$out"
printf '"overlap":{"rate_MBps":%s,"compute_s":%s,"sync_floor_s":%s,"pipeline_floor_s":%s,"sync_s":%s,"pipeline_s":%s,"predict_s":%s,"pipeline_over_sync":%s,"predict_over_sync":%s,"sync_over_compute_plus_floor":%s,"unoverlappable_share":%s,"unoverlappable_s":%s,"bound_s":%s,"bound_over_sync":%s}}\n' \
  "$rate3" "$(json_list "${c3_l[@]}")" "$f_sync" "$f_pipe" "$(json_list "${t_sync_l[@]}")" "$(json_list "${t_pipe_l[@]}")" \
  "$(json_list "${t_pred_l[@]}")" "$(json_list "${rp_l[@]}")" "$(json_list "${rq_l[@]}")" \
  "$(json_list "${rs_l[@]}")" "$share" "$unoverlap" "$bound" "$(ratio "$bound" "$t_sync")" >>"$out"
say "wrote $out (runs' statistics in $log)"
