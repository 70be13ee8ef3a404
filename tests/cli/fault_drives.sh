#!/bin/bash
# Faults from the filesystem, not injected: a drive's data file cut short (reads past its
# end come back short), with and without replicas.  With replicas the output is the same
# bytes; without, one clear error naming the drive.  (A drive on dm-flakey whose reads
# fail: fault_drives_dm.sh.)
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/fault-drives"
rm -rf "$d" && mkdir -p "$d"
ids=5,17,300,1200,42,7
"$K3" run -m "$m" --ids $ids -n 8 --ignore-eos --print-ids -q --logits-out "$d/want.f32" >/dev/null ||
  fail "checkpoint run"

mkdir -p "$d/r/a" "$d/r/b" "$d/r/c" "$d/s/a" "$d/s/b"
"$K3" pack --checkpoint "$m" --drives "$d/r/a,$d/r/b,$d/r/c" --replicas 2 -q 2>/dev/null || fail "pack with replicas"
"$K3" pack --checkpoint "$m" --drives "$d/s/a,$d/s/b" -q 2>/dev/null || fail "pack"
# Keep the files' size (the open checks it) but lose their contents: a hole punched
# over the drive's whole data reads back as zeros, which no checksum accepts.
for f in "$d/r/b/k3-uring.data" "$d/s/b/k3-uring.data"; do
  fallocate --punch-hole --keep-size --offset 0 --length "$(stat -c %s "$f")" "$f" ||
    { echo "skip: cannot punch holes here" >&2; exit 77; }
done
"$K3" run --drives "$d/r/a,$d/r/b,$d/r/c" --ids $ids -n 8 --ignore-eos --print-ids \
  --logits-out "$d/got.f32" >/dev/null 2>"$d/r.log" || fail "with replicas: $(cat "$d/r.log")"
cmp -s "$d/want.f32" "$d/got.f32" || fail "with replicas the logits differ"
expect_error 1 "drive $d/s/b: reading" "$K3" run --drives "$d/s/a,$d/s/b" --ids $ids -n 8 -q --print-ids
# The same through an I/O thread and ring per node (a synthetic two-node topology).
two="synthetic:pack:2 [numa] core:1 pu:1"
K3_TOPOLOGY="$two" "$K3" run --drives "$d/r/a,$d/r/b,$d/r/c" --ids $ids -n 8 --ignore-eos \
  --print-ids -v --logits-out "$d/got2.f32" >/dev/null 2>"$d/r2.log" || fail "two nodes, with replicas: $(cat "$d/r2.log")"
grep -q "reads through io_uring threads\|reads through pread" "$d/r2.log" || fail "two nodes: $(grep 'reads through' "$d/r2.log")"
cmp -s "$d/want.f32" "$d/got2.f32" || fail "two nodes, with replicas: the logits differ"
expect_error 1 "drive $d/s/b: reading" env K3_TOPOLOGY="$two" "$K3" run --drives "$d/s/a,$d/s/b" \
  --ids $ids -n 8 -q --print-ids

finish
