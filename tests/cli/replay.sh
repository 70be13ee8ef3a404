#!/bin/bash
# Replaying real routing (--routes, `replay`) on a tiny model of DeepSeek-V2-Lite's MoE
# shape (tests/routes/k3-dsv2-tiny.json) with the first requests of its prompts trace
# (tests/routes/dsv2-r0-7.routes.gz): replay's accounting equals what the file alone says
# (records read without a cache = each step's union per layer, for prompt passes and for
# decode steps of several requests; cache hits = an LRU pool with per-layer shares simulated over the file);
# a replayed run is deterministic and says once that its output is not the model's; a
# trace of another shape, a malformed line, an id outside [0, E) are refused.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/replay"
routes="$K3_ROOT/tests/routes/dsv2-r0-7.routes.gz"
expect="$K3_ROOT/tests/routes/expect.awk"
rm -rf "$d" && mkdir -p "$d"
model="$K3_TEST_TMP/k3-dsv2-tiny"
[[ -d "$model" ]] || "$K3" synth --config "$K3_ROOT/tests/routes/k3-dsv2-tiny.json" --seed 1 \
  --out "$model" -q || exit 1
zcat "$routes" | awk '/^#/ || $1 < 2' >"$d/r01.routes" # requests 0-1: 43 tokens

# compare CSV AWK-OUT WHAT: replay's per-layer column `want` against the file's count.
compare() {
  local csv=$1 sim=$2 col=$3 what=$4
  local got want
  got=$(awk -F, 'NR > 1 && $1 != "all" { print $'"$col"' }' "$csv" | paste -sd' ')
  want=$(awk '$1 != "pool" { print $'"$5"' }' "$sim" | paste -sd' ')
  [[ -n "$got" && "$got" == "$want" ]] && echo "ok: $what" ||
    fail "$what: replay says [$got], the file says [$want]"
}

# Prompt passes of 8 rows, no cache, no prediction: each layer reads each pass's union.
"$K3" replay -m "$model" --routes "$d/r01.routes" --phase prefill -b 8 --no-cache --predict off \
  --numa off >"$d/prefill.csv" 2>"$d/prefill.err" || fail "replay --phase prefill: $(cat "$d/prefill.err")"
cat "$d/prefill.err"
awk -v mode=prefill -v P=8 -f "$expect" "$d/r01.routes" >"$d/prefill.sim"
compare "$d/prefill.csv" "$d/prefill.sim" 2 "prefill: records asked per layer" 2
compare "$d/prefill.csv" "$d/prefill.sim" 3 "prefill: records read per layer (no cache)" 2
[[ $(head -1 "$d/prefill.csv") == "layer,asked,read,hit,prefetched,prefetch_used,wasted_bytes,bytes,union_per_step,stall_seconds" ]] ||
  fail "CSV header: $(head -1 "$d/prefill.csv")"
grep -q "^k3-uring replay: 2 requests, 43 tokens: 43 prompt rows in 7 passes of up to 8, 0 decode rows" \
  "$d/prefill.err" || fail "prefill summary: $(cat "$d/prefill.err")"
[[ $(grep -c "the output is not the model's" "$d/prefill.err") -eq 1 ]] || fail "the note, once"

# Decode steps of 3 requests at a time (requests 0-3, a place freeing mid-way), no cache.
"$K3" replay -m "$model" --routes "$routes" --routes-requests 0-3 --phase decode --parallel 3 \
  --no-cache --predict off --numa off >"$d/decode.csv" 2>"$d/decode.err" ||
  fail "replay --parallel 3: $(cat "$d/decode.err")"
zcat "$routes" | awk '/^#/ || $1 < 4' | awk -v mode=decode -v B=3 -f "$expect" >"$d/decode.sim"
compare "$d/decode.csv" "$d/decode.sim" 3 "decode x3: records read per layer (no cache)" 2
awk -F, 'NR > 1 && $4 != 0 { exit 1 }' "$d/decode.csv" || fail "hits without a cache"

