#!/bin/bash
# The serve soak (not in make test; ten minutes): one `k3-uring serve` of the tiny model,
# packed on two folders and read with K3_FAULTS on (faults the read path recovers from),
# against mixed clients from several loopback addresses (127.0.0.2 and up; nothing
# leaves the machine; bench/soak_clients.py): whole and streamed requests, clients that
# hang up mid-stream, malformed and oversized bodies, slow senders, bursts of idle
# half-open connections past the per-address limit, tool and chat requests on kept-alive
# connections.  Every well-formed request must be answered with a quiet server's answer
# (text, tokens, logits hash) or 503; the server's RSS and open descriptors are taken at
# each minute (flat after the first two, within 5%, less the read area and the prompt
# store, which fill up to their budgets by design); /metrics must agree with the
# clients' counts; at the end no sequence is left running and SIGTERM exits 0.
# The server runs with serve's default connection options.
# Knobs: SOAK_SECONDS (600), SOAK_FAULTS (eio:0.002,short:0.03,eagain:0.02,delay:0.002; a
#   read that fails with -EIO is tried 3 times, so none stands), SOAK_PARALLEL (2), K3 (the
#   binary).  Results: bench/results/soak-STAMP.{md,json}.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=soak.sh
source "$root/bench/lib.sh"
k3=${K3:-$root/k3-uring}
seconds=${SOAK_SECONDS:-600}
faults=${SOAK_FAULTS:-eio:0.002,short:0.03,eagain:0.02,delay:0.002}
parallel=${SOAK_PARALLEL:-2}
py=/usr/bin/python3
stamp=${BENCH_STAMP:-$(date -u +%Y%m%d-%H%M%S)}
res=${BENCH_RESULTS:-$root/bench/results}
mkdir -p "$res"
check_uint SOAK_SECONDS "$seconds"
[[ -x $k3 ]] || die "no $k3: run make first"
[[ -x $py ]] || die "no $py"
work=$(mktemp -d)
server=
clients=
cleanup() {
  [[ -z $clients ]] || kill "$clients" 2>/dev/null || true
  [[ -z $server ]] || kill -9 "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
say "every knob: SOAK_SECONDS=$seconds SOAK_FAULTS=$faults SOAK_PARALLEL=$parallel K3=$k3"

"$k3" synth --config k3-tiny --seed 1 --out "$work/tiny" -q
mkdir -p "$work/a" "$work/b"
"$k3" pack --checkpoint "$work/tiny" --drives "$work/a,$work/b" -q
# --ram floor: every segment streamed, so the faults meet reads all along
serve_args=(serve --drives "$work/a,$work/b" --ram floor --parallel "$parallel" --port 0 -q)

# start NAME [ENV...]: a server; sets server (its pid) and url.
start() {
  local name=$1 i port=""
  shift
  env "$@" "$k3" "${serve_args[@]}" 2>"$work/$name.log" &
  server=$!
  for ((i = 0; i < 600; i++)); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/$name.log")
    [[ -n $port ]] && curl -sf --max-time 5 "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$server" 2>/dev/null || die "$name did not start: $(cat "$work/$name.log")"
    sleep 0.1
  done
  [[ -n $port ]] || die "$name did not listen: $(cat "$work/$name.log")"
  url=http://127.0.0.1:$port
}
# stop: SIGTERM, and the exit code in stop_rc.
stop() {
  kill -TERM "$server"
  stop_rc=0
  wait "$server" || stop_rc=$?
  server=
}
metric() { curl -s --max-time 10 "$url/metrics" | sed -n "s/^$1 //p"; }

start quiet
"$py" "$root/bench/soak_clients.py" reference "$url" "$work/ref.json"
stop
say "the quiet server's answers: $(cat "$work/ref.json")"

start soak K3_FAULTS="$faults" K3_FAULTS_SEED=7
"$py" "$root/bench/soak_clients.py" run "$url" "$work/ref.json" "$seconds" "$work/out.json" &
clients=$!
# sample MINUTE: the server's RSS (KiB), descriptors, connections held, and the KiB of
# the two things that grow up to their budgets by design: the read area in memory (the
# expert cache grows into it at the pace of the thread that faults it in ahead) and the
# prompt store's states (one stored per chat turn until --cache-ram is full); one line.
sample() {
  local rss fds metrics open area store
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$server/status")
  fds=$(ls "/proc/$server/fd" | wc -l)
  metrics=$(curl -s --max-time 10 "$url/metrics")
  open=$(sed -n 's/^k3_connections_open //p' <<<"$metrics")
  area=$(($(sed -n 's/^k3_read_area_bytes //p' <<<"$metrics") / 1024))
  store=$(($(sed -n 's/^k3_prompt_cache_bytes //p' <<<"$metrics") / 1024))
  echo "$1 $rss $fds $open $area $store" >>"$work/samples"
  say "minute $1: RSS $rss KiB ($area KiB the read area, $store KiB the prompt store)," \
    "$fds descriptors, $open connections held"
}
t0=$SECONDS
minutes=$(((seconds + 59) / 60))
for ((mn = 0; mn <= minutes; mn++)); do
  while ((SECONDS - t0 < mn * 60)) && kill -0 "$clients" 2>/dev/null; do sleep 1; done
  kill -0 "$server" 2>/dev/null || die "the server died at minute $mn: $(tail -5 "$work/soak.log")"
  sample "$mn"
done
wait "$clients" || die "the clients failed"
clients=

# No stuck sequence: once the clients are gone, nothing runs or waits.
stuck=yes
for ((i = 0; i < 600; i++)); do
  [[ $(metric k3_requests_running) == 0 && $(metric k3_requests_queued) == 0 ]] && { stuck=no; break; }
  sleep 0.1
done
curl -s "$url/metrics" >"$work/metrics.txt"
stop
say "SIGTERM: exit $stop_rc"

"$py" - "$work/out.json" "$work/samples" "$work/metrics.txt" "$stuck" "$stop_rc" "$seconds" \
  "$res/soak-$stamp" <<'EOF'
import json, re, sys
out, samples, metrics, stuck, stop_rc, seconds, base = sys.argv[1:]
counts = json.load(open(out))
rows = [list(map(int, l.split())) for l in open(samples)]
m = {}
for line in open(metrics):
    g = re.match(r'^(k3_\w+(?:\{[^}]*\})?) (\S+)$', line)
    if g:
        m[g.group(1)] = float(g.group(2))
c = counts["counts"]
get = lambda kind, outcome: c.get(kind, {}).get(outcome, 0)
wrong = sum(v for k, o in c.items() for n, v in o.items()
            if k in ("whole", "stream", "slow sender", "kept-alive chat") and n not in ("right", "503"))
answered = sum(get(k, "right") + get(k, "wrong") for k in ("whole", "stream", "slow sender", "kept-alive chat"))
hangups = get("hang up", "left mid-stream")
done = m.get("k3_requests_total", -1)
checks = [
    ("every well-formed request right or 503", wrong == 0, f"{wrong} otherwise"),
    ("no stuck sequence at the end", stuck == "no", f"stuck: {stuck}"),
    ("SIGTERM exit 0", stop_rc == "0", f"exit {stop_rc}"),
    ("faults injected (reads retried)", m.get("k3_read_retries_total", 0) > 0, f'{m.get("k3_read_retries_total", 0):.0f} retries'),
    ("k3_requests_total between the 200s and the 200s + hang-ups", answered <= done <= answered + hangups,
     f"{done:.0f} against {answered} + {hangups}"),
]
for name, metric, outcome in (
        ("refused at accept = the idle bursts' refused", 'k3_connections_refused_total{reason="limit"}', "refused at once"),
        ("read timeouts = the idle bursts' closed at the deadline", 'k3_connections_timed_out_total{phase="read"}', "closed at the read deadline")):
    server, clients = m.get(metric, -1), get("idle", outcome)
    checks.append((name, server == clients, f"{server:.0f} against {clients}"))
# flat after warm-up: from the start of minute 2 to the end, within 5%: RSS less the read
# area and the prompt store (each grows up to its budget by design), descriptors less the
# connections held at that moment (they come and go with the clients)
warm = [r for r in rows if r[0] >= 2]
if len(warm) >= 2:
    rss0, rss1 = (r[1] - r[4] - r[5] for r in (warm[0], warm[-1]))
    fd0, fd1 = warm[0][2] - warm[0][3], warm[-1][2] - warm[-1][3]
    checks.append(("RSS less the read area and the prompt store flat after warm-up (within 5%)",
                   abs(rss1 - rss0) <= 0.05 * rss0,
                   f"{rss0} -> {rss1} KiB (the area {warm[0][4]} -> {warm[-1][4]}, the store "
                   f"{warm[0][5]} -> {warm[-1][5]} KiB)"))
    checks.append(("descriptors less connections flat after warm-up", abs(fd1 - fd0) <= max(1, 0.05 * fd0), f"{fd0} -> {fd1}"))
md = [f"# serve soak, {int(seconds)} s\n", "| client | outcome | count |", "| --- | --- | --- |"]
for kind in sorted(c):
    for outcome, n in sorted(c[kind].items()):
        md.append(f"| {kind} | {outcome} | {n} |")
md += ["", "| minute | RSS KiB | the read area, KiB | the prompt store, KiB | descriptors | "
       "connections held |", "| --- | --- | --- | --- | --- | --- |"]
md += [f"| {r[0]} | {r[1]} | {r[4]} | {r[5]} | {r[2]} | {r[3]} |" for r in rows]
md += ["", "| /metrics | value |", "| --- | --- |"]
md += [f"| `{k}` | {v:.0f} |" for k, v in sorted(m.items()) if k.startswith(("k3_connections", "k3_requests", "k3_tokens_generated", "k3_read_retries"))]
md += ["", "| check | held | what |", "| --- | --- | --- |"]
md += [f"| {name} | {'yes' if ok else '**no**'} | {what} |" for name, ok, what in checks]
if counts["notes"]:
    md += ["", "notes (first ones):", ""] + [f"- {n}" for n in counts["notes"][:20]]
text = "\n".join(md) + "\n"
open(base + ".md", "w").write(text)
json.dump({"counts": c, "samples": rows, "metrics": m, "checks": [[n, ok, w] for n, ok, w in checks]},
          open(base + ".json", "w"), indent=1)
print(text)
sys.exit(0 if all(ok for _, ok, _ in checks) else 1)
EOF
