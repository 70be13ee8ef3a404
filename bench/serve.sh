#!/bin/bash
# The serve benchmark (a stage of bench/run.sh, or run alone): k3-bench on an emulated box
# of N_DRIVES drives (bench/emulate.sh), or on DRIVES, behind `k3-uring serve --no-cache`,
# then for each B in CLIENTS a fresh server with
# --parallel B and B streaming clients at once (bench/serve_clients.py): decode tokens/s,
# bytes read per generated token, the union of experts each MoE layer read per decode
# step beside the uniform-routing expectation, time to first token; the table and its
# goal ratio from bench/serve_report.py, in bench/results/serve-STAMP.{json,md}.
# Knobs (environment; defaults in bench/lib.sh where shared): CKPT (k3-bench), MBPS (100),
#   DRIVES (empty: emulated; else these folders, real drives, packed in a subfolder each),
#   N_DRIVES=4 (emulated drives), CLIENTS="1 2 4 8 16", SERVE_TOKENS=16 (each client's
#   max_tokens), THREADS=0 (one per core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=serve.sh
source "$root/bench/lib.sh"
k3=${K3:-$root/k3-uring}
ckpt=${CKPT:-$bench_default_ckpt}
drives=${DRIVES:-}
n_drives=${N_DRIVES:-4}
mbps=${MBPS:-$bench_default_mbps}
clients=${CLIENTS:-1 2 4 8 16}
tokens=${SERVE_TOKENS:-16}
threads=${THREADS:-0}
name=serve
py=/usr/bin/python3
stamp=${BENCH_STAMP:-$(date -u +%Y%m%d-%H%M%S)}
res=${BENCH_RESULTS:-$root/bench/results}
work=$(mktemp -d)
server=

for c in $clients; do
  check_uint CLIENTS "$c"
  ((c <= 32)) || die "CLIENTS: $c is above serve's --parallel limit of 32"
done
[[ -x $k3 ]] || die "no $k3: run make first"
[[ -f $ckpt/config.json ]] || die "CKPT=$ckpt holds no config.json (k3-uring synth --config k3-bench --seed 1 --out $ckpt)"

packs=()
stop_server() {
  [[ -n $server ]] || return 0
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=
}
cleanup() {
  stop_server
  rm -rf "$work" "${packs[@]}"
  [[ -n $drives ]] || "$root/bench/emulate.sh" down --name $name >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

say "every knob: CKPT=$ckpt DRIVES=$drives N_DRIVES=$n_drives MBPS=$mbps CLIENTS=\"$clients\" SERVE_TOKENS=$tokens THREADS=$threads"
if [[ -n $drives ]]; then
  IFS=, read -r -a folders <<<"$drives"
  for d in "${folders[@]}"; do packs+=("$d/k3-serve-$stamp"); done
  box_drives=$(IFS=,; echo "${packs[*]}")
  mkdir -p "${packs[@]}"
  say "packing $ckpt onto ${#packs[@]} drives: $box_drives"
  "$k3" pack --checkpoint "$ckpt" --drives "$box_drives" -q || die "pack onto $box_drives failed"
  where="${#packs[@]} real drives ($drives)"
  in_box=()
else
  say "packing $ckpt onto $n_drives emulated drives of $mbps MB/s"
  packed_box "$k3" "$ckpt" $name "$n_drives" "$mbps"
  trap cleanup EXIT INT TERM
  where="$n_drives emulated drives of $mbps MB/s"
  in_box=("$root/bench/emulate.sh" exec --name "$name" --)
fi

# start_server B: a fresh server with --parallel B inside the box; sets url.
start_server() {
  local log=$work/server-$1.log
  "${in_box[@]}" "$k3" serve --drives "$box_drives" --no-cache \
    --parallel "$1" --port 0 --ctx-size 64 --threads "$threads" -q 2>"$log" &
  server=$!
  for _ in $(seq 600); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log")
    [[ -n $url ]] && return 0
    kill -0 "$server" 2>/dev/null || die "serve --parallel $1 exited: $(tail -1 "$log")"
    sleep 0.1
  done
  die "serve --parallel $1 did not listen within a minute"
}

for b in $clients; do
  drop_caches
  start_server "$b"
  "$py" "$root/bench/serve_clients.py" --url "$url" --clients "$b" --tokens "$tokens" >>"$work/rows.jsonl"
  stop_server
  say "B=$b: $(tail -1 "$work/rows.jsonl" | cut -c1-200)"
done

experts=$(sed -n 's/.*"num_experts": *\([0-9]*\).*/\1/p' "$ckpt/config.json" | head -1)
top_k=$(sed -n 's/.*"num_experts_per_token": *\([0-9]*\).*/\1/p' "$ckpt/config.json" | head -1)
printf '{"stamp":"%s","what":"%s on %s, --no-cache, %s tokens a client, %s (%s CPUs), commit %s","experts":%s,"top_k":%s}\n' \
  "$stamp" "$(basename "$ckpt")" "$where" "$tokens" "$(lscpu | sed -n 's/^Model name: *//p')" \
  "$(nproc)" "$(git -C "$root" log -1 --format=%h)" "$experts" "$top_k" >"$work/meta.json"
"$py" "$root/bench/serve_report.py" "$work/rows.jsonl" "$work/meta.json" "$res/serve-$stamp"
say "wrote $res/serve-$stamp.json and .md"
