#!/bin/bash
# `plan` and the runtime see one budget: for a packed model, `plan --config` of its
# config.json prints the same floor, budget and parts, to the byte, as `run -v` over its
# drives, at the same context, threads and NUMA nodes, for --ram floor, trunk and a size,
# and with --predict-from ids, whose counts both count.
source "$(dirname "$0")/lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/plan-floor"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q || fail "pack"
# The budget block: from "budget ... (floor ...)" through "expert cache".
block() { sed -n 's/^.*\(budget [0-9.]* GiB = \)/\1/; /^budget /,/expert cache/p' "$1"; }
compare() { # what, plan args, run args (environment for run first)
  local what=$1 plan_args=$2; shift 2
  "$K3" plan --config "$m/config.json" --drives 2 $plan_args >"$d/plan.out" 2>&1 ||
    { fail "$what: plan: $(cat "$d/plan.out")"; return; }
  env "$@" --drives "$d/a,$d/b" --ids 5,17 -n 1 -v >/dev/null 2>"$d/run.out" ||
    { fail "$what: run: $(cat "$d/run.out")"; return; }
  block "$d/plan.out" >"$d/plan.block"
  block "$d/run.out" >"$d/run.block"
  if [[ ! -s "$d/plan.block" ]] || ! cmp -s "$d/plan.block" "$d/run.block"; then
    fail "$what: plan and run disagree:"
    diff "$d/plan.block" "$d/run.block"
  else
    echo "ok: $what: $(head -1 "$d/plan.block")"
  fi
}
for ram in floor trunk 64M; do
  compare "--ram $ram, 2 threads" "--ram $ram --ctx 64 --threads 2" \
    "$K3" run --ram $ram -c 64 -t 2
done
compare "1 thread, 512 context" "--ram floor --ctx 512 --threads 1" "$K3" run --ram floor -c 512 -t 1
compare "two NUMA nodes" "--ram floor --ctx 64 --threads 2 --numa-nodes 2" \
  K3_TOPOLOGY="synthetic:pack:2 [numa] core:1 pu:1" "$K3" run --ram floor -c 64 -t 2
compare "--predict-from ids" "--ram floor --ctx 64 --threads 2 --predict-from ids" \
  "$K3" run --ram floor -c 64 -t 2 --predict-from ids
grep -q "id predictor" "$d/plan.block" || fail "--predict-from ids: no id predictor line in the budget"
finish
