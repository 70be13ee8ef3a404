#!/bin/bash
# Prompts at the drives' floor: k3-bench's prompts read off a 1-drive pack inside a memory
# cgroup (a box with little RAM), page cache dropped before each run, beside fio's rate on
# the same file in the same run.
#
#   1. prompts of PROMPTS random ids (seeded), -n 1: prompt seconds, bytes read, the
#      union's bytes (records the passes' layers asked for x a record's bytes), the run's
#      compute (its prompt time less its wait for reads) and the floor max(union bytes /
#      fio's rate, compute).  Goals: bytes read <= 1.05 x the union; prompt time <= 1.2 x
#      the floor.  The same prompt in 32-row passes (-b 32) beside it.
#      Also the read area's fresh memory the prompt took and the seconds spent faulting it
#      in (inside the wait for reads; slow where a hypervisor backs memory lazily).
#   2. a two-turn conversation through serve: the second turn's time to first token and
#      bytes read, against a fresh server given the second turn's prompt, and against
#      its new tokens alone (a prompt of just them on a fresh server).
#   3. serve's schedule: a stream decoding while a LONG-id prompt arrives, for each
#      --prefill-chunk of CHUNKS (prompt rows a step takes beside decode rows): the
#      stream's time between tokens before and at most while the prompt is read, and
#      the prompt's time to first token.
#   4. the same prompts (DM_PROMPTS) under the drive model: the pack on DM_DRIVES folders,
#      each served as a drive of DM_RATE would, traced: prompt seconds and the wait for
#      reads against the union at the modelled rate and the modelled drives' busy time,
#      and how much of the routed experts' compute ran while a read was outstanding
#      (bench/pass_overlap.py).
#
# usage: bench/prefill.sh CHECKPOINT
# knobs (environment), each printed with its value when the script starts:
#   K3        the binary                                        (./k3-uring)
#   WORK      folder for the pack, on the disk measured         (DATA's prefill: bench/lib.sh)
#   RAM       the run's --ram                                   (5G)
#   CGROUP    the memory cgroup's limit, v1 (none: "")         (6G)
#   PROMPTS   prompt lengths                                    ("256 1024 4096")
#   CHUNKED   lengths also run in 32-row passes                 ("256")
#   TURN1 TURN2  the conversation: ids in turn 1, new ids in 2  (1024 64)
#   LONG      part 3: the prompt's ids                          (512)
#   CHUNKS    part 3: --prefill-chunk values                     ("16 128 2048")
#   STREAM_TOKENS  part 3: the stream's tokens, to outlast the prompt at chunk 16 (LONG/16 + 24)
#   DM_DRIVES DM_RATE  part 4: modelled drives and each one's rate  (4 314MB/s,80us)
#   DM_PROMPTS         part 4: prompt lengths                    ("256 1024 4096")
#   THREADS   compute threads, 0 = a core each                  (0)
#   SETTLE    seconds to wait after dropping the page cache, so that a VM's host takes
#             back the memory the last run freed and every run faults its memory in
#             equally cold (run right after another, a run finds it warm: 0.8 s of
#             faulting instead of 9 for the same 2.6 GB); 0 on bare metal   (30)
#   PARTS     which parts to run                                ("1 2 3 4")
# Writes bench/results/prefill-DATE.json (every figure) and .log (every run's statistics).
set -euo pipefail
prog=prefill.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
ckpt=${1:-${CKPT:?usage: bench/prefill.sh CHECKPOINT (or CKPT=)}}
[[ -f $ckpt/config.json ]] || die "$ckpt: no config.json (a checkpoint folder as shipped)"
k3=$(realpath "${K3:-$root/k3-uring}")
work=${WORK:-$bench_data/prefill}
ram=${RAM:-5G}
cgroup_limit=${CGROUP-6G}
prompts=${PROMPTS:-256 1024 4096}
chunked=${CHUNKED:-256}
turn1=${TURN1:-1024}
turn2=${TURN2:-64}
long=${LONG:-512}
chunks=${CHUNKS:-16 128 2048}
stream_tokens=${STREAM_TOKENS:-$((long / 16 + 24))}
dm_drives=${DM_DRIVES:-4}
dm_rate=${DM_RATE:-314MB/s,80us}
dm_prompts=${DM_PROMPTS:-256 1024 4096}
threads=${THREADS:-0}
settle=${SETTLE:-30}
parts=${PARTS:-1 2 3 4}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
[[ -x $k3 ]] || die "$k3: not built (make)"
check_uint SETTLE "$settle" allow_zero
[[ $(id -u) -eq 0 ]] || die "needs root (the page cache is dropped, a memory cgroup made)"
command -v fio >/dev/null || die "needs fio (apt-get install fio)"
for tool in curl jq; do command -v $tool >/dev/null || die "needs $tool"; done
for v in K3=$k3 WORK=$work RAM=$ram CGROUP=$cgroup_limit "PROMPTS=$prompts" "CHUNKED=$chunked" \
         TURN1=$turn1 TURN2=$turn2 LONG=$long "CHUNKS=$chunks" STREAM_TOKENS=$stream_tokens DM_DRIVES=$dm_drives \
         DM_RATE=$dm_rate "DM_PROMPTS=$dm_prompts" THREADS=$threads SETTLE=$settle "PARTS=$parts" OMP_WAIT_POLICY=$OMP_WAIT_POLICY; do
  say "$v"
