#!/bin/bash
# run --prompt-cache FILE: a prompt that extends the saved one resumes from its state and
# gives the bytes of a fresh run (ids, and the logits rows from the last cached position
# on), also when the whole prompt is cached and when a pack of the model resumes a state a
# checkpoint folder saved; a prompt that is not an extension runs whole, gives a fresh
# run's bytes and saves over the file; another model's file, a truncated or damaged file
# and a folder that cannot take the file are refused with one line, exit 1, nothing on
# stdout and the file left as it was.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/prompt-cache"
rm -rf "$d" && mkdir -p "$d"
V=2048 # k3-tiny's vocab: floats per logits row
row=$((V * 4))
A=5,17,300,1200,42,7,99       # 7 tokens
AB=$A,8,1500,23,600,4         # 12 tokens
C=9,8,7,6,5,4,3,2             # not an extension of AB
run() { "$K3" run -n 5 --ignore-eos --print-ids "$@"; }
# prompt_from LOG WANT: the statistics line says how the prompt was had.
prompt_from() {
  grep -q "prompt $2 in" "$1" || fail "want \"prompt $2\" in the statistics: $(grep prompt "$1")"
}

# (a) A saved, then A+B resumed: the same ids as a fresh A+B, and the logits rows from
# position 6 on (the resumed file starts at the last cached position).
run -m "$m" --ids $AB --logits-out "$d/fresh.f32" -q >"$d/fresh.ids" || fail "fresh run"
run -m "$m" --ids $A --prompt-cache "$d/cache" >/dev/null 2>"$d/a.log" || fail "saving run: $(cat "$d/a.log")"
prompt_from "$d/a.log" "7 tokens (0 from the cache)"
[[ -s "$d/cache" ]] || fail "no cache file after the first run"
run -m "$m" --ids $AB --prompt-cache "$d/cache" --logits-out "$d/resumed.f32" >"$d/resumed.ids" \
  2>"$d/ab.log" || fail "resumed run: $(cat "$d/ab.log")"
prompt_from "$d/ab.log" "12 tokens (7 from the cache)"
cmp "$d/fresh.ids" "$d/resumed.ids" || fail "resumed ids differ: $(cat "$d/resumed.ids") vs $(cat "$d/fresh.ids")"
[[ $(stat -c %s "$d/resumed.f32") -eq $(((12 - 7 + 1 + 5 - 1) * row)) ]] ||
  fail "resumed logits: $(stat -c %s "$d/resumed.f32") bytes, want $(((12 - 7 + 1 + 5 - 1) * row))"
cmp -i $((6 * row)):0 "$d/fresh.f32" "$d/resumed.f32" || fail "resumed logits differ from a fresh run's"

# Resumed in passes of 2 rows after a save in passes of 3: the same bytes again.
run -m "$m" --ids $A -b 3 --prompt-cache "$d/cache.b3" >/dev/null 2>&1 || fail "saving in passes of 3"
run -m "$m" --ids $AB -b 2 --prompt-cache "$d/cache.b3" --logits-out "$d/b2.f32" >"$d/b2.ids" \
  2>"$d/b2.log" || fail "resumed in passes of 2: $(cat "$d/b2.log")"
prompt_from "$d/b2.log" "12 tokens (7 from the cache)"
cmp -s "$d/fresh.ids" "$d/b2.ids" && cmp -s -i $((6 * row)):0 "$d/fresh.f32" "$d/b2.f32" ||
  fail "saved in passes of 3, resumed in passes of 2: bytes differ from one fresh pass"

# The whole prompt from the cache (equal counts): nothing prefilled, the same bytes, and the
# file is left as it was (the state it holds is this prompt's).
cp "$d/cache" "$d/cache.ab"
run -m "$m" --ids $AB --prompt-cache "$d/cache" --logits-out "$d/all.f32" >"$d/all.ids" \
  2>"$d/all.log" || fail "fully cached run: $(cat "$d/all.log")"
prompt_from "$d/all.log" "12 tokens (12 from the cache)"
cmp "$d/fresh.ids" "$d/all.ids" || fail "fully cached ids differ"
cmp -i $((11 * row)):0 "$d/fresh.f32" "$d/all.f32" || fail "fully cached logits differ"
cmp -s "$d/cache" "$d/cache.ab" || fail "a fully cached run rewrote the file"

# A pack of the same model resumes what the checkpoint folder saved.
mkdir -p "$d/p0" "$d/p1"
"$K3" pack --checkpoint "$m" --drives "$d/p0,$d/p1" -q 2>/dev/null || fail "pack"
run --drives "$d/p0,$d/p1" --ids $AB --prompt-cache "$d/cache" >"$d/packed.ids" 2>"$d/packed.log" ||
  fail "resumed from a pack: $(cat "$d/packed.log")"
