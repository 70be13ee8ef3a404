#!/bin/bash
# --cache-fill: where the expert cache grows changes when bytes arrive, never which: a
# prompt in passes and decode give the same logits and tokens with the cache filled ahead
# (the default), as reads reach it, and with no cache; -v says how much of the read area
# was faulted in on the reads' way and how much ahead of them; a value it does not know
# is refused, naming it.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/cache-fill"
rm -rf "$d" && mkdir -p "$d/d0"
args=(--ids "$(seq -s, 3 11 700)" -n 8 --ignore-eos --print-ids -b 16)

"$K3" pack --checkpoint "$m" --drives "$d/d0" -q 2>/dev/null || fail "pack"
"$K3" run --drives "$d/d0" --no-cache "${args[@]}" -q --logits-out "$d/want.f32" >"$d/want.ids" ||
  fail "no cache"
for fill in ahead reads; do
  same_as_want "--cache-fill $fill" --drives "$d/d0" --ram 512M --cache-fill "$fill"
done

"$K3" run --drives "$d/d0" --ram 512M "${args[@]}" -v 2>"$d/v" >/dev/null || fail "-v: $(tail -1 "$d/v")"
grep -qE "read area: [0-9.]+ MB taken as reads reached it, in [0-9.]+ s .*; [0-9.]+ MB faulted in ahead of them" "$d/v" ||
  fail "-v does not say where the read area was faulted in: $(grep 'read area' "$d/v")"

expect_error 2 "--cache-fill: \"idle\" is not ahead or reads" "$K3" run --drives "$d/d0" --cache-fill idle "${args[@]}"
finish