done
say "load: $(uptime | sed 's/.*load/load/')"

mkdir -p "$work" "$root/bench/results"
stamp=$(date -u +%Y%m%d-%H%M%S)
out="$root/bench/results/prefill-$stamp.json"
log="$root/bench/results/prefill-$stamp.log"
: >"$log"
# ensure_pack FOLDER...: the checkpoint packed over the folders (made once, kept).
ensure_pack() {
  [[ -f $1/k3-uring.manifest ]] && return 0
  local need=$(( $(du -sb "$ckpt" | cut -f1) / 1000000000 + 2 ))
  (( $(free_bytes "$work") / 1000000000 >= need )) || die "$work: a pack of $ckpt needs about $need GB"
  rm -rf "$@" && mkdir -p "$@"
  say "packing $ckpt onto $*"
  "$k3" pack --checkpoint "$ckpt" --drives "$(IFS=,; echo "$*")" -q || die "pack onto $*"
}
pack="$work/d0"
want() { [[ " $parts " == *" $1 "* ]]; }
if want 1 || want 2 || want 3; then ensure_pack "$pack"; fi

# The memory cgroup every run goes into (cgroup v1; CGROUP= runs without one).
cg=""
if [[ -n $cgroup_limit ]]; then
  cg=/sys/fs/cgroup/memory/k3-prefill-$$
  mkdir "$cg" || die "cannot make the memory cgroup $cg (cgroup v1 memory controller)"
  trap 'rmdir "$cg" 2>/dev/null || true' EXIT
  to_bytes "$cgroup_limit" >"$cg/memory.limit_in_bytes"