prompt_from "$d/packed.log" "12 tokens (12 from the cache)"
cmp "$d/fresh.ids" "$d/packed.ids" || fail "resumed from a pack: ids differ"

# (b) Another model's file (k3-tiny, seed 2): refused naming it, nothing written.
m2="$K3_TEST_TMP/k3-tiny-seed2"
[[ -d "$m2" ]] || "$K3" synth --config k3-tiny --seed 2 --out "$m2" -q || fail "synth seed 2"
expect_error 1 "$d/cache: saved for model " run -m "$m2" --ids $AB --prompt-cache "$d/cache" -q
cmp -s "$d/cache" "$d/cache.ab" || fail "another model's run changed the file"

# (c) A truncated file and a flipped byte (inside the state): refused, left alone.
head -c 5000 "$d/cache.ab" >"$d/cut"
expect_error 1 "$d/cut: truncated: 5000 bytes" run -m "$m" --ids $AB --prompt-cache "$d/cut" -q
cp "$d/cache.ab" "$d/flip"
at=$(($(stat -c %s "$d/flip") / 2))
printf "\\x$(printf %02x $(($(od -An -tu1 -j $at -N1 "$d/flip") ^ 0x10)))" |
  dd of="$d/flip" bs=1 seek=$at conv=notrunc status=none
cmp -s "$d/flip" "$d/cache.ab" && fail "the byte was not flipped"
expect_error 1 "$d/flip: damaged (checksum" run -m "$m" --ids $AB --prompt-cache "$d/flip" -q
[[ $(stat -c %s "$d/cut") -eq 5000 ]] || fail "the truncated file was rewritten"
[[ -z $(ls "$d" | grep '\.tmp\.') ]] || fail "temporary files left behind: $(ls "$d")"

# (d) A folder that cannot take the file: one line, exit 1, before the model loads.
expect_error 1 "$d/nowhere/cache: cannot write beside it" \
  run -m "$m" --ids $AB --prompt-cache "$d/nowhere/cache" -q
ro="$d/ro"
mkdir -p "$ro"
if [[ $(id -u) -ne 0 ]]; then
  chmod 555 "$ro"
  expect_error 1 "$ro/cache: cannot write beside it" run -m "$m" --ids $AB --prompt-cache "$ro/cache" -q
  chmod 755 "$ro"
elif mount -t tmpfs -o ro,size=1m tmpfs "$ro" 2>/dev/null; then
  expect_error 1 "Read-only file system" run -m "$m" --ids $AB --prompt-cache "$ro/cache" -q
  umount "$ro" || umount -l "$ro"
else
  echo "note: root here cannot mount a read-only tmpfs; only the missing folder was tried"
fi

# (e) Not an extension: the prompt runs whole, gives a fresh run's bytes, and saves over
# the file (the next extension of C resumes from it).
run -m "$m" --ids $C --logits-out "$d/c-fresh.f32" -q >"$d/c-fresh.ids" || fail "fresh C"
run -m "$m" --ids $C --prompt-cache "$d/cache" --logits-out "$d/c.f32" >"$d/c.ids" 2>"$d/c.log" ||
  fail "C with the cache: $(cat "$d/c.log")"
prompt_from "$d/c.log" "8 tokens (0 from the cache, which held another prompt)"
cmp "$d/c-fresh.ids" "$d/c.ids" || fail "C: ids differ from a fresh run"
cmp "$d/c-fresh.f32" "$d/c.f32" || fail "C: logits differ from a fresh run"
run -m "$m" --ids $C,1,2 --prompt-cache "$d/cache" >/dev/null 2>"$d/c2.log" || fail "C+: $(cat "$d/c2.log")"
prompt_from "$d/c2.log" "10 tokens (8 from the cache)"
# A shorter prompt than the saved one, with the context it needs: another prompt too.
run -m "$m" --ids 5,17 --prompt-cache "$d/cache" >/dev/null 2>"$d/short.log" || fail "short: $(cat "$d/short.log")"
prompt_from "$d/short.log" "2 tokens (0 from the cache, which held another prompt)"

expect_error 2 "--dump-layers needs every position computed" \
  "$K3" run -m "$m" --ids $A --prompt-cache "$d/cache" --dump-layers "$d/dump.json"
help=$("$K3" run --help)
[[ "$help" == *"--prompt-cache FILE"* ]] || fail "--help does not mention --prompt-cache"
finish
