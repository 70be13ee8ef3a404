#!/bin/bash
# pack --ranks 2 of k3-tiny writes two share packs, each onto its own drives ("%r" in
# --drives), each holding the whole trunk and about half the records' bytes, under the
# model hash of a whole pack; a share pack's manifest records its share (one process
# opening it is refused, naming it); --rank writes one share; --ranks 1 writes the bytes a
# plain pack writes; without --ranks %r is rank 0; bad --ranks/--rank/--drives
# combinations are refused in one line.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/pack-ranks"
rm -rf "$d" && mkdir -p "$d"/box{0,1}/{a,b} "$d"/whole/{a,b} "$d"/one/{a,b} "$d"/only1/{a,b}

"$K3" pack -m "$m" --drives "$d/box%r/a,$d/box%r/b" --ranks 2 -q 2>"$d/pack.log" ||
  fail "pack --ranks 2: $(cat "$d/pack.log")"
"$K3" pack -m "$m" --drives "$d/whole/a,$d/whole/b" -q || fail "whole pack"

data() { cat "$1"/{a,b}/k3-uring.data | wc -c; }
s0=$(data "$d/box0") s1=$(data "$d/box1") w=$(data "$d/whole")
# Pieces are laid out alike in all three packs (4 KiB-rounded, trunk first), so the
# trunk's bytes are what the two shares hold beyond the whole pack, and the rest of each
# share is its records.
trunk=$((s0 + s1 - w))
echo "data bytes: rank 0 $s0, rank 1 $s1, whole $w (trunk $trunk)"
((trunk > 0 && s0 < w && s1 < w)) || fail "the shares do not split the records"
for r in 0 1; do
  rec=$(((r ? s1 : s0) - trunk)) all=$((w - trunk))
  ((rec * 100 >= all * 45 && rec * 100 <= all * 55)) ||
    fail "rank $r holds $rec of the records' $all bytes, not about half"
done

# The same model: the header's model_xxh64 (bytes 40..47) on every drive of all three.
hash() { od -An -tx8 -j40 -N8 "$1/k3-uring.manifest"; }
want=$(hash "$d/whole/a")
for drv in "$d"/box{0,1}/{a,b}; do
  [[ "$(hash "$drv")" == "$want" ]] || fail "$drv names another model ($(hash "$drv"), want $want)"
done

# The manifests record the share: one process is refused, told to run R ranks.
expect_error 1 "$d/box1/a/k3-uring.manifest holds rank 1 of 2's experts; this process runs the whole model (run the 2 ranks with mpirun -np 2" \
  "$K3" run --drives "$d/box1/a,$d/box1/b" --ids 5,17 -n 1 -q
"$K3" run --drives "$d/whole/a,$d/whole/b" --ids 5,17 -n 1 -q >/dev/null || fail "the whole pack does not run"

# --rank 1 alone: the same bytes as rank 1's share (the data files; pack ids differ).
"$K3" pack -m "$m" --drives "$d/only1/a,$d/only1/b" --ranks 2 --rank 1 -q || fail "pack --rank 1"
for x in a b; do
  cmp -s "$d/only1/$x/k3-uring.data" "$d/box1/$x/k3-uring.data" || fail "--rank 1: drive $x differs"
done

# --ranks 1 is a plain pack: the same data, the same manifest but for its pack id and the
# checksum over it (bytes 24..31 and 48..63).
"$K3" pack -m "$m" --drives "$d/one/a,$d/one/b" --ranks 1 -q || fail "pack --ranks 1"
for x in a b; do
  cmp -s "$d/one/$x/k3-uring.data" "$d/whole/$x/k3-uring.data" || fail "--ranks 1: data $x differs"
  mo="$d/one/$x/k3-uring.manifest" mw="$d/whole/$x/k3-uring.manifest"
  cmp -s -n 24 "$mo" "$mw" && cmp -s -i 32 -n 16 "$mo" "$mw" && cmp -s -i 64 "$mo" "$mw" ||
    fail "--ranks 1: manifest $x differs from a plain pack's"
done

# Without --ranks, %r is rank 0, as run and serve read --drives.
mkdir -p "$d/plain0"
"$K3" pack -m "$m" --drives "$d/plain%r" -q || fail "pack --drives plain%r"
[[ -f "$d/plain0/k3-uring.manifest" ]] || fail "pack without --ranks did not write plain0"

# Bad combinations: one line naming the option and value, nothing written.
pk() { "$K3" pack -m "$m" "$@"; }
expect_error 2 "--drives $d/x/a,$d/x/b: no %r, so all 2 ranks' shares would land on the same drives" \
  pk --drives "$d/x/a,$d/x/b" --ranks 2
expect_error 2 "--rank 1: needs --ranks" pk --drives "$d/one/a" --rank 1
expect_error 2 "--rank 2: outside [0, 2) (--ranks 2)" pk --drives "$d/one/a" --ranks 2 --rank 2
expect_error 2 "--rank: -1 is outside [0, 63]" pk --drives "$d/one/a" --ranks 2 --rank -1
expect_error 2 "--ranks: 0 is outside [1, 64]" pk --drives "$d/one/a" --ranks 0
expect_error 2 "--ranks: 65 is outside [1, 64]" pk --drives "$d/box%r/a" --ranks 65
expect_error 2 "--drives $d/box%x/a: '%x'" pk --drives "$d/box%x/a" --ranks 2
expect_error 2 "--drives $d/box%x/a: '%x'" pk --drives "$d/box%x/a"
mkdir -p "$d/rep/a" "$d/rep/b"
expect_error 1 "--replicas 2 with --ranks 2: format version 1 has no room" \
  pk --drives "$d/rep/a,$d/rep/b" --ranks 2 --rank 0 --replicas 2
[[ -z "$(ls "$d/rep/a")" ]] || fail "a refused pack wrote $(ls "$d/rep/a")"
finish