fi
# "${in_cgroup[@]}" CMD...: CMD inside the cgroup, as the same process (a server started
# so in the background is $!).
in_cgroup=()
# shellcheck disable=SC2016
[[ -z $cg ]] || in_cgroup=(bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$cg")

fio_rate() {
  local json shard=$pack/k3-uring.data
  local fio_size=$(( $(stat -c %s "$shard") / 2 / 1048576 ))M
  json=$(mktemp)
  drop_caches
  fio --name=disk --filename="$shard" --readonly --rw=read --bs=4M --iodepth=16 \
    --ioengine=io_uring --direct=1 --size="$fio_size" --output-format=json >"$json" 2>&1 ||
    { rm -f "$json"; die "fio on $shard failed"; }
  fio_read_bw "$json" | awk '{ printf "%.3f\n", $1 / 1e9 }'
  rm -f "$json"
}
# ids N: N seeded pseudo-random ids of the vocabulary.
vocab=$(jq '.text_config.vocab_size // .vocab_size' "$ckpt/config.json")
ids() { awk -v n="$1" -v v="$vocab" 'BEGIN { srand(7); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), int(rand() * (v - 256)) + 1 }'; }
# prompt_run N DRIVES [ARGS]: "seconds stall MB_read records_read MB_asked MB_taken
# seconds_taking" of the prompt (the last two: the read area's fresh memory the prompt took,
# and the time spent faulting it in).
prompt_run() {
  local n=$1 drives=$2
  shift 2
  drop_caches
  sleep "$settle"
  "${in_cgroup[@]}" "$k3" run --drives "$drives" --ram "$ram" -t "$threads" --ids "$(ids "$n")" -n 1 \
    --stats "$@" 2>"$work/err" >/dev/null || die "run of $n ids $*: $(tail -1 "$work/err")"
  { echo "== run of $n ids $*"; cat "$work/err"; } >>"$log"
  sed -n 's/^k3-uring: prompt [0-9]*: \([0-9.]*\) s, \([0-9.]*\) MB in .*stall \([0-9.]*\) s, \([0-9]*\) records read, [0-9]* cache hits, [0-9]* records asked (\([0-9.]*\) MB).*area taken \([0-9.]*\) MB in \([0-9.]*\) s.*/\1 \3 \2 \4 \5 \6 \7/p' "$work/err"
}

json_parts=()
summary=()

# ---- 1. prompts off the disk ----
part_prompts() {
  local n rate t stall mb asked_mb taken_mb taking union_gb compute floor row line t32 mb32 rows=()
  for n in $prompts; do
    rate=$(fio_rate)
    read -r t stall mb _ asked_mb taken_mb taking < <(prompt_run "$n" "$pack") || die "no prompt statistics for $n ids"
    union_gb=$(awk -v a="$asked_mb" 'BEGIN { printf "%.3f", a / 1000 }')
    compute=$(awk -v t="$t" -v s="$stall" 'BEGIN { printf "%.3f", t - s }')
    floor=$(awk -v u="$union_gb" -v r="$rate" -v c="$compute" 'BEGIN { f = u / r; printf "%.3f", (f > c ? f : c) }')
    row="\"tokens\":$n,\"seconds\":$t,\"stall\":$stall,\"read_gb\":$(awk -v m="$mb" 'BEGIN { printf "%.3f", m / 1000 }'),\"union_gb\":$union_gb,\"fio_gbps\":$rate,\"compute\":$compute,\"floor\":$floor,\"area_taken_gb\":$(awk -v m="$taken_mb" 'BEGIN { printf "%.3f", m / 1000 }'),\"area_taking_s\":$taking"
    line=$(awk -v n="$n" -v t="$t" -v m="$mb" -v u="$union_gb" -v r="$rate" -v c="$compute" -v f="$floor" -v tm="$taken_mb" -v ts="$taking" \
      'BEGIN { printf "%5d ids: %7.1f s (%.3f s a token), read %6.2f GB = %.3f x the union (%.2f GB), fio %.2f GB/s, compute %.1f s, floor %.1f s: %.2f x the floor; %.2f GB of fresh memory taken for the cache in %.1f s", n, t, t / n, m / 1000, m / 1000 / u, u, r, c, f, t / f, tm / 1000, ts }')
    if [[ " $chunked " == *" $n "* ]]; then
      read -r t32 _ mb32 _ _ _ _ < <(prompt_run "$n" "$pack" -b 32) || die "no statistics for $n ids in 32-row passes"
      row+=",\"seconds_b32\":$t32,\"read_gb_b32\":$(awk -v m="$mb32" 'BEGIN { printf "%.3f", m / 1000 }')"
      line+=$(awk -v t="$t32" -v m="$mb32" -v a="$t" 'BEGIN { printf "; in 32-row passes %.1f s, %.2f GB (%.1fx)", t, m / 1000, t / a }')
    fi
    rows+=("{$row}")
    summary+=("$line")
    say "$line"
  done
  json_parts+=("\"prompts\":[$(IFS=,; echo "${rows[*]}")]")
}

# ---- 2. a two-turn conversation through serve ----
# start_serve ARGS...: a server on the pack (in the cgroup), ARGS added; sets url and pid.
start_serve() {
  local logf="$work/serve.log" port=""
  drop_caches
  "${in_cgroup[@]}" "$k3" serve --drives "$pack" --ram "$ram" -t "$threads" --port 0 "$@" 2>"$logf" &
  pid=$!
  for _ in $(seq 600); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$logf")
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.2
  done
  [[ -n $port ]] || die "serve did not start: $(tail -2 "$logf")"
  url="http://127.0.0.1:$port"
}
stop_serve() {
  kill -TERM "$pid"
  wait "$pid" || true
  cat "$work/serve.log" >>"$log"
}
serve_turns() { # PROMPT_IDS...: "seconds read_bytes cached" of each prompt in turn, one server
  local p before after t
  start_serve --parallel 1 --ctx-size $((turn1 + turn2 + 64))
  for p in "$@"; do
    before=$(curl -s "$url/metrics" | awk '/^k3_read_bytes_total/ { print $2 }')
    # One token: the request's time is its time to first token.
    t=$(curl -s -o "$work/answer" -w '%{time_total}' "$url/v1/completions" \
      -d "{\"prompt\": [$p], \"max_tokens\": 1, \"temperature\": 0}")
    after=$(curl -s "$url/metrics" | awk '/^k3_read_bytes_total/ { print $2 }')
    jq -r --arg t "$t" --arg b "$before" --arg a "$after" \
      '"\($t) \(($a | tonumber) - ($b | tonumber)) \(.usage.prompt_tokens_details.cached_tokens)"' "$work/answer"
  done
  stop_serve
}
part_turns() {
  local first_ids new_ids conv fresh alone ttft2 bytes2 cached2 ttft_fresh bytes_fresh ttft_alone bytes_alone turns
  first_ids=$(ids "$turn1")
  new_ids=$(ids $((turn1 + turn2)) | cut -d, -f$((turn1 + 1))-)
  mapfile -t conv < <(serve_turns "$first_ids" "$first_ids,$new_ids")
  mapfile -t fresh < <(serve_turns "$first_ids,$new_ids")
  mapfile -t alone < <(serve_turns "$new_ids")
  read -r ttft2 bytes2 cached2 <<<"${conv[1]}"
  read -r ttft_fresh bytes_fresh _ <<<"${fresh[0]}"
  read -r ttft_alone bytes_alone _ <<<"${alone[0]}"
  turns=$(awk -v a="$ttft2" -v b="$bytes2" -v c="$cached2" -v f="$ttft_fresh" -v fb="$bytes_fresh" -v n="$ttft_alone" -v nb="$bytes_alone" -v t2="$turn2" \
    'BEGIN { printf "second turn: %.2f s to first token, %.2f GB read, %d tokens resumed; a fresh server %.2f s, %.2f GB (%.2fx); its %s new tokens alone %.2f s, %.2f GB (%.2fx)", a, b / 1e9, c, f, fb / 1e9, a / f, t2, n, nb / 1e9, a / n }')
  say "$turns"
  summary+=("$turns")
  json_parts+=("$(printf '"turns":{"turn1":%s,"turn2":%s,"ttft":%s,"read_bytes":%s,"cached":%s,"fresh_ttft":%s,"fresh_read_bytes":%s,"alone_ttft":%s,"alone_read_bytes":%s}' \
    "$turn1" "$turn2" "$ttft2" "$bytes2" "$cached2" "$ttft_fresh" "$bytes_fresh" "$ttft_alone" "$bytes_alone")")
}

# ---- 3. a long prompt arriving while a stream decodes ----
# stream_gaps CHUNK: "median_gap max_gap long_ttft" with --prefill-chunk CHUNK: the
# stream's seconds between tokens before the long prompt came, the longest while it was
# read, and the long prompt's time to its first token.
stream_gaps() {
  start_serve --parallel 2 --prefill-chunk "$1" --ctx-size $((long + 64))
  curl -sN --max-time 3600 "$url/v1/completions" -d "{\"prompt\": [5, 17, 300], \"max_tokens\": $stream_tokens, \"ignore_eos\": true, \"stream\": true}" |
    while IFS= read -r line; do
      [[ $line == "data: [DONE]" ]] && break
      [[ $line == data:* ]] && date +%s.%N
    done >"$work/times" &
  local client=$!
  while (( $(grep -c '' "$work/times") < 4 )); do sleep 0.1; done
  local came t_long
  came=$(date +%s.%N)
  t_long=$(curl -s -o /dev/null -w '%{time_total}' "$url/v1/completions" \
    -d "{\"prompt\": [$(ids "$long")], \"max_tokens\": 1}")
  wait "$client"
  stop_serve
  local done_at
  done_at=$(awk -v c="$came" -v t="$t_long" 'BEGIN { printf "%.3f", c + t }')
  # Each gap between two tokens: before the prompt came (b), or while it was read (w).
  awk -v came="$came" -v done_at="$done_at" 'NR > 1 { if ($1 <= came) print "b", $1 - prev;
      else if (prev < done_at) print "w", $1 - prev } { prev = $1 }' "$work/times" >"$work/gaps"
  printf '%s %s %s\n' \
    "$(awk '$1 == "b" { print $2 }' "$work/gaps" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }')" \
    "$(awk '$1 == "w" && $2 > m { m = $2 } END { printf "%.3f", m }' "$work/gaps")" "$t_long"
}
part_schedule() {
  local chunk median worst t_long line rows=()
  for chunk in $chunks; do
    read -r median worst t_long < <(stream_gaps "$chunk")
    line=$(printf -- '--prefill-chunk %5d: the stream tokens %.2f s apart before, at most %.2f s while %d prompt ids were read; their first token after %.1f s' "$chunk" "$median" "$worst" "$long" "$t_long")
    say "$line"
    summary+=("$line")
    rows+=("{\"prefill_chunk\":$chunk,\"median_gap\":$median,\"max_gap\":$worst,\"long_ttft\":$t_long}")
  done
  json_parts+=("\"long_prompt\":$long,\"stream_gaps\":[$(IFS=,; echo "${rows[*]}")]")
}