# With a cache and no prediction, --cache-policy lru's hits are those of an LRU pool over
# every layer's records, each layer held to its share once the pool is full (expect.awk).
"$K3" replay -m "$model" --routes "$d/r01.routes" --phase decode --parallel 2 --predict off \
  --numa off -b 4 --ram 60M --cache-policy lru --hit-curve "$d/curve.csv" >"$d/lru.csv" 2>"$d/lru.err" || fail "replay --ram 60M: $(cat "$d/lru.err")"
cat "$d/lru.err"
slots=$(sed -n 's/.*; slots \([0-9]*\) (.*/\1/p' "$d/lru.err")
awk -v mode=decode -v B=2 -v slots="$slots" -f "$expect" "$d/r01.routes" >"$d/lru.sim"
compare "$d/lru.csv" "$d/lru.sim" 4 "cache hits per layer = LRU of $slots slots" 3
pool=$(awk '$1 == "pool" { print $2 }' "$d/lru.sim")
((pool > slots)) || fail "the LRU test never evicts ($pool records, $slots slots): give it less RAM"
awk -F, '$1 == "all" && !($4 > 0) { exit 1 }' "$d/lru.csv" || fail "no hits at all"

# --hit-curve: with every expert of a layer cached, only each record's first ask misses.
asked=$(awk '$1 != "pool" { s += $2 } END { print s }' "$d/lru.sim")
want=$(awk -v p="$pool" -v a="$asked" 'BEGIN { printf "%.6f", 1 - p / a }')
[[ $(head -1 "$d/curve.csv") == "records_per_layer,hit_rate" && $(wc -l <"$d/curve.csv") -eq 66 ]] ||
  fail "the curve: a header and 65 points (0..64)"
[[ $(tail -1 "$d/curve.csv") == "64,$want" ]] && echo "ok: the curve at 64 records is 1 - $pool / $asked" ||
  fail "the curve at 64 records: $(tail -1 "$d/curve.csv"), want 64,$want"
awk -F, 'NR > 2 && $2 < prev { exit 1 } { prev = $2 }' "$d/curve.csv" || fail "the curve falls somewhere"
# plan reads it in place of uniform routing's cache hits; a curve that falls is refused.
"$K3" plan --config "$K3_ROOT/tests/routes/k3-dsv2-tiny.json" --ram 64M --hit-curve "$d/curve.csv" |
  grep -q "cache hits [0-9.]*% by the hit curve" || fail "plan --hit-curve does not use the curve"
printf 'records_per_layer,hit_rate\n0,0\n1,0.5\n2,0.4\n' >"$d/falls.csv"
expect_error 1 "falls.csv:4: hit rate 0.4 is outside [0, 1] or below the one before" \
  "$K3" plan --config "$K3_ROOT/tests/routes/k3-dsv2-tiny.json" --hit-curve "$d/falls.csv"

# The cache policy changes what is read, never the bytes computed.
for p in lru lfru; do
  "$K3" run -m "$model" --ids 5,6,7,8 -n 12 --numa off --ram 60M -b 4 --cache-policy $p -q \
    --routes "$routes" --logits-out "$d/logits-$p.f32" >/dev/null || fail "run --cache-policy $p"
done
cmp -s "$d/logits-lru.f32" "$d/logits-lfru.f32" && echo "ok: lru and lfru compute the same bytes" ||
  fail "the cache policy changed the logits"
"$K3" replay -m "$model" --routes "$d/r01.routes" --phase decode --parallel 2 --predict off --numa off -b 4 \
  --ram 60M >/dev/null 2>"$d/lfru.err" || fail "replay with the default policy"
grep -q " hit " "$d/lfru.err" && ! cmp -s <(grep -o '[0-9]* hit' "$d/lfru.err") <(grep -o '[0-9]* hit' "$d/lru.err") ||
  fail "lfru hits exactly as lru does: is the policy used? $(cat "$d/lfru.err")"

# --predict-from ids: prefetches found by co-occurrence counts, not the router (whose
# guesses a replayed trace ignores): more of them are used; the bytes never change.
for pf in moe-input-next ids; do
  "$K3" replay -m "$model" --routes "$d/r01.routes" --phase decode --numa off -b 4 --no-cache \
    --predict-from $pf --prefetch-k 12 >/dev/null 2>"$d/pf-$pf.err" || fail "--predict-from $pf: $(cat "$d/pf-$pf.err")"
