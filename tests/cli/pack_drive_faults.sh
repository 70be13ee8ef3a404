#!/bin/bash
# Drives that cannot take a pack, each refused before anything is written, and a drive
# that refuses O_DIRECT (ramfs), which warns and falls back to buffered I/O.  Mounts
# small filesystems, so it needs root (skips otherwise).
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || { echo "skip: needs root to mount test filesystems" >&2; exit 77; }
d="$K3_TEST_TMP/pack-faults"
mnt="$d/mnt"
# A ring's files are released by the kernel's deferred ring teardown, just after the run
# exits: until then the mount is busy, so umount is retried, then done lazily.
unmount() {
  mountpoint -q "$1" || return 0
  for _ in $(seq 50); do umount "$1" 2>/dev/null && return 0; sleep 0.1; done
  umount -l "$1"
}
cleanup() { for x in ro small ramfs; do unmount "$mnt/$x"; done; }
trap cleanup EXIT
cleanup
rm -rf "$d" && mkdir -p "$mnt/ro" "$mnt/small" "$mnt/ramfs" "$d/ok1" "$d/ok2"
mount -t tmpfs -o ro,size=64m tmpfs "$mnt/ro" &&
  mount -t tmpfs -o size=2m tmpfs "$mnt/small" &&
  mount -t ramfs ramfs "$mnt/ramfs" || { echo "skip: cannot mount tmpfs/ramfs here" >&2; exit 77; }
m=$(tiny_model)

expect_error 1 "drive $mnt/ro: not writable: Read-only file system" \
  "$K3" pack --checkpoint "$m" --drives "$d/ok1,$mnt/ro" -q
[[ -e "$d/ok1/k3-uring.data" ]] && fail "a data file was written before the read-only drive was refused"

expect_error 1 "drive $mnt/small: needs" "$K3" pack --checkpoint "$m" --drives "$d/ok1,$mnt/small" -q
[[ -z "$(ls -A "$mnt/small")" ]] || fail "something was written to the full drive"

expect_error 1 "drive $d/nope: No such file or directory" "$K3" pack --checkpoint "$m" --drives "$d/nope" -q
expect_error 2 "--chunk" "$K3" pack --checkpoint "$m" --drives "$d/ok1" --chunk 1K

# ramfs refuses O_DIRECT: pack warns and writes through the page cache; the run reads it back.
"$K3" pack --checkpoint "$m" --drives "$d/ok2,$mnt/ramfs" -q 2>"$d/pack.log" || fail "pack onto ramfs: $(cat "$d/pack.log")"
grep -q "drive $mnt/ramfs refuses O_DIRECT" "$d/pack.log" || fail "no O_DIRECT warning: $(cat "$d/pack.log")"
"$K3" run -m "$m" --ids 5,17,300 -n 4 -q --print-ids --logits-out "$d/want.f32" >/dev/null
"$K3" run --drives "$mnt/ramfs,$d/ok2" --ids 5,17,300 -n 4 --print-ids --logits-out "$d/got.f32" \
  >/dev/null 2>"$d/run.log" || fail "run from ramfs: $(cat "$d/run.log")"
cmp -s "$d/want.f32" "$d/got.f32" || fail "logits from a ramfs drive differ"
grep -q "note: drive $mnt/ramfs refuses O_DIRECT" "$d/run.log" || fail "the run did not say it reads ramfs buffered"
finish
