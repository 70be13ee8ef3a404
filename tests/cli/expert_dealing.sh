#!/bin/bash
# A prompt pass's round of many large experts deals them whole to the team's members (no
# barrier inside them) where a decode step splits each over the team: the -v count says
# which happened, and the logits are the same bytes either way and with one thread.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/expert-dealing"
rm -rf "$d" && mkdir -p "$d"
# Experts of 3 x 1024 x 512 multiply-adds a row: above the size computed alone anyway.
"$K3" synth --config "$K3_ROOT/tests/configs/k3-wide-experts.json" --seed 1 --out "$d/model" -q ||
  { fail "synth"; finish; }
ids=$(seq -s, 100 131)
whole() { sed -n 's/^k3-uring: routed experts: \([0-9]*\) computed whole.*/\1/p' "$1"; }
run() { # NAME ARGS...: logits in $d/NAME.f32, -v in $d/NAME.log
  local name=$1
  shift
  "$K3" run -m "$d/model" --ids "$ids" -n 2 --ignore-eos -v "$@" --logits-out "$d/$name.f32" \
    >/dev/null 2>"$d/$name.log" || fail "$name: $(tail -1 "$d/$name.log")"
}
run one-thread -t 1
run pass -t 2
run steps -t 2 -b 1
run passes-of-7 -t 2 -b 7
[[ $(whole "$d/pass.log") -gt 0 ]] || fail "one pass of 32 rows at 2 threads dealt no expert whole: $(grep 'routed experts' "$d/pass.log")"
[[ $(whole "$d/steps.log") -eq 0 ]] || fail "1-row steps dealt experts whole: $(grep 'routed experts' "$d/steps.log")"
[[ $(whole "$d/one-thread.log") -eq 0 ]] || fail "one thread dealt experts: $(grep 'routed experts' "$d/one-thread.log")"
for name in pass steps passes-of-7; do
  cmp -s "$d/one-thread.f32" "$d/$name.f32" || fail "$name: logits differ from one thread's"
done
grep -h "routed experts" "$d"/*.log
finish
