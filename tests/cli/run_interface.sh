#!/bin/bash
# The run interface other tools rely on: --logits-out holds one f32 row of vocab_size
# values per predicted position (prompt + generated - 1), --print-ids prints the ids,
# and the bytes do not depend on --threads.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
out="$K3_TEST_TMP/run-interface"
mkdir -p "$out"

"$K3" run -m "$m" --ids 5,17,300,1200,42 -n 7 --ignore-eos --print-ids -q -t 2 \
  --logits-out "$out/t2.f32" >"$out/t2.ids" || fail "run exited $?"
"$K3" run -m "$m" --ids 5,17,300,1200,42 -n 7 --ignore-eos --print-ids -q -t 1 \
  --logits-out "$out/t1.f32" >"$out/t1.ids" || fail "run exited $?"
size=$(stat -c %s "$out/t2.f32")
want=$(((5 + 7 - 1) * 2048 * 4))
[[ $size -eq $want ]] || fail "logits file is $size bytes, want $want (11 rows of 2048 f32)"
[[ $(tr ',' '\n' <"$out/t2.ids" | grep -c .) -eq 7 ]] || fail "want 7 ids, got $(cat "$out/t2.ids")"
cmp -s "$out/t1.f32" "$out/t2.f32" || fail "logits differ between 1 and 2 threads"
cmp -s "$out/t1.ids" "$out/t2.ids" || fail "ids differ between 1 and 2 threads"

# -n 0: only the prompt's rows.
"$K3" run -m "$m" --ids 5,17,300 -n 0 -q --logits-out "$out/n0.f32" >/dev/null || fail "-n 0"
[[ $(stat -c %s "$out/n0.f32") -eq $((3 * 2048 * 4)) ]] || fail "-n 0 writes the 3 prompt rows"

# A text prompt through the tokenizer, text out; the same seed samples the same text.
a=$("$K3" run -m "$m" -p "The quick brown fox" -n 12 --temp 0.8 --seed 7 -q) || fail "text run"
b=$("$K3" run -m "$m" -p "The quick brown fox" -n 12 --temp 0.8 --seed 7 -q -t 1) || fail "text run"
[[ -n "$a" && "$a" == "$b" ]] || fail "sampling with one seed differs: \"$a\" vs \"$b\""
echo "sampled: $a"
finish
