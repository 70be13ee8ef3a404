#!/bin/bash
# `k3-uring plan` on the full K3 config, without weights: with no --ram the budget is the
# floor; the floor grows with the context; every line of the plan and the projection is
# there; --ram trunk makes every trunk segment resident and --ram below the floor is
# refused naming it; the projection without prediction lies between perfect overlap and
# synchronous; --calibration sets the per-core rates and the read path's CPU per GB; bad
# input is one line on stderr and exit 2 (a usage error) or 1 (a config that does not
# load).
source "$(dirname "$0")/lib.sh"
d="$K3_TEST_TMP/plan"
rm -rf "$d" && mkdir -p "$d"
plan() { "$K3" plan --config k3 --threads 2 --cores 2 "$@"; }

plan --ctx 4096 >"$d/4k.txt" || fail "plan --ctx 4096 exited $?"
cat "$d/4k.txt"
# "budget 5.46 GiB = 5867663184 B (floor 5.46 GiB = 5867663184 B at 4096 context):"
budget() { sed -n 's/^budget [0-9.]* GiB = \([0-9]*\) B .*/\1/p' "$1"; }
floor() { sed -n 's/^budget .*(floor [0-9.]* GiB = \([0-9]*\) B at \([0-9]*\) context.*/\1/p' "$1"; }
b=$(budget "$d/4k.txt") f=$(floor "$d/4k.txt")
[[ -n "$b" && -n "$f" ]] || fail "no budget or floor line"
[[ "$b" == "$f" ]] || fail "without --ram the budget ($b B) is not the floor ($f B)"
((f > 1 << 30)) || fail "K3's floor of $f B is under 1 GiB"
grep -q "^budget .* at 4096 context" "$d/4k.txt" || fail "the plan does not say its context"
grep -q "^k3 over 8 drives, 2 threads:" "$d/4k.txt" || fail "first line: $(head -1 "$d/4k.txt")"
for field in "session state" "runtime + scratch" "small tensors" "expert buffers" \
             "trunk resident" "trunk stream slots" "expert cache" "read per token" "I/O floor" \
             "compute" "pipelined" "without prediction" "synchronous"; do
  [[ $(grep -c "^  $field " "$d/4k.txt") -eq 1 ]] || fail "\"$field\" is not one line of the plan"
done
grep -q "projection for 8 drives x 7.00 GB/s, 2 cores on 1 NUMA nodes" "$d/4k.txt" ||
  fail "the projection does not name the box"

# The session's state grows with the context, and so does the floor.
plan --ctx 8192 >"$d/8k.txt" || fail "plan --ctx 8192 exited $?"
f8=$(floor "$d/8k.txt")
((f8 > f)) || fail "the floor at 8192 positions ($f8 B) is not above the one at 4096 ($f B)"

# --ram trunk: the whole trunk resident, nothing streamed; a budget is planned as given.
plan --ram trunk >"$d/trunk.txt" || fail "plan --ram trunk exited $?"
grep -q "trunk stream slots .* for 0 streamed segments" "$d/trunk.txt" ||
  fail "--ram trunk streams segments: $(grep 'stream slots' "$d/trunk.txt")"
plan --ram 64G >"$d/64g.txt" || fail "plan --ram 64G exited $?"
[[ $(budget "$d/64g.txt") -eq $((64 << 30)) ]] || fail "--ram 64G planned $(budget "$d/64g.txt") B"
[[ $(floor "$d/64g.txt") -eq $f ]] || fail "the floor moved with the budget"
expect_error 1 "below the floor" plan --ram 1G

# Without prediction the drives idle through the compute before each layer's routing is
# known (U): the step is U + max(compute - U, reads), between pipelined (perfect overlap)
# and synchronous; reads far slower than compute: the floor + U; far faster: the compute.
value() { sed -n "s|^  $2  *\([0-9.]*\) s/token.*|\1|p" "$1"; }
before_routing() { sed -n 's|^  without prediction .*(\([0-9.]*\) s of compute before .*|\1|p' "$1"; }
for gbps in 0.01 7 1000; do
  plan --ram trunk --drive-gbps $gbps >"$d/np.txt" || fail "plan --drive-gbps $gbps exited $?"
  p=$(value "$d/np.txt" pipelined) np=$(value "$d/np.txt" "without prediction")
  sy=$(value "$d/np.txt" synchronous) io=$(value "$d/np.txt" "I/O floor") c=$(value "$d/np.txt" compute)
  u=$(before_routing "$d/np.txt")
  [[ -n $p && -n $np && -n $sy && -n $u ]] || fail "--drive-gbps $gbps: a projection line is missing: $(cat "$d/np.txt")"
  awk -v p="$p" -v np="$np" -v sy="$sy" -v u="$u" -v c="$c" 'BEGIN { exit !(p <= np && np <= sy && u > 0 && u < c) }' ||
    fail "--drive-gbps $gbps: pipelined $p, without prediction $np, synchronous $sy, U $u of compute $c"
  case $gbps in
    0.01) awk -v np="$np" -v io="$io" -v u="$u" 'BEGIN { d = np - io - u; exit !(d < 0.002 && d > -0.002) }' ||
            fail "reads-bound: without prediction $np is not the floor $io + U $u" ;;
    1000) [[ $np == "$c" ]] || fail "compute-bound: without prediction $np is not the compute $c" ;;
  esac
