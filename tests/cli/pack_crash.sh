#!/bin/bash
# A pack killed with SIGKILL at any point leaves drives that do not open as a model, and
# running pack again completes it.  strace's fault injection delivers the signal at an
# exact system call: the first, a middle and the last data write, the data sync, and
# the first and second manifest renames.
source "$(dirname "$0")/lib.sh"
command -v strace >/dev/null || { echo "skip: strace is not installed" >&2; exit 77; }
strace -o /dev/null -e inject=getpid:retval=1 true 2>/dev/null ||
  { echo "skip: strace cannot inject faults here (ptrace refused)" >&2; exit 77; }
m=$(tiny_model)
d="$K3_TEST_TMP/pack-crash"
rm -rf "$d" && mkdir -p "$d/a" "$d/b" "$d/c"
drives="$d/a,$d/b,$d/c"
"$K3" run -m "$m" --ids 5,17,300,1200 -n 6 --ignore-eos -q --print-ids --logits-out "$d/want.f32" \
  >/dev/null || fail "checkpoint run"

# The number of data writes of a complete pack: one per piece.
pieces=$("$K3" pack --checkpoint "$m" --drives "$drives" 2>&1 | sed -n 's/.* in \([0-9]*\) pieces.*/\1/p')
[[ -n "$pieces" && "$pieces" -gt 10 ]] || fail "could not read the piece count"

for point in pwrite64:1 pwrite64:$((pieces / 2)) pwrite64:$pieces fdatasync:1 rename:1 rename:2; do
  call=${point%%:*} when=${point#*:}
  # (in a subshell, so the shell's own "Killed" notice stays out of the log)
  (strace -f -o /dev/null -e trace="$call" -e inject="$call:signal=KILL:when=$when" \
    "$K3" pack --checkpoint "$m" --drives "$drives" -q) 2>/dev/null
  rc=$?
  [[ $rc -eq 137 ]] || fail "pack was not killed at $point (exit $rc)"
  "$K3" run --drives "$drives" --ids 5 -n 1 -q --print-ids >/dev/null 2>"$d/err"
  rc=$?
  if [[ $rc -ne 1 ]]; then
    fail "after a kill at $point the drives opened or crashed (exit $rc)"
  else
    echo "killed at $point: $(cat "$d/err")"
  fi
  "$K3" pack --checkpoint "$m" --drives "$drives" -q 2>/dev/null || fail "pack after a kill at $point"
  "$K3" run --drives "$drives" --ids 5,17,300,1200 -n 6 --ignore-eos -q --print-ids \
    --logits-out "$d/got.f32" >/dev/null || fail "run after repacking ($point)"
  cmp -s "$d/want.f32" "$d/got.f32" || fail "repacked drives give other logits ($point)"
done
finish
