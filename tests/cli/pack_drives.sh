#!/bin/bash
# Packs of k3-tiny on 1, 2 and 3 drives run from the drives alone, given in any order,
# with logits byte-identical to the checkpoint folder's; wrong drive sets are refused
# with the drive named; damaged bytes are caught by the checksums.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/pack-drives"
rm -rf "$d" && mkdir -p "$d"
ids=5,17,300,1200,42,7,999,2031,0,64,1024,2032
"$K3" run -m "$m" --ids $ids -n 32 --ignore-eos --print-ids -q --logits-out "$d/ckpt.f32" \
  >"$d/ckpt.ids" || fail "checkpoint run"
want=$(grep -o '"greedy_ids": \[[^]]*\]' "$K3_ROOT/fixtures/k3-tiny/fixture.json" | tr -d ' ' |
  sed 's/"greedy_ids":\[//; s/\]//')
[[ "$(cat "$d/ckpt.ids")" == "$want" ]] || fail "checkpoint run does not match the fixture ids"

for n in 1 2 3; do
  drives=() && for i in $(seq 1 $n); do mkdir -p "$d/n$n/drive$i"; drives+=("$d/n$n/drive$i"); done
  "$K3" pack --checkpoint "$m" --drives "$(IFS=,; echo "${drives[*]}")" -q 2>"$d/pack$n.log" ||
    fail "pack on $n drives: $(cat "$d/pack$n.log")"
  # drives in reverse order
  rev=$(printf '%s\n' "${drives[@]}" | tac | paste -sd,)
  "$K3" run --drives "$rev" --ids $ids -n 32 --ignore-eos --print-ids -q \
    --logits-out "$d/n$n.f32" >"$d/n$n.ids" || fail "run from $n drives"
  cmp -s "$d/ckpt.f32" "$d/n$n.f32" || fail "logits from $n drives differ from the checkpoint's"
  cmp -s "$d/ckpt.ids" "$d/n$n.ids" || fail "ids from $n drives differ"
done

# The same model packed again is another pack: its drives do not mix with the first's.
mkdir -p "$d/other/drive1" "$d/other/drive2" "$d/other/drive3"
"$K3" pack --checkpoint "$m" --drives "$d/other/drive1,$d/other/drive2,$d/other/drive3" -q 2>/dev/null ||
  fail "second pack"
run3() { "$K3" run --drives "$1" --ids 5 -n 1 -q --print-ids; }
expect_error 1 "drive $d/other/drive2: from another pack of this model" \
  run3 "$d/n3/drive1,$d/other/drive2,$d/n3/drive3"
expect_error 1 "the pack has 3 drives, 2 given; missing drive 1" run3 "$d/n3/drive1,$d/n3/drive3"
expect_error 1 "both are drive 0 of the pack" run3 "$d/n3/drive1,$d/n3/drive1,$d/n3/drive3"
expect_error 1 "drive $d/n2/drive1: from another pack" run3 "$d/n3/drive1,$d/n2/drive1,$d/n3/drive3"
expect_error 1 "drive $d/nowhere: no k3-uring.manifest" run3 "$d/n3/drive1,$d/nowhere,$d/n3/drive3"

# Another model (seed 2) on a drive.
"$K3" synth --config k3-tiny --seed 2 --out "$d/seed2" -q || fail "synth seed 2"
mkdir -p "$d/s2/a" "$d/s2/b" "$d/s2/c"
"$K3" pack --checkpoint "$d/seed2" --drives "$d/s2/a,$d/s2/b,$d/s2/c" -q 2>/dev/null || fail "pack seed 2"
expect_error 1 "drive $d/s2/b: holds another model than drive $d/n3/drive1" \
  run3 "$d/n3/drive1,$d/s2/b,$d/n3/drive3"

# A damaged manifest, then a damaged data byte (caught when its piece is read).
cp -r "$d/n3" "$d/bad"
printf 'X' | dd of="$d/bad/drive2/k3-uring.manifest" bs=1 seek=5000 conv=notrunc status=none
expect_error 1 "drive2/k3-uring.manifest: manifest checksum mismatch" \
  run3 "$d/bad/drive1,$d/bad/drive2,$d/bad/drive3"
cp "$d/n3/drive2/k3-uring.manifest" "$d/bad/drive2/"
size=$(stat -c %s "$d/bad/drive3/k3-uring.data")
printf '\x55' | dd of="$d/bad/drive3/k3-uring.data" bs=1 seek=$((size - 5000)) conv=notrunc status=none
expect_error 1 "drive $d/bad/drive3: reading layer 12 expert 63" \
  "$K3" run --drives "$d/bad/drive1,$d/bad/drive2,$d/bad/drive3" --ids $ids -n 32 --ignore-eos -q --print-ids
grep -q "): checksum mismatch" "$K3_TEST_TMP/stderr" || fail "the damaged piece was not reported as a checksum mismatch"
finish
