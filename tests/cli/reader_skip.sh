#!/bin/bash
# A reader test that could not test io_uring says so: with io_uring_setup refused for a
# reason the kernel or privileges explain (EPERM as a seccomp profile answers, ENOSYS as
# a kernel without io_uring does), every test_reader_* program exits 77 with a "skip:"
# line (the runner lists it as skipped, not passed); refused with anything else (EINVAL:
# a ring set-up regression) it fails.  strace injects the refusal.
source "$(dirname "$0")/lib.sh"
command -v strace >/dev/null || { echo "skip: strace is not installed" >&2; exit 77; }
strace -o /dev/null -e inject=getpid:retval=1 true 2>/dev/null ||
  { echo "skip: strace cannot inject faults here (ptrace refused)" >&2; exit 77; }
tests=$(dirname "$K3")/tests
progs=("$tests"/test_reader_*)
[[ -x "${progs[0]}" ]] || fail "no test_reader_* programs in $tests"
log="$K3_TEST_TMP/reader-skip.log"

for prog in "${progs[@]}"; do
  name=$(basename "$prog")
  for err in EPERM ENOSYS EINVAL; do
    # (LeakSanitizer cannot run under ptrace; the suite's own runs check leaks)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
      strace -f --seccomp-bpf -o /dev/null -e trace=io_uring_setup \
      -e inject="io_uring_setup:error=$err" "$prog" >"$log" 2>&1
    rc=$?
    if [[ $err == EINVAL ]]; then
      [[ $rc -eq 1 ]] || fail "$name with io_uring_setup refused ($err): exit $rc, want 1 (fail)"
    elif [[ $rc -ne 77 ]]; then
      fail "$name with io_uring_setup refused ($err): exit $rc, want 77 (skip)"
    elif ! grep -q '^skip: ' "$log"; then
      fail "$name with io_uring_setup refused ($err): exit 77 without a \"skip: \" line"
    else
      echo "ok: $name, $err: $(grep -m1 '^skip: ' "$log")"
    fi
  done
done
finish
