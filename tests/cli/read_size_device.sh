#!/bin/bash
# --read-size above what the block device under a drive takes in one request is refused
# in one line naming the device's limit, exit 2.  77 where no block device is under the
# test's folder, or it takes 512 MiB and more (no --read-size up to 1 GiB passes it).
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/read-size-device"
rm -rf "$d" && mkdir -p "$d/d0"
dev=$(stat -c '%Hd:%Ld' "$d/d0")
kb=$(cat "/sys/dev/block/$dev/queue/max_sectors_kb" 2>/dev/null ||
     cat "/sys/dev/block/$dev/../queue/max_sectors_kb" 2>/dev/null || true)
[[ -n $kb ]] && ((kb * 2048 <= 1 << 30)) ||
  { echo "skip: no block device under $d (or it takes 512 MiB and more in one read)" >&2; exit 77; }
"$K3" pack --checkpoint "$(tiny_model)" --drives "$d/d0" -q 2>/dev/null || fail "pack"
expect_error 2 "is above $((kb * 1024)), the most the device under $d/d0 takes in one read" \
  "$K3" run --drives "$d/d0" --ids 5,17,300 -n 3 --read-size $((kb * 2048))
finish
