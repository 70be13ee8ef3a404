#!/bin/bash
# Prompts in passes: a prompt run in one pass, row by row, in passes of 7 rows and of 149
# (one short of the prompt) gives the same logits and tokens, byte for byte, from the
# checkpoint folder and from a
# pack; one pass reads each chosen expert of a layer once (k3-tiny's 150-token prompt
# chooses every expert: 12 MoE layers x 64), smaller passes read more; -b is checked.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/prompt-passes"
rm -rf "$d" && mkdir -p "$d/d0" "$d/d1"
ids=$(seq -s, 3 7 1050)
args=(--ids "$ids" -n 6 --ignore-eos --print-ids -q)

"$K3" run -m "$m" "${args[@]}" --logits-out "$d/want.f32" >"$d/want.ids" || fail "one pass"
"$K3" pack --checkpoint "$m" --drives "$d/d0,$d/d1" -q 2>/dev/null || fail "pack"
for b in 1 7 149; do
  for src in "-m $m" "--drives $d/d0,$d/d1 --ram floor -b $b --no-cache"; do
    # shellcheck disable=SC2086
    "$K3" run $src -b $b "${args[@]}" --logits-out "$d/got.f32" >"$d/got.ids" 2>"$d/err" ||
      { fail "-b $b $src: $(cat "$d/err")"; continue; }
    cmp -s "$d/want.f32" "$d/got.f32" || fail "-b $b ($src): logits differ from one pass"
    cmp -s "$d/want.ids" "$d/got.ids" || fail "-b $b ($src): tokens differ from one pass"
  done
done

# The prompt's records: "prompt 150: ... N records read" (--stats, no cache, no prediction).
prompt_records() {
  "$K3" run -m "$m" --ids "$ids" -n 1 --no-cache --predict off --stats -b "$1" 2>&1 >/dev/null |
    sed -n 's/^k3-uring: prompt [0-9]*:.* \([0-9]*\) records read.*/\1/p'
}
one=$(prompt_records 2048)
seven=$(prompt_records 7)
[[ $one == 768 ]] || fail "one pass read $one records; want each of 12 x 64 once"
[[ -n $seven && $seven -gt $((3 * one)) ]] || fail "passes of 7 read $seven records, one pass $one"

"$K3" run -m "$m" --ids "$ids" -n 1 -b 100 -v -q 2>"$d/v" >/dev/null || fail "-v"
grep -q "prompt passes of 100 rows" "$d/v" || fail "-v does not say the pass size: $(cat "$d/v")"
"$K3" run --drives "$d/d0,$d/d1" --ram floor --ids "$ids" -n 1 -b 100 -v -q 2>"$d/v" >/dev/null ||
  fail "-v at the floor"
grep -q "prompt passes of 32 rows" "$d/v" || fail "the floor's passes: $(grep passes "$d/v")"

expect_error 2 "-b: 0 is outside" "$K3" run -m "$m" -p x -b 0
expect_error 2 "--batch-size: -4 is outside" "$K3" run -m "$m" -p x --batch-size -4
expect_error 2 "-b: \"many\" is not an integer" "$K3" run -m "$m" -p x -b many
finish
