#!/bin/bash
# Real routing: a trained model's routing trace (routes v1, ../shared/routing) judges the
# expert cache, prediction and shared reads, tuned on some requests and reported on
# others (TUNE and HELD).  From the trace alone (bench/routesim, which runs the engine's
# own policy code, engine/stream/policy.c):
#   1. hit rate of a per-layer cache of 1/16, 1/8, 1/4, 1/2 of a layer's experts, decode
#      steps of one request after another: each --cache-policy, the offline optimum
#      (Belady: the record asked again last gives way; "belady" keeps every miss as the
#      engine does, "belady-bypass" may decline one), the next-step oracle (knows the
#      next step's experts exactly and keeps them first: what a perfect predictor of the
#      next token could give), and the same on uniform routing; goal: the default policy
#      >= 0.8 x Belady at a quarter of the experts, on HELD; then the same on DECODE's
#      traces (other models, never tuned on: each whole file);
#   2. recall of next-layer predictions from ids alone at top_k, 2 top_k, 3 top_k
#      guesses, and the reads they waste per token; goal >= 60% at 2 top_k;
#   3. unions per MoE layer of B = 1..16 requests decoding together and of prompt passes
#      of 32, 128, 1024 rows, beside uniform routing's E(1 - (1 - k/E)^P).
# Then, when MODEL holds a checkpoint of the trace's shape (k3-dsv2), `k3-uring replay`
# of REPLAY_REQUESTS through the engine with each policy, and its --hit-curve.
#
# usage: bench/replay.sh
# knobs (environment), each printed with its value when the script starts:
#   K3              the binary                                   (./k3-uring)
#   ROUTES          the trace      (../shared/routing/dsv2lite-prompts-0001-1000.routes.gz)
#   TUNE            requests the policy's constants were tuned on        (0-499)
#   HELD            requests reported on                                 (500-998)
#   DECODE          other models' decode traces, space-separated, or "" to skip
#                   (the *-decode.routes.gz beside ROUTES)
#   MODEL           a checkpoint of the trace's shape, or "" to skip 4   (DATA's k3-dsv2: bench/lib.sh)
#   REPLAY_REQUESTS requests replayed through the engine                 (500-503)
#   REPLAY_RAM      its --ram (-b 1): the trunk resident and about a quarter
#                   of k3-dsv2's experts in the cache's pool             (5500M)
# Writes bench/results/replay-DATE.{csv,md,log}.
set -euo pipefail
prog=replay.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
k3=$(realpath "${K3:-$root/k3-uring}")
routes=${ROUTES:-$root/../shared/routing/dsv2lite-prompts-0001-1000.routes.gz}
tune=${TUNE:-0-499}
held=${HELD:-500-998}
decode=${DECODE-$(ls "$(dirname "$routes")"/*-decode.routes.gz 2>/dev/null | tr '\n' ' ')}
model=${MODEL-$bench_data/k3-dsv2}
replay_requests=${REPLAY_REQUESTS:-500-503}
replay_ram=${REPLAY_RAM:-5500M}
for v in K3=$k3 ROUTES=$routes TUNE=$tune HELD=$held "DECODE=$decode" MODEL=$model \
         REPLAY_REQUESTS=$replay_requests REPLAY_RAM=$replay_ram; do say "$v"; done
if [[ ! -f $routes ]]; then
  say "skipped: ROUTES=$routes: no such trace (../shared/routing holds them)"
  exit 0
fi
sim=$root/build/rel/bench/routesim
make -C "$root" --no-print-directory build/rel/bench/routesim >/dev/null || die "building routesim failed"

stamp=${BENCH_STAMP:-$(date -u +%Y%m%d-%H%M%S)}
res=${BENCH_RESULTS:-$root/bench/results}
mkdir -p "$res"
out=$res/replay-$stamp
: >"$out.log"

say "1. cache hit rates on $held (and $tune, where the constants were tuned)"
"$sim" hits "$routes" "$held" >"$out.hits-held.csv"
"$sim" hits "$routes" "$tune" >"$out.hits-tune.csv"
for d in $decode; do
  say "1b. cache hit rates on $(basename "$d") (all of it)"
  "$sim" hits "$d" 0- >"$out.hits-$(basename "$d" .routes.gz).csv"
done
say "2. prediction from ids on $held"
"$sim" predict "$routes" "$held" >"$out.predict.csv"
say "3. unions on $held"
"$sim" unions "$routes" "$held" >"$out.unions.csv"

# The table: per cache size, each policy's hit rate and its share of Belady's.
table() { # CSV TITLE
  echo "### $2"
  echo
  echo "| cache (per layer) | lfru | lru | next-step oracle | belady | belady-bypass | lfru / belady | lfru / belady-bypass | lru / belady | oracle / belady | uniform: lfru | uniform: belady |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  awk -F, 'NR > 1 { v[$1, $2, $3] = $5; slots[$3] = $4; if (!seen[$3]++) order[n++] = $3 }
    END { for (i = 0; i < n; i++) { f = order[i]; b = v["trace", "belady", f]
      printf "| %s (%d) | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.2f | %.2f | %.2f | %.2f | %.1f%% | %.1f%% |\n", f, slots[f],
        100 * v["trace", "lfru", f], 100 * v["trace", "lru", f], 100 * v["trace", "oracle-next", f],
        100 * b, 100 * v["trace", "belady-bypass", f], v["trace", "lfru", f] / b,
        v["trace", "lfru", f] / v["trace", "belady-bypass", f], v["trace", "lru", f] / b,
        v["trace", "oracle-next", f] / b, 100 * v["uniform", "lfru", f], 100 * v["uniform", "belady", f] } }' "$1"
  echo
}
# The decode traces: the default's share of Belady's, per trace and cache size.
decode_table() {
  echo "### Cache hit rate on other models' decode traces (never tuned on; each whole file)"
  echo
  echo "| trace | cache (per layer) | lfru | lru | belady | belady-bypass | lfru / belady | lfru / belady-bypass |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  for d in $decode; do
    awk -F, -v name="$(basename "$d" .routes.gz)" '
      NR > 1 && $1 == "trace" { v[$2, $3] = $5; slots[$3] = $4; if (!seen[$3]++) order[n++] = $3 }
      END { for (i = 0; i < n; i++) { f = order[i]
        printf "| %s | %s (%d) | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.2f | %.2f |\n", name, f, slots[f],
          100 * v["lfru", f], 100 * v["lru", f], 100 * v["belady", f], 100 * v["belady-bypass", f],
          v["lfru", f] / v["belady", f], v["lfru", f] / v["belady-bypass", f] } }' \
      "$out.hits-$(basename "$d" .routes.gz).csv"
  done
  echo
}
{
  echo "## Real routing: $(basename "$routes"), tuned on requests $tune, reported on $held"
  echo
  table "$out.hits-held.csv" "Cache hit rate, decode, requests $held (held out)"
  table "$out.hits-tune.csv" "The same on requests $tune (tuned on)"
  [[ -z $decode ]] || decode_table
  echo "### Prediction from ids, requests $held"
  echo
  echo "| predictor | guesses | recall | wasted reads per token |"
  echo "| --- | --- | --- | --- |"
  awk -F, 'NR > 1 { printf "| %s | %s | %.1f%% | %s |\n", $1, $2, 100 * $3, $4 }' "$out.predict.csv"
  echo
  echo "### Unions per MoE layer, requests $held"
  echo
  echo "| shape | rows | union | uniform |"
  echo "| --- | --- | --- | --- |"
  awk -F, 'NR > 1 { printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$out.unions.csv"
  echo
} >"$out.md"

if [[ -n $model && -f $model/config.json ]]; then
  say "4. k3-uring replay of requests $replay_requests on $model (--ram $replay_ram)"
  {
    echo "### The engine: \`k3-uring replay -m $model --routes $(basename "$routes") --routes-requests $replay_requests --phase decode -b 1 --predict off --ram $replay_ram --cache-policy P\`"
    echo
  } >>"$out.md"
  for policy in lru lfru; do
    "$k3" replay -m "$model" --routes "$routes" --routes-requests "$replay_requests" --phase decode \
      -b 1 --predict off --ram "$replay_ram" --cache-policy "$policy" --hit-curve "$out.curve-$policy.csv" \
      >"$out.engine-$policy.csv" 2>>"$out.log" || die "replay --cache-policy $policy failed (see $out.log)"
    echo "- $policy: $(grep -o '[0-9]* records asked.*' "$out.log" | tail -1)" >>"$out.md"
  done
  echo >>"$out.md"
else
  say "4. skipped: MODEL=$model holds no checkpoint (k3-uring synth --config k3-dsv2 --out DIR)"
fi
cat "$out.md"
say "wrote $out.md and its CSVs"
