#!/bin/bash
# --ram auto (the default) inside a real memory cgroup: the budget is the group's limit
# less the margin, and -v says so naming both; the bytes are those of any other budget;
# a --ram above the limit is refused naming both figures; a limit whose share less the
# margin is below the floor is refused naming the floor.  Needs root and a memory cgroup
# it can create (cgroup v1's memory controller, or v2 with memory enabled at the root).
source "$(dirname "$0")/lib.sh"
skip() { echo "skip: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create a memory cgroup"
name=k3-test-ram-$$
if [[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]]; then
  cg=/sys/fs/cgroup/memory/$name limit_file=memory.limit_in_bytes limit_name=memory.limit_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
  cg=/sys/fs/cgroup/$name limit_file=memory.max limit_name=memory.max
else
  skip "no memory cgroup controller mounted (v1 /sys/fs/cgroup/memory, or v2 with memory enabled)"
fi
mkdir "$cg" 2>/dev/null || skip "cannot create $cg"
trap 'rmdir "$cg"' EXIT

# in_group LIMIT CMD...: CMD run inside the group, its limit set to LIMIT bytes.
in_group() {
  echo "$1" >"$cg/$limit_file" || fail "cannot set $cg/$limit_file to $1"
  shift
  bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"
}
m=$(tiny_model)
d="$K3_TEST_TMP/ram-auto"
rm -rf "$d" && mkdir -p "$d"
gen=(-m "$m" --ids 5,17,300 -n 6 --ignore-eos --print-ids)
"$K3" run "${gen[@]}" --ram floor -q --logits-out "$d/floor.f32" >/dev/null || fail "floor run"

GiB=1073741824 MiB=1048576
in_group $GiB "$K3" run "${gen[@]}" -v --logits-out "$d/auto.f32" >/dev/null 2>"$d/auto.log" ||
  fail "auto in a 1 GiB group: $(cat "$d/auto.log")"
# The margin of a 1 GiB share is its least, 256 MiB (ram_auto.c).
want="--ram auto: 0.75 GiB = cgroup limit 1.00 GiB ($limit_name of /$name) less 0.25 GiB margin"
grep -qF -- "$want" "$d/auto.log" || fail "want \"$want\" in: $(cat "$d/auto.log")"
grep -q "budget 0.75 GiB = $((GiB - 256 * MiB)) B" "$d/auto.log" ||
  fail "the budget is not the limit less the margin: $(grep budget "$d/auto.log")"
cmp -s "$d/floor.f32" "$d/auto.f32" || fail "--ram auto's logits differ from --ram floor's"
echo "1 GiB group: $(grep -- '--ram auto' "$d/auto.log" | sed 's/k3-uring: //')"

# run --stats says it too, with its closing statistics (without -v).
in_group $GiB "$K3" run "${gen[@]}" --stats >/dev/null 2>"$d/stats.log" || fail "--stats run"
grep -qF -- "$want" "$d/stats.log" || fail "--stats does not say \"$want\": $(cat "$d/stats.log")"

expect_error 1 "--ram 2.00 GiB is more than this process may use: cgroup limit 1.00 GiB" \
  in_group $GiB "$K3" run -m "$m" --ids 5 -n 1 --ram 2G -q
# 280 MiB less the 256 MiB margin is below the tiny model's floor (about 50 MiB).
expect_error 1 "less 0.25 GiB margin: --ram 0.02 GiB is below the floor of" \
  in_group $((280 * MiB)) "$K3" run -m "$m" --ids 5 -n 1 -q
finish
