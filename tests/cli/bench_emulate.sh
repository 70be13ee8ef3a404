#!/bin/bash
# bench/emulate.sh makes a box whose throttle is real and leaves nothing behind: 2
# drives of 256 MB at 50 MB/s come up mounted, take O_DIRECT, read no faster than
# 1.3x the limit under fio inside the box's cgroup, and after `down` no loop device,
# mount, cgroup or backing file remains. Skips (77) without root, loop devices, a
# block-cgroup throttle or fio.
set -uo pipefail
K3_ROOT=${K3_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
K3_TEST_TMP=${K3_TEST_TMP:-$(mktemp -d)}
emulate=$K3_ROOT/bench/emulate.sh
name=bench-test-$$
# Its own folder: two test runs in one tree at once must not share a box's folder.
dir=$K3_TEST_TMP/emulate/$name
mbps=50
failures=0
mkdir -p "$K3_TEST_TMP"
logs=$(mktemp -d "$K3_TEST_TMP/bench-emulate.XXXXXX")   # this run's own scratch

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
skip() { echo "skip: $*" >&2; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root (loop devices, mounts, cgroups)"
command -v fio >/dev/null || skip "needs fio"

trap '"$emulate" down --name "$name" --dir "$dir" >/dev/null 2>&1; rm -rf "$logs"' EXIT
rc=0
drives=$("$emulate" up --drives 2 --size 256M --mbps $mbps --dir "$dir" --name "$name" 2>"$logs/up.err") || rc=$?
if ((rc == 77)); then skip "$(tail -1 "$logs/up.err")"; fi
((rc == 0)) || { cat "$logs/up.err"; echo "FAIL: up exited $rc"; exit 1; }
cat "$logs/up.err"
for knob in --drives --size --mbps --dir cgroup; do
  grep -q -- "$knob" "$logs/up.err" || fail "up did not print the knob $knob"
done
IFS=, read -r -a d <<<"$(tail -1 <<<"$drives")"
[[ ${#d[@]} -eq 2 ]] || fail "up printed '$drives', want two drives"

# Each drive: a mounted loop device reading with direct I/O, and O_DIRECT files on it.
for m in "${d[@]}"; do
  mountpoint -q "$m" || { fail "$m is not mounted"; continue; }
  dev=$(findmnt -no SOURCE "$m")
  [[ $dev == /dev/loop* ]] || fail "$m is mounted from $dev, not a loop device"
  [[ $(cat "/sys/block/${dev#/dev/}/loop/dio" 2>/dev/null) == 1 ]] || fail "$dev does not use direct I/O"
  if ! { dd if=/dev/zero of="$m/odirect" bs=1M count=4 oflag=direct status=none &&
    dd if="$m/odirect" of=/dev/null bs=1M iflag=direct status=none; } 2>"$logs/dd.err"; then
    fail "O_DIRECT on $m: $(cat "$logs/dd.err")"
  fi
done

# The throttle is real: 3 s of fio in the cgroup stay under 1.3x the limit (and read
# something at all: above a quarter of it).
bw=$("$K3_ROOT/bench/fio.sh" --drives "${d[0]}" --runtime 3 --size 64M --name "$name" \
  2>"$logs/fio.err") || { cat "$logs/fio.err"; fail "fio.sh failed"; bw=0; }
limit=$((mbps * 1000 * 1000))
echo "fio in the cgroup: $bw bytes/s against a limit of $limit"
((bw < limit * 13 / 10)) || fail "fio read $bw bytes/s, more than 1.3x the $limit limit: no throttle"
((bw > limit / 4)) || fail "fio read $bw bytes/s, under a quarter of the $limit limit"

# Down leaves nothing; a second down is a no-op.
"$emulate" down --name "$name" --dir "$dir" || fail "down exited $?"
losetup -a | grep -F "$dir/" && fail "loop devices on $dir remain"
grep -F " $dir/" /proc/mounts && fail "mounts under $dir remain"
while read -r root; do
  [[ -e $root/k3-emulate-$name ]] && fail "cgroup $root/k3-emulate-$name remains"
done < <(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts)
[[ -e $dir ]] && fail "$dir remains: $(ls "$dir")"
"$emulate" down --name "$name" --dir "$dir" 2>/dev/null || fail "a second down exited $?"
rmdir "$K3_TEST_TMP/emulate" 2>/dev/null

if ((failures)); then echo "$failures failure(s)"; exit 1; fi
echo "ok"
