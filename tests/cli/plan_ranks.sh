#!/bin/bash
# `plan --ranks R` projects R boxes sharing K3's routed experts: --ranks 1 prints what plan
# always printed; the busiest box's experts per layer are the exact expected maximum of
# the split (9.5569 of 16 over 2 ranks, 7.3151 over 3: computed independently with
# Python's exact binomials); the bytes between boxes are 92 MoE layers x 16 outputs x
# latent 3584 x 4 B, each to the R - 1 others; the I/O floor falls with R; --net-us and
# --net-gbps move the exchange; without prediction lies between pipelined and synchronous;
# --split dealt deals 16 as 8 and 8; bad values are one line, exit 2.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/plan-ranks"
rm -rf "$d" && mkdir -p "$d"
plan() { "$K3" plan --config k3 --threads 2 --cores 2 "$@"; }

plan >"$d/one.txt" || fail "plan exited $?"
plan --ranks 1 >"$d/r1.txt" || fail "plan --ranks 1 exited $?"
cmp -s "$d/one.txt" "$d/r1.txt" || fail "--ranks 1 changed the output: $(diff "$d/one.txt" "$d/r1.txt")"
grep -q "such boxes" "$d/one.txt" && fail "plan without --ranks projects boxes"

field() { sed -n "s|^  $2  *\([0-9.]*\) .*|\1|p" "$1" | tail -1; }
for r in 2 3 4; do
  plan --ranks $r >"$d/r$r.txt" || fail "plan --ranks $r exited $?"
  grep -q "^projection for $r such boxes (mpirun -np $r" "$d/r$r.txt" || fail "--ranks $r: no projection"
done
cat "$d/r2.txt"
[[ $(field "$d/r2.txt" "experts per layer") == 9.56 ]] || fail "2 ranks: $(field "$d/r2.txt" "experts per layer") experts on the busiest box, want 9.56"
[[ $(field "$d/r3.txt" "experts per layer") == 7.32 ]] || fail "3 ranks: $(field "$d/r3.txt" "experts per layer") experts on the busiest box, want 7.32"
# 92 x 16 x 3584 x 4 B = 21.10 MB to one other box; x 3 with four boxes.
[[ $(field "$d/r2.txt" "between boxes") == 21.10 ]] || fail "2 ranks: $(field "$d/r2.txt" "between boxes") MB between boxes, want 21.10"
[[ $(field "$d/r4.txt" "between boxes") == 63.31 ]] || fail "4 ranks: $(field "$d/r4.txt" "between boxes") MB between boxes, want 63.31"
one=$(field "$d/one.txt" "I/O floor") f2=$(field "$d/r2.txt" "I/O floor") f4=$(field "$d/r4.txt" "I/O floor")
awk -v a="$one" -v b="$f2" -v c="$f4" 'BEGIN { exit !(a > b && b > c) }' ||
  fail "the I/O floor does not fall with boxes: $one, $f2, $f4 s/token"
for line in "read per token" "I/O floor" "compute" "exchange" "pipelined" "without prediction" "synchronous"; do
  [[ $(grep -c "^  $line " "$d/r2.txt") -eq 2 || "$line" == exchange ]] ||
    fail "\"$line\" is not in both projections"
done

# Without prediction the drives also idle through the exchange: between pipelined and
# synchronous on two boxes too.
awk -v p="$(field "$d/r2.txt" pipelined)" -v np="$(field "$d/r2.txt" "without prediction")" \
  -v sy="$(field "$d/r2.txt" synchronous)" 'BEGIN { exit !(p > 0 && p <= np && np <= sy) }' ||
  fail "2 ranks: pipelined $(field "$d/r2.txt" pipelined), without prediction $(field "$d/r2.txt" "without prediction"), synchronous $(field "$d/r2.txt" synchronous)"

# Every box holding every expert: a layer's 16 are dealt 8 and 8, 6 6 4 over three.
plan --ranks 2 --split dealt >"$d/dealt2.txt" && plan --ranks 3 --split dealt >"$d/dealt3.txt" ||
  fail "--split dealt exited non-zero"
[[ $(field "$d/dealt2.txt" "experts per layer") == 8.00 && $(field "$d/dealt3.txt" "experts per layer") == 6.00 ]] &&
  grep -q "the trunk and every expert on each" "$d/dealt2.txt" ||
  fail "dealt: $(field "$d/dealt2.txt" "experts per layer") and $(field "$d/dealt3.txt" "experts per layer") on the busiest box, want 8.00 and 6.00"
expect_error 2 "--split" plan --ranks 2 --split random

# The exchange: 92 layers x (latency + the busiest link's bytes at the link's rate).
plan --ranks 2 --net-us 1000 >"$d/slow.txt" || fail "--net-us 1000 exited $?"
awk -v x="$(field "$d/slow.txt" exchange)" 'BEGIN { exit !(x >= 0.092 && x < 0.1) }' ||
  fail "92 exchanges of 1 ms took $(field "$d/slow.txt" exchange) s/token"
plan --ranks 2 --net-gbps 1 --net-us 0 >"$d/thin.txt" || fail "--net-gbps 1 exited $?"
# the busiest box's link: max(9.5569 x 1, 16) outputs of 14336 B, 8 bits each, at 1 Gb/s
awk -v x="$(field "$d/thin.txt" exchange)" 'BEGIN { exit !(x > 0.168 && x < 0.170) }' ||
  fail "92 x 229 KB at 1 Gb/s took $(field "$d/thin.txt" exchange) s/token, want 0.169"

expect_error 2 "--ranks: 0 is outside [1, 64]" plan --ranks 0
expect_error 2 "--ranks: 65 is outside [1, 64]" plan --ranks 65
expect_error 2 "--net-gbps: 0 is outside" plan --ranks 2 --net-gbps 0
expect_error 2 "--net-us: \"soon\" is not a number" plan --ranks 2 --net-us soon
finish
