#!/bin/bash
# --trunk-type q8_0: the determinism contract within one trunk type.  k3-tiny's checkpoint
# quantized as it loads (-m DIR --trunk-type q8_0) and packed as Q8_0 on 1 and 2 drives
# give the same logits and tokens at the floor and an ample budget, 1 and 2 threads,
# cache on and off, io_uring and the pread pool, --sync, prediction off, prompt passes of
# 5 rows; those bytes are not bf16's (the matrices really are Q8_0), and the Q8_0 pack
# is smaller.  A pack opened as the other type, and an
# unknown type's name, each get one line naming it.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/trunk-type"
rm -rf "$d" && mkdir -p "$d"
args=(--ids 5,17,300,1200,42,7,999,2031,0,64 -n 10 --ignore-eos --print-ids)
"$K3" run -m "$m" "${args[@]}" -q --logits-out "$d/bf16.f32" >/dev/null || fail "bf16 run"
"$K3" run -m "$m" "${args[@]}" -q --trunk-type q8_0 --logits-out "$d/want.f32" \
  >"$d/want.ids" || fail "q8_0 run"
cmp -s "$d/bf16.f32" "$d/want.f32" && fail "q8_0 gave bf16's logits: nothing was quantized"

mkdir -p "$d/b/d0" "$d/q1/d0" "$d/q2/d0" "$d/q2/d1"
"$K3" pack -m "$m" -d "$d/b/d0" -q || fail "bf16 pack"
"$K3" pack -m "$m" -d "$d/q1/d0" --trunk-type q8_0 -q || fail "q8_0 pack on 1 drive"
"$K3" pack -m "$m" -d "$d/q2/d0,$d/q2/d1" --trunk-type q8_0 -q || fail "q8_0 pack on 2 drives"
bsize=$(stat -c %s "$d/b/d0/k3-uring.data")
qsize=$(stat -c %s "$d/q1/d0/k3-uring.data")
((qsize < bsize)) || fail "the q8_0 pack ($qsize B) is not smaller than bf16's ($bsize B)"
echo "data: bf16 $bsize B, q8_0 $qsize B"

for ram in floor 256M; do
  for t in 1 2; do
    same_as_want "-m DIR ram=$ram threads=$t" -m "$m" --trunk-type q8_0 --ram $ram -t $t
    for cache in on off; do
      extra=() && [[ $cache == off ]] && extra=(--no-cache)
      same_as_want "1 drive ram=$ram threads=$t cache=$cache" --drives "$d/q1/d0" --ram $ram -t $t \
        "${extra[@]}"
      same_as_want "2 drives ram=$ram threads=$t cache=$cache" --drives "$d/q2/d1,$d/q2/d0" \
        --trunk-type q8_0 --ram $ram -t $t "${extra[@]}"
    done
  done
done
same_as_want "2 drives io=pread" --drives "$d/q2/d0,$d/q2/d1" --io pread --ram floor
same_as_want "2 drives --sync --predict off" --drives "$d/q2/d0,$d/q2/d1" --sync --predict off
same_as_want "passes of 5 rows" --drives "$d/q2/d0,$d/q2/d1" -b 5 --ram floor
same_as_want "-m DIR passes of 5 rows, --sync" -m "$m" --trunk-type q8_0 -b 5 --sync
echo "22 configurations of q8_0 compared with -m DIR --trunk-type q8_0"

expect_error 2 "--trunk-type fp8: not a trunk type (bf16, q8_0)" \
  "$K3" run -m "$m" --ids 1,2 -n 1 --trunk-type fp8
expect_error 2 "--trunk-type fp8: not a trunk type (bf16, q8_0)" \
  "$K3" pack -m "$m" -d "$d/b/d0" --trunk-type fp8
expect_error 1 "the pack's trunk is q8_0, not the bf16 --trunk-type asks for" \
  "$K3" run --drives "$d/q1/d0" --ids 1,2 -n 1 --trunk-type bf16
expect_error 1 "the pack's trunk is bf16, not the q8_0 --trunk-type asks for" \
  "$K3" run --drives "$d/b/d0" --ids 1,2 -n 1 --trunk-type q8_0
finish
