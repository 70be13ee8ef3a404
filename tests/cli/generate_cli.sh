#!/bin/bash
# The generation CLI: --help, prompt sources, bad input (one line, exit 2 for the command
# line, 1 at run time), Ctrl-C (stops with statistics, exit 130), and sampling that does
# not depend on the drives a model is read from.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/generate-cli"
rm -rf "$d" && mkdir -p "$d"

help=$("$K3" --help; "$K3" run --help)
for word in "--drives" "--chat" "--temp" "--top-p" "--top-k" "--seed" "--threads" "--ram" \
            "--stats" "--trace" "--logits-out" "--ctx-size" "130 interrupted" "(default 16)"; do
  [[ "$help" == *"$word"* ]] || fail "--help does not mention $word"
done

printf 'The pack is' >"$d/prompt.txt"
a=$("$K3" -m "$m" -f "$d/prompt.txt" -n 6 -q) || fail "-f"
b=$("$K3" -m "$m" -p "The pack is" -n 6 -q) || fail "-p"
[[ "$a" == "$b" ]] || fail "-f and -p give different text: \"$a\" vs \"$b\""
"$K3" -m "$m" --chat --system "Be brief." --think off -p "Hi" -n 4 -q >/dev/null || fail "--chat"

printf '\xff bad' >"$d/bad.txt"
expect_error 1 "-f $d/bad.txt: encode: invalid UTF-8 at byte offset 0" "$K3" -m "$m" -f "$d/bad.txt" -n 2 -q
expect_error 1 "--ctx-size 4 holds fewer than the prompt" "$K3" -m "$m" -p "one two three four five" -c 4 -n 2 -q
expect_error 2 "--temp: -1 is outside" "$K3" -m "$m" -p x --temp -1
expect_error 2 "--chat wraps text" "$K3" -m "$m" --ids 5 --chat
expect_error 2 "--think: \"maybe\" is not on or off" "$K3" -m "$m" -p x --chat --think maybe
expect_error 2 "exactly one of -p TEXT, -f FILE or --ids LIST" "$K3" -m "$m" -p x --ids 5
expect_error 2 "--wat: unknown option" "$K3" -m "$m" -p x --wat
d2=$(tiny_copy no-tokenizer)
rm "$d2/tiktoken.model"
expect_error 1 "no-tokenizer/tiktoken.model: No such file" "$K3" -m "$d2" -p x -n 1 -q

# Ctrl-C once tokens are streaming: the token in progress finishes, statistics are
# printed, exit 130, the trace is still a complete file.
mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q 2>/dev/null || fail "pack"
"$K3" --drives "$d/a,$d/b" --ids 5 -n 3000 -c 4096 \
  --ignore-eos --print-ids --trace "$d/trace.json" >"$d/int.out" 2>"$d/int.log" &
pid=$!
for _ in $(seq 600); do [[ $(tr -cd , <"$d/int.out" | wc -c) -ge 3 ]] && break; sleep 0.05; done
kill -INT $pid
wait $pid
rc=$?
[[ $rc -eq 130 ]] || fail "Ctrl-C: exit $rc, want 130 ($(cat "$d/int.log"))"
grep -q "generated [0-9]* tokens" "$d/int.log" || fail "Ctrl-C: no statistics: $(cat "$d/int.log")"
tail -c 4 "$d/trace.json" | grep -q ']}' || fail "Ctrl-C: the trace is not closed"

# The same seed samples the same tokens from a checkpoint folder and from a pack.
x=$("$K3" -m "$m" -p "A seed" -n 16 --temp 0.9 --top-p 0.9 --seed 11 -q --print-ids)
y=$("$K3" --drives "$d/b,$d/a" -p "A seed" -n 16 --temp 0.9 --top-p 0.9 --seed 11 -q --print-ids)
[[ -n "$x" && "$x" == "$y" ]] || fail "sampling differs between -m and --drives: $x vs $y"
finish