# ---- 4. prompts under the drive model ----
# The pack on DM_DRIVES folders of WORK; the same cgroup and budget as part 1.
part_drive_model() {
  local n t stall mb asked_mb late modelled floor overlap line rows=() rate_mbps i dirs=() dm_list
  for ((i = 0; i < dm_drives; i++)); do dirs+=("$work/dm$dm_drives/d$i"); done
  ensure_pack "${dirs[@]}"
  dm_list=$(IFS=,; echo "${dirs[*]}")
  rate_mbps=$(to_bytes "${dm_rate%%/*}" | awk '{ printf "%.0f", $1 / 1e6 }')
  for n in $dm_prompts; do
    read -r t stall mb _ asked_mb _ _ < <(prompt_run "$n" "$dm_list" --drive-model "$dm_rate" --trace "$work/trace.json") ||
      die "no prompt statistics for $n ids under the drive model"
    late=$(sed -n 's/.*reads late, \([0-9.]*\) s of waiting the storage.*/\1/p' "$work/err")
    modelled=$(sed -n 's/.*reads outstanding \([0-9.]*\) s (modelled).*/\1/p' "$work/err")
    floor=$(awk -v a="$asked_mb" -v d="$dm_drives" -v r="$rate_mbps" 'BEGIN { printf "%.3f", a / (d * r) }')
    overlap=$(python3 "$root/bench/pass_overlap.py" "$work/trace.json") || die "bench/pass_overlap.py on the trace of $n ids"
    # The trace's read spans end when the engine takes a read, so they overstate the drives'
    # busy time while it computes; the model's own "reads outstanding" does not.
    line=$(jq -r --argjson n "$n" --argjson t "$t" --argjson s "$stall" --argjson f "$floor" \
      --arg m "${modelled:-?}" --arg late "${late:-0}" \
      '"\($n) ids under the drive model: \($t) s, waiting for reads \($s) s (the storage, slower than the model, \($late) s of it); the union at the modelled rate \($f) s, the modelled drives busy \($m) s; routed experts computed \(.expert_compute) s, \(.expert_compute_under_reads) s of it with a read not yet taken"' <<<"$overlap")
    say "$line"
    summary+=("$line")
    rows+=("$(jq -c --argjson n "$n" --argjson t "$t" --argjson s "$stall" --argjson a "$asked_mb" --argjson f "$floor" \
      --argjson late "${late:-0}" --argjson m "${modelled:-null}" \
      '{tokens: $n, seconds: $t, stall: $s, union_gb: ($a / 1000), modelled_floor: $f, modelled_busy: $m, storage_late: $late,
        trace_reads_untaken: .reads_in_flight, expert_compute, expert_compute_under_reads}' <<<"$overlap")")
  done
  rm -f "$work/trace.json"
  json_parts+=("\"drive_model\":{\"drives\":$dm_drives,\"rate\":\"$dm_rate\",\"prompts\":[$(IFS=,; echo "${rows[*]}")]}")
}

want 1 && part_prompts
want 2 && part_turns
want 3 && part_schedule
want 4 && part_drive_model
{
  printf '{"checkpoint":"%s","ram":"%s","cgroup":"%s","threads":%s,"load":"%s"' \
    "$ckpt" "$ram" "$cgroup_limit" "$threads" "$(cut -d' ' -f1-3 /proc/loadavg)"
  printf ',\n %s' "${json_parts[@]}"
  printf '\n}\n'
} >"$out"
jq empty "$out" || die "$out: not valid JSON"
say "wrote $out"
printf '%s\n' "${summary[@]}"