done

# The calibration file replaces the built-in per-core rates.
printf '{"mxfp4_gbps_per_core": 5, "bf16_gbps_per_core": 10}\n' >"$d/cal.json"
plan --calibration "$d/cal.json" | grep -q "5.00 / 10.00 GB/s per core (MXFP4 / bf16)" ||
  fail "--calibration rates not in the projection"
printf '{"mxfp4_gbps_per_core": 5}\n' >"$d/half.json"
expect_error 1 "--calibration $d/half.json: needs positive" plan --calibration "$d/half.json"
# The read path's CPU: read_cpu_s_per_gb core seconds per GB read, over the 2 cores, on
# top of the weights' compute (the built-in when the file does not give it).
grep -q ", 0.42 core s per GB read:" "$d/4k.txt" || fail "the built-in read CPU is not in the projection"
for cpu in 0 1; do
  printf '{"mxfp4_gbps_per_core": 5, "bf16_gbps_per_core": 10, "read_cpu_s_per_gb": %s}\n' $cpu >"$d/cpu$cpu.json"
  plan --calibration "$d/cpu$cpu.json" >"$d/cpu$cpu.txt" || fail "read_cpu_s_per_gb $cpu: plan exited $?"
done
gb=$(sed -n 's/^  read per token *\([0-9.]*\) GB.*/\1/p' "$d/cpu1.txt")
awk -v a="$(value "$d/cpu0.txt" compute)" -v b="$(value "$d/cpu1.txt" compute)" -v gb="$gb" \
  'BEGIN { d = b - a - gb / 2; exit !(gb > 1 && d < 0.003 && d > -0.003) }' ||
  fail "1 core s per GB read over 2 cores: compute $(value "$d/cpu0.txt" compute) -> $(value "$d/cpu1.txt" compute) for $gb GB a token"
printf '{"mxfp4_gbps_per_core": 5, "bf16_gbps_per_core": 10, "read_cpu_s_per_gb": -1}\n' >"$d/neg.json"
expect_error 1 "--calibration $d/neg.json: read_cpu_s_per_gb must be a number >= 0" plan --calibration "$d/neg.json"

# A prompt's passes: the budget's rows (-b caps them; at the floor min(-b, 32)); an 8 GB
# budget holds at least 1,024 rows of K3, and a 2,000-token prompt in its passes reads
# over ten times less than in 32-row steps (each pass reads each chosen expert once).
plan --ram 8G --prompt 2000 >"$d/prompt.txt" || fail "plan --prompt 2000 exited $?"
rows=$(sed -n 's/.*(prompt passes of \([0-9]*\) rows).*/\1/p' "$d/prompt.txt")
((rows >= 1024)) || fail "8 GB holds passes of $rows rows; want 1,024 at least"
passes_gb=$(sed -n 's/^  passes of [0-9]* rows .*(\([0-9.]*\) GB read.*/\1/p' "$d/prompt.txt")
steps_gb=$(sed -n 's/^  steps of 32 rows .*(\([0-9.]*\) GB read.*/\1/p' "$d/prompt.txt")
awk -v p="$passes_gb" -v s="$steps_gb" 'BEGIN { exit !(p > 0 && s > 10 * p) }' ||
  fail "2000 tokens: passes read $passes_gb GB, 32-row steps $steps_gb GB"
plan --ram 8G -b 300 | grep -q "(prompt passes of 300 rows)" || fail "-b 300 does not cap the rows"
plan --ram floor -b 2048 | grep -q "(prompt passes of 32 rows)" || fail "the floor's rows are not 32"
plan --ram floor -b 7 | grep -q "(prompt passes of 7 rows)" || fail "the floor's rows are not -b 7"
expect_error 2 "--batch-size: 0 is outside" plan --batch-size 0

# Usage errors: exit 2, one line naming the flag and the value.
expect_error 2 "--ctx: 0 is outside" plan --ctx 0
expect_error 2 "--ram: \"lots\" is not a size (e.g. 512M, 8G), floor or trunk" plan --ram lots
expect_error 2 "--drives: 0 is outside" plan --drives 0
expect_error 2 "--drive-gbps: \"fast\" is not a number" plan --drive-gbps fast
expect_error 2 "--config: needs a value" "$K3" plan --config
expect_error 2 "--bogus: unknown option" plan --bogus
expect_error 2 "extra: unknown argument" plan extra
expect_error 1 "--config nope: not a preset" "$K3" plan --config nope
finish
