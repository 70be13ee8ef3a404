#!/bin/bash
# pack -q prints nothing on success; without -q, one line per phase (the plan, the data,
# done) on stderr and nothing on stdout.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/pack-quiet"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
out=$("$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q 2>"$d/err") || fail "pack -q: $(cat "$d/err")"
[[ -z "$out" && ! -s "$d/err" ]] || fail "pack -q printed: $out $(cat "$d/err")"
out=$("$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" 2>"$d/err") || fail "pack: $(cat "$d/err")"
[[ -z "$out" ]] || fail "pack printed on stdout: $out"
grep -q "^pack: [0-9]* objects in [0-9]* pieces over 2 drives" "$d/err" &&
  grep -q "^pack: data: " "$d/err" && grep -q "^pack: done: " "$d/err" ||
  fail "pack's phase lines: $(cat "$d/err")"
[[ $(wc -l <"$d/err") -eq 3 ]] || fail "want 3 lines, got: $(cat "$d/err")"
echo "ok: $(tr '\n' ' ' <"$d/err")"
finish
