#!/bin/bash
# io_uring disabled by sysctl (kernel.io_uring_disabled = 2): `run --io auto` falls back
# to the pread pool, says so in one note and gives the logits io_uring gives; `--io uring`
# fails (exit 1).  Needs root and a writable sysctl (skip otherwise); the sysctl is set
# back at once.  (Without privileges, a seccomp filter refuses io_uring instead:
# tests/unit/test_reader_refused.c.)
source "$(dirname "$0")/lib.sh"
sysctl=/proc/sys/kernel/io_uring_disabled
[[ $(id -u) -eq 0 && -w $sysctl ]] ||
  { echo "skip: needs root and a writable $sysctl" >&2; exit 77; }
m=$(tiny_model)
d="$K3_TEST_TMP/io-uring-disabled"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q 2>/dev/null || fail "pack"
args=(--drives "$d/a,$d/b" --ids 5,17,300,1200,42 -n 6 --ignore-eos --print-ids)
"$K3" run "${args[@]}" -q --io uring --logits-out "$d/want.f32" >/dev/null || fail "io_uring run"
old=$(cat $sysctl)
trap 'echo "$old" >$sysctl' EXIT
echo 2 >$sysctl
"$K3" run "${args[@]}" --logits-out "$d/got.f32" >/dev/null 2>"$d/err"
rc=$?
"$K3" run "${args[@]}" -q --io uring >/dev/null 2>"$d/err-uring"
rc_uring=$?
echo "$old" >$sysctl
[[ $rc -eq 0 ]] || fail "with io_uring disabled, --io auto failed: $(cat "$d/err")"
[[ $(grep -c "note: io_uring unavailable" "$d/err") -eq 1 ]] || fail "not one fallback note: $(cat "$d/err")"
cmp -s "$d/want.f32" "$d/got.f32" || fail "the pread fallback's logits differ from io_uring's"
[[ $rc_uring -eq 1 ]] || fail "--io uring with io_uring disabled exited $rc_uring, want 1"
echo "fallback: $(grep note "$d/err")"
echo "forced: $(cat "$d/err-uring")"
finish
