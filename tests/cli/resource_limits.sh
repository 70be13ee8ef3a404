#!/bin/bash
# Resource limits: too little locked memory for registered buffers (the reader falls back
# to plain reads and says so; same bytes), too few file descriptors (a clear error),
# and the disk filling up during pack (a clear error, no manifest, and a rerun
# completes).  Dropping privileges and injecting ENOSPC need root and strace.
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || { echo "skip: needs root (to drop privileges and lower limits)" >&2; exit 77; }
command -v setpriv >/dev/null && command -v strace >/dev/null ||
  { echo "skip: needs setpriv and strace" >&2; exit 77; }
m=$(tiny_model)
# The unprivileged run needs every folder on its way traversable, which a checkout under a
# private folder (mktemp -d) is not: drives and binary go to a folder of their own.
d=$(mktemp -d /var/tmp/k3-resource-limits.XXXXXX) || fail "mktemp"
trap 'rm -rf "$d"' EXIT
chmod 755 "$d" && mkdir -p "$d/a" "$d/b" && cp "$K3" "$d/k3-uring" && K3=$d/k3-uring
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q 2>/dev/null || fail "pack"
chmod -R a+rX "$d"
ids=5,17,300,1200
"$K3" run --drives "$d/a,$d/b" --ids $ids -n 6 --ignore-eos -q --print-ids --logits-out "$d/want.f32" >/dev/null ||
  fail "unlimited run"
chmod 777 "$d"

# RLIMIT_MEMLOCK of 64 KiB and no CAP_IPC_LOCK: buffer registration fails.
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all bash -c \
  "ulimit -l 64 && '$K3' run --drives '$d/a,$d/b' --ids $ids -n 6 --ignore-eos --print-ids --logits-out '$d/got.f32'" \
  >/dev/null 2>"$d/memlock.log" || fail "memlock 64K: $(cat "$d/memlock.log")"
grep -q "note: .*regist" "$d/memlock.log" || fail "no note about registration: $(cat "$d/memlock.log")"
cmp -s "$d/want.f32" "$d/got.f32" || fail "memlock 64K: logits differ"
echo "memlock: $(grep note "$d/memlock.log")"

# File descriptors: with six (stdio, the logits file, the two data files) there is none
# left for the ring, so the pread pool serves, said once, same bytes; with four, the
# second drive's file cannot be opened: a clear error.
bash -c "ulimit -n 6 && exec '$K3' run --drives '$d/a,$d/b' --ids $ids -n 6 --ignore-eos --print-ids \
  --logits-out '$d/fd.f32'" >/dev/null 2>"$d/fd.log" || fail "6 fds: $(cat "$d/fd.log")"
grep -q "note: io_uring unavailable (.*Too many open files); 8 pread threads" "$d/fd.log" ||
  fail "6 fds: no fallback note: $(cat "$d/fd.log")"
cmp -s "$d/want.f32" "$d/fd.f32" || fail "6 fds: logits differ"
echo "6 fds: $(grep note "$d/fd.log")"
expect_error 1 "Too many open files" bash -c "ulimit -n 4 && exec '$K3' run --drives '$d/a,$d/b' --ids $ids -n 2 -q"

# The disk fills while packing: ENOSPC on reserving the data, then on writing a manifest.
# LeakSanitizer cannot run under ptrace, so the traced runs leave leak checking to the rest.
mkdir -p "$d/p1" "$d/p2"
for point in fallocate:1 "pwrite64:$(($("$K3" pack --checkpoint "$m" --drives "$d/p1,$d/p2" 2>&1 | sed -n 's/.* in \([0-9]*\) pieces.*/\1/p') + 1))"; do
  call=${point%%:*} when=${point#*:}
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    strace -f -o /dev/null -e trace="$call" -e inject="$call:error=ENOSPC:when=$when" \
    "$K3" pack --checkpoint "$m" --drives "$d/p1,$d/p2" -q >/dev/null 2>"$d/enospc.log"
  rc=$?
  [[ $rc -eq 1 ]] || fail "ENOSPC at $point: exit $rc"
  grep -q "No space left on device" "$d/enospc.log" || fail "ENOSPC at $point: $(cat "$d/enospc.log")"
  echo "ENOSPC at $point: $(grep -v '^pack:' "$d/enospc.log")"
  [[ -e "$d/p1/k3-uring.manifest" ]] && fail "ENOSPC at $point left a manifest on p1"
  "$K3" pack --checkpoint "$m" --drives "$d/p1,$d/p2" -q 2>/dev/null || fail "pack after ENOSPC at $point"
  "$K3" run --drives "$d/p1,$d/p2" --ids 5 -n 1 -q --print-ids >/dev/null || fail "run after repacking"
done
finish
