#!/bin/bash
# A drive on device-mapper's flakey target whose every read fails, its pieces replicated
# on a healthy drive: the output is the same bytes as the checkpoint's.  Root and the
# flakey target only (77 otherwise: fault_drives.sh covers the faults a file can fake).
source "$(dirname "$0")/lib.sh"
dmsetup targets 2>/dev/null | grep -q flakey && [[ $(id -u) -eq 0 ]] ||
  { echo "skip: no device-mapper flakey target here (or not root)" >&2; exit 77; }
m=$(tiny_model)
d="$K3_TEST_TMP/fault-drives-dm"
rm -rf "$d" && mkdir -p "$d/r/a"
ids=5,17,300,1200,42,7
"$K3" run -m "$m" --ids $ids -n 8 --ignore-eos --print-ids -q --logits-out "$d/want.f32" >/dev/null ||
  fail "checkpoint run"
img="$d/flakey.img" && truncate -s 256M "$img"
loop=$(losetup --show -f "$img")
sectors=$(blockdev --getsz "$loop")
dmsetup create k3-flakey --table "0 $sectors flakey $loop 0 0 3600 1 error_reads"
trap 'umount "$d/flakey" 2>/dev/null; dmsetup remove k3-flakey 2>/dev/null; losetup -d "$loop"' EXIT
mkfs.ext4 -q /dev/mapper/k3-flakey && mkdir -p "$d/flakey" && mount /dev/mapper/k3-flakey "$d/flakey"
"$K3" pack --checkpoint "$m" --drives "$d/r/a,$d/flakey" --replicas 2 -q 2>/dev/null || fail "pack onto dm"
# from now on every read of the dm drive fails
dmsetup suspend k3-flakey && dmsetup load k3-flakey --table "0 $sectors flakey $loop 0 0 3600 1 error_reads" &&
  dmsetup resume k3-flakey
sync && echo 3 >/proc/sys/vm/drop_caches
"$K3" run --drives "$d/r/a,$d/flakey" --ids $ids -n 8 --ignore-eos --print-ids --logits-out "$d/dm.f32" \
  >/dev/null 2>"$d/dm.log" || fail "dm-flakey with replicas: $(cat "$d/dm.log")"
cmp -s "$d/want.f32" "$d/dm.f32" || fail "dm-flakey: logits differ"
finish
