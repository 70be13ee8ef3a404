#!/bin/bash
# --read-size and --queue-depth: bad values are one line naming the option and the limit,
# exit 2 (not a multiple of 4 KiB, above 1 GiB, a depth of 0 or above the ring's 32768;
# above what the device under the drives takes in one request: read_size_device.sh); good ones change when
# bytes arrive, never which: small reads at depth 1 give the defaults' ids and logits, and
# --stats counts the system calls of each token.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/read-options"
rm -rf "$d" && mkdir -p "$d/d0"
"$K3" pack --checkpoint "$m" --drives "$d/d0" -q 2>/dev/null || fail "pack"
run() { "$K3" run --drives "$d/d0" --ids 5,17,300 -n 3 --ignore-eos --print-ids "$@"; }

expect_error 2 "--read-size: 6000 bytes is not a multiple of 4 KiB" run --read-size 6000
expect_error 2 "--read-size: 2147483648 bytes is above 1 GiB" run --read-size 2G
expect_error 2 "--queue-depth: 0 is outside [1, 32768]" run --queue-depth 0
expect_error 2 "--queue-depth: 32769 is outside [1, 32768]" run --queue-depth 32769

run -q --logits-out "$d/want.f32" >"$d/want.ids" || fail "a run at the defaults"
run --read-size 4K --queue-depth 1 --logits-out "$d/got.f32" --stats >"$d/got.ids" 2>"$d/got.err" ||
  fail "--read-size 4K --queue-depth 1: $(tail -1 "$d/got.err")"
cmp -s "$d/want.ids" "$d/got.ids" && cmp -s "$d/want.f32" "$d/got.f32" &&
  echo "ok: 4 KiB reads at depth 1 give the defaults' ids and logits" ||
  fail "4 KiB reads at depth 1 changed the output"
calls=$(sed -n 's/.* token 2: .*, \([0-9]*\) system calls$/\1/p' "$d/got.err")
[[ -n $calls && $calls -gt 0 ]] && echo "ok: --stats counts $calls system calls for token 2" ||
  fail "--stats gave no system calls for token 2: $(grep 'token 2' "$d/got.err")"
finish