done
used() { sed -n 's/.* prefetched (\([0-9]*\) used).*/\1/p' "$1"; }
(($(used "$d/pf-ids.err") > 2 * $(used "$d/pf-moe-input-next.err"))) &&
  echo "ok: ids prediction used $(used "$d/pf-ids.err"), the router's $(used "$d/pf-moe-input-next.err")" ||
  fail "ids prediction is no better than the router's on a replay: $(cat "$d/pf-ids.err" "$d/pf-moe-input-next.err")"
for pf in off ids; do
  "$K3" run -m "$model" --ids 5,6,7,8 -n 12 --numa off -q --predict-from ids --predict $( [[ $pf == off ]] && echo off || echo on) \
    --logits-out "$d/logits-predict-$pf.f32" >/dev/null || fail "run --predict-from $pf"
done
cmp -s "$d/logits-predict-off.f32" "$d/logits-predict-ids.f32" && echo "ok: ids prediction computes the same bytes" ||
  fail "--predict-from ids changed the logits"

# run --routes: deterministic, and not the model's output.
run_ids() { "$K3" run -m "$model" --ids 5,6,7,8 -n 6 --print-ids --numa off "$@"; }
a=$(run_ids --routes "$routes" --routes-requests 2-3 2>"$d/run.err") || fail "run --routes: $(cat "$d/run.err")"
b=$(run_ids --routes "$routes" --routes-requests 2-3 -q) || fail "second run --routes"
plain=$(run_ids -q) || fail "run"
[[ -n "$a" && "$a" == "$b" ]] || fail "run --routes differs from itself: $a / $b"
[[ "$a" != "$plain" ]] || fail "run --routes gave the model's own tokens: $a"
grep -q "note: MoE selections replayed from $routes (requests 2-3, 38 tokens" "$d/run.err" ||
  fail "run's note: $(cat "$d/run.err")"

# Refusals: the shape, the line, the id, the range, the options.
expect_error 1 "has 64 experts, top_k 6, 26 MoE layers; the model has 64 experts, top_k 16, 12 MoE layers" \
  "$K3" run -m "$(tiny_model)" --ids 1 -n 1 --routes "$routes"
bad() { # bad NAME LINE-9-TEXT: the header and one token line
  head -7 "$d/r01.routes" >"$d/$1.routes"
  printf '%s\n' "$2" >>"$d/$1.routes"
}
line=$(sed -n 8p "$d/r01.routes")
bad short "${line% *}"
bad outside "$(sed 's/ [0-9]*$/ 64/' <<<"$line")"
bad repeat "$(awk '{ $5 = $4; print }' <<<"$line")"
bad order "$(sed 's/^0 0 /0 1 /' <<<"$line")"
expect_error 1 "short.routes:8: want 156 ids (26 layers x top_k 6), the line ends early" \
  "$K3" replay -m "$model" --routes "$d/short.routes"
expect_error 1 "outside.routes:8: expert id 64 is outside [0, 64)" \
  "$K3" replay -m "$model" --routes "$d/outside.routes"
expect_error 1 "repeat.routes:8: layer 0 repeats expert" "$K3" replay -m "$model" --routes "$d/repeat.routes"
expect_error 1 "order.routes:8: positions must run 0, 1, 2" "$K3" replay -m "$model" --routes "$d/order.routes"
expect_error 1 "requests 5-9 asked for; the file holds 2 (0-1)" \
  "$K3" replay -m "$model" --routes "$d/r01.routes" --routes-requests 5-9
expect_error 1 "the run computes 44 positions; the trace's requests 1-1 hold 10 tokens" \
  "$K3" run -m "$model" --ids 1,2,3,4 -n 41 --routes "$routes" --routes-requests 1-1
expect_error 2 "--routes is required" "$K3" replay -m "$model"
expect_error 2 "--routes-requests goes with --routes" "$K3" run -m "$model" --ids 1 --routes-requests 1-2
expect_error 2 "--routes-requests: \"3-1\" is not A-B" "$K3" replay -m "$model" --routes "$routes" --routes-requests 3-1
finish
