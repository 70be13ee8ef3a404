#!/bin/bash
# `k3-uring plan --trunk-type`: full K3 on a 64 GB box with two drives, planned with the
# trunk as bf16 and as Q8_0.  Q8_0 holds more of the trunk resident in the same budget and
# reads fewer bytes per token; each plan projects the other type too and names the faster
# (the smaller of the two s/token figures), the same verdict from either side; the Q8_0
# plan says how many trunk bytes are Q8_0.  An unknown type is one line, exit 2.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/plan-trunk-type"
rm -rf "$d" && mkdir -p "$d"
box=(--config k3 --drives 2 --drive-gbps 7 --cores 32 --ram 60G)
"$K3" plan "${box[@]}" >"$d/bf16.txt" || fail "plan (bf16) exited $?"
"$K3" plan "${box[@]}" --trunk-type q8_0 >"$d/q8.txt" || fail "plan --trunk-type q8_0 exited $?"
grep -E "trunk resident|read per token|trunk type|trunk as" "$d/bf16.txt" "$d/q8.txt"
resident() { sed -n 's/.*trunk resident .*(\([0-9]*\) of .*/\1/p' "$1"; }
read_gb() { sed -n 's/^  read per token *\([0-9.]*\) GB.*/\1/p' "$1"; }
rb=$(resident "$d/bf16.txt") rq=$(resident "$d/q8.txt")
((rq > rb)) || fail "q8_0 keeps $rq segments resident, bf16 $rb: not more"
awk -v b="$(read_gb "$d/bf16.txt")" -v q="$(read_gb "$d/q8.txt")" 'BEGIN { exit !(q < b) }' ||
  fail "q8_0 reads $(read_gb "$d/q8.txt") GB a token, bf16 $(read_gb "$d/bf16.txt"): not fewer"
grep -q "^  trunk as q8_0 .* GB/token of Q8_0" "$d/q8.txt" || fail "the q8_0 plan does not say its Q8_0 bytes"
grep -q "^  trunk as q8_0" "$d/bf16.txt" && fail "the bf16 plan has a Q8_0 line"
# "  trunk type            bf16 5.739 s/token; q8_0 1.979 (...): q8_0 is faster here"
verdict() {
  sed -n 's/^  trunk type  *\([a-z0-9_]*\) \([0-9.]*\) s\/token; \([a-z0-9_]*\) \([0-9.]*\) .*: \([a-z0-9_]*\) is faster here.*/\1 \2 \3 \4 \5/p' "$1"
}
for f in bf16 q8; do
  read -r t1 s1 t2 s2 faster <<<"$(verdict "$d/$f.txt")"
  [[ -n $faster ]] || { fail "$f: no trunk type line: $(grep 'trunk type' "$d/$f.txt")"; continue; }
  want=$(awk -v a="$s1" -v b="$s2" -v x="$t1" -v y="$t2" 'BEGIN { print (a <= b ? x : y) }')
  [[ $faster == "$want" ]] || fail "$f: names $faster faster of $t1 $s1 and $t2 $s2"
  echo "$f plan: $t1 $s1, $t2 $s2 s/token: $faster"
done
[[ $(verdict "$d/bf16.txt" | cut -d' ' -f5) == $(verdict "$d/q8.txt" | cut -d' ' -f5) ]] ||
  fail "the two plans disagree on the faster type"
expect_error 2 "--trunk-type int4: not a trunk type (bf16, q8_0)" "$K3" plan --trunk-type int4
finish
