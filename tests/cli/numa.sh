#!/bin/bash
# NUMA placement through the engine: the plan it prints for this machine, and output
# byte-identical across --numa auto/off, thread counts and synthetic multi-node
# topologies (K3_TOPOLOGY; binding there is a no-op, the thread and row layout is not),
# the expert cache's per-team picks checked against a scan (K3_CHECK_CACHE).
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/numa"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q 2>/dev/null || fail "pack"
args=(--drives "$d/a,$d/b" --ids 5,17,300,1200,42,7 -n 10 --ignore-eos --print-ids)
"$K3" run "${args[@]}" -q --logits-out "$d/want.f32" >/dev/null || fail "default run"

"$K3" run "${args[@]}" -v >/dev/null 2>"$d/v.log" || fail "-v run"
grep -Eq "^k3-uring: node [0-9]+: [0-9]+ threads, cpus [0-9]" "$d/v.log" ||
  fail "no plan line: $(cat "$d/v.log")"
echo "plan: $(grep 'node ' "$d/v.log")"

for extra in "--numa off" "--numa off -t 1" "-t 1" "-t 2"; do
  # shellcheck disable=SC2086
  "$K3" run "${args[@]}" -q $extra --logits-out "$d/got.f32" >/dev/null 2>"$d/err" || fail "$extra: $(cat "$d/err")"
  cmp -s "$d/want.f32" "$d/got.f32" || fail "$extra: logits differ"
done
# Each node's team computes the experts whose buffers are on its node, all teams at once
# (up to 8 teams here, more threads than this machine has cores), and each node has an
# I/O thread with its own ring.
for case in "pack:2 [numa] core:2 pu:1" "pack:2 numa:2 core:1 pu:2" "[numa] core:3 pu:1" \
            "pack:2 [numa] core:3 pu:1|-t 5" "pack:2 numa:4 core:1 pu:1|-t 8"; do
  topo=${case%%|*} extra=""
  [[ $case == *"|"* ]] && extra=${case#*|}
  # shellcheck disable=SC2086
  K3_TOPOLOGY="synthetic:$topo" "$K3" run "${args[@]}" -v $extra --logits-out "$d/got.f32" \
    >/dev/null 2>"$d/err" || { fail "$topo: $(cat "$d/err")"; continue; }
  cmp -s "$d/want.f32" "$d/got.f32" || fail "synthetic $topo $extra: logits differ"
  teams=$(grep -Ec 'node [0-9]+: [0-9]+ thread' "$d/err") counts=""
  # every team computes a share of the experts (records are dealt over the teams' buffers),
  # and each node's drives are read by an I/O thread and ring of its own
  if ((teams > 1)); then
    grep -q "reads through io_uring" "$d/err" && ! grep -q "reads through io_uring threads" "$d/err" &&
      fail "synthetic $topo $extra: one ring for $teams nodes: $(grep 'reads through' "$d/err")"
    counts=$(sed -n 's/^k3-uring: routed experts computed by//p' "$d/err")
    [[ $(grep -o 'team [0-9]* (node [0-9]*) [1-9][0-9]*' <<<"$counts" | wc -l) == "$teams" ]] ||
      fail "synthetic $topo $extra: not every team computed experts: $counts"
  fi
  echo "synthetic $topo $extra: $teams nodes with a team, identical;${counts:- one team}"
done
# The expert cache at the floor on two nodes, evicting on most misses: each team's slots
# are taken in turn, and every slot picked from the per-team indexes is the one a scan of
# every slot picks (K3_CHECK_CACHE asserts it).
K3_CHECK_CACHE=on K3_TOPOLOGY="synthetic:pack:2 numa:2 core:1 pu:2" "$K3" run "${args[@]}" \
  --ram floor -q --logits-out "$d/got.f32" >/dev/null 2>"$d/err" &&
  cmp -s "$d/want.f32" "$d/got.f32" && echo "2 nodes at the floor, every cache pick checked: identical" ||
  fail "2 nodes at the floor with K3_CHECK_CACHE: $(tail -1 "$d/err")"
expect_error 1 "unset OMP_PROC_BIND" env OMP_PROC_BIND=true "$K3" run "${args[@]}" -q
expect_error 2 "--numa: \"maybe\" is not auto or off" "$K3" run "${args[@]}" --numa maybe
finish
