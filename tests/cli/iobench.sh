#!/bin/bash
# `k3-uring iobench` on a small pack (k3-tiny over two drives): a CSV line per decode
# step (token, seconds, bytes, GBps, reads, hits) on stdout and one summary line on
# stderr, the read path's CPU per GB in it; with room for an expert cache later steps hit it, with --no-cache none does;
# the same seed reads the same records; bad input is one line on stderr, exit 2 for a
# usage error and 1 for drives that do not open.
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/iobench"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$(tiny_model)" --drives "$d/a,$d/b" -q >/dev/null 2>&1 || fail "pack"
drives="$d/a,$d/b"

"$K3" iobench --drives "$drives" --tokens 3 --ram 256M >"$d/cache.csv" 2>"$d/cache.err" ||
  fail "iobench exited $?: $(cat "$d/cache.err")"
cat "$d/cache.csv" "$d/cache.err"
[[ $(head -1 "$d/cache.csv") == "token,seconds,bytes,GBps,reads,hits" ]] || fail "CSV header: $(head -1 "$d/cache.csv")"
[[ $(wc -l <"$d/cache.csv") -eq 4 ]] || fail "want 3 steps after the header"
awk -F, 'NR > 1 && (NF != 6 || $1 != NR - 2 || $3 <= 0 || $5 <= 0) { exit 1 }' "$d/cache.csv" ||
  fail "a step without its index, bytes or reads"
[[ $(awk -F, 'NR == 4 { print $6 }' "$d/cache.csv") -gt 0 ]] || fail "no cache hits at the third step"
[[ $(wc -l <"$d/cache.err") -eq 1 ]] && grep -Eq \
  "^k3-uring iobench: (io_uring|pread), 2 drives, 3 tokens in [0-9.]+ s; steady state [0-9.]+ MB/token.*; CPU [0-9.]+ s per GB read$" \
  "$d/cache.err" || fail "summary: $(cat "$d/cache.err")"

"$K3" iobench --drives "$drives" --tokens 2 --ram 256M --no-cache --seed 7 >"$d/a.csv" 2>"$d/a.err" ||
  fail "--no-cache exited $?"
awk -F, 'NR > 1 && $6 != 0 { exit 1 }' "$d/a.csv" || fail "cache hits with --no-cache: $(cat "$d/a.csv")"
# Reading costs the process some CPU: the read path's own, per GB.
sed -n 's/.*; CPU \([0-9.]*\) s per GB read$/\1/p' "$d/a.err" | awk '{ exit !($1 > 0) }' ||
  fail "no CPU per GB read: $(cat "$d/a.err")"
"$K3" iobench --drives "$drives" --tokens 2 --ram 256M --no-cache --seed 7 >"$d/b.csv" 2>/dev/null ||
  fail "second --seed 7 run exited $?"
cmp -s <(cut -d, -f1,3,5,6 "$d/a.csv") <(cut -d, -f1,3,5,6 "$d/b.csv") ||
  fail "--seed 7 read differently twice: $(paste -d' ' "$d/a.csv" "$d/b.csv")"

# Usage errors: exit 2.
expect_error 2 "--drives is required" "$K3" iobench --tokens 2
expect_error 2 "--tokens: 0 is outside" "$K3" iobench --drives "$drives" --tokens 0
expect_error 2 "--io: \"fast\" is not auto, uring or pread" "$K3" iobench --drives "$drives" --io fast
expect_error 2 "--ram: \"some\" is not a size" "$K3" iobench --drives "$drives" --ram some
expect_error 2 "--seed: \"-3\" is not a non-negative integer" "$K3" iobench --drives "$drives" --seed -3
expect_error 2 "--bogus: unknown option" "$K3" iobench --drives "$drives" --bogus
# Drives that do not open, a budget that does not hold the floor: exit 1.
expect_error 1 "the pack has 2 drives, 1 given" "$K3" iobench --drives "$d/a" --tokens 1
expect_error 1 "drive $d/nowhere: no k3-uring.manifest" "$K3" iobench --drives "$d/a,$d/nowhere"
expect_error 1 "is below the floor of" "$K3" iobench --drives "$drives" --ram 64K
finish
