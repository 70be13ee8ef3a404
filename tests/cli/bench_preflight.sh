#!/bin/bash
# bench/run.sh's preflight (PREFLIGHT_ONLY=1) refuses before writing anything, naming
# what is wrong: a tool missing from PATH (gnuplot), a DRIVES folder that does not exist,
# two DRIVES folders on one device; and passes, writing nothing, when all is in order
# (ALLOW_SAME_DEVICE=1).  No root needed; about a second.
set -uo pipefail
K3_ROOT=${K3_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/lib.sh"
run=$K3_ROOT/bench/run.sh
scratch=$(mktemp -d "$K3_TEST_TMP/bench-preflight.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# A model folder is all the preflight reads of CKPT (its config and its size).
ckpt=$scratch/ckpt
mkdir -p "$ckpt" "$scratch/a" "$scratch/b"
"$K3" plan --help >/dev/null || { echo "FAIL: no engine at $K3"; exit 1; }
echo '{}' >"$ckpt/config.json"
# Stubs for the bench's tools, so the test does not depend on what this machine has.
stubs=$scratch/stubs
mkdir -p "$stubs"
for t in fio gnuplot bc python3 make cc; do printf '#!/bin/sh\nexit 0\n' >"$stubs/$t"; chmod +x "$stubs/$t"; done
# PATH without gnuplot: every command of PATH linked in, but that one.
nognuplot=$scratch/nognuplot
mkdir -p "$nognuplot"
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}" "$stubs"; do
  [[ -d $d ]] && cp -sn "$d"/* "$nognuplot/" 2>/dev/null
done
rm -f "$nognuplot/gnuplot"

knobs=(PREFLIGHT_ONLY=1 K3="$K3" CKPT="$ckpt" STAGES=decode CALIBRATION="$K3_ROOT/bench/results/calibration.json")
# expect RC NEEDLE ENV...: run.sh's preflight exits RC and says NEEDLE on stderr.
expect() {
  local want=$1 needle=$2 rc
  shift 2
  env "${knobs[@]}" "$@" "$run" >"$scratch/out" 2>"$scratch/err" && rc=0 || rc=$?
  if [[ $rc -ne $want ]]; then fail "$* exited $rc, want $want: $(cat "$scratch/err")"
  elif ! grep -qF -- "$needle" "$scratch/err"; then fail "$*: stderr does not say '$needle': $(cat "$scratch/err")"
  else echo "ok ($*): $(grep -F -- "$needle" "$scratch/err" | head -1)"; fi
}

expect 1 "missing gnuplot" PATH="$nognuplot" DRIVES="$scratch/a"
expect 1 "gnuplot-nox" PATH="$nognuplot" DRIVES="$scratch/a"
expect 1 "$scratch/nowhere does not exist" PATH="$stubs:$PATH" DRIVES="$scratch/a,$scratch/nowhere"
expect 1 "same device" PATH="$stubs:$PATH" DRIVES="$scratch/a,$scratch/b"
expect 1 "DRIVE_COUNTS: 3 drives" PATH="$stubs:$PATH" DRIVES="$scratch/a,$scratch/b" ALLOW_SAME_DEVICE=1 DRIVE_COUNTS=3
expect 0 "preflight passed" PATH="$stubs:$PATH" DRIVES="$scratch/a,$scratch/b" ALLOW_SAME_DEVICE=1
grep -q "drive counts: 1 2" "$scratch/err" || fail "two DRIVES should default to DRIVE_COUNTS=\"1 2\": $(cat "$scratch/err")"
# The slice stage counts the k3-slice it would synthesize (passing or not: that depends
# on this disk's free space).
env "${knobs[@]}" PATH="$stubs:$PATH" STAGES=slice SLICE="$scratch/slice" "$run" >/dev/null 2>"$scratch/err"
grep -qF "k3-slice to synthesize at $scratch/slice 13.8 GB" "$scratch/err" ||
  fail "STAGES=slice: the space line does not count k3-slice: $(cat "$scratch/err")"
[[ ! -e $scratch/slice ]] || fail "the preflight made $scratch/slice"
# Nothing written: no results/tmp, nothing in the drives.
left=$(find "$scratch/a" "$scratch/b" -mindepth 1)
[[ -z $left ]] || fail "the preflight left files in DRIVES: $left"
[[ ! -e $K3_ROOT/bench/results/tmp ]] || fail "bench/results/tmp exists after a preflight"
finish
