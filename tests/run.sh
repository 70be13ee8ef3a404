#!/bin/bash
# Test runner: every unit-test program in BUILD/tests and every script in tests/cli,
# one at a time, each under a time limit (K3_TEST_TIMEOUT seconds, 300, stretched by the
# machine's load: limit_now).  Exit codes: 0 pass, 77 skip, anything else fail.
# Usage: tests/run.sh BUILD [NAME-FILTER]
set -u
build=${1:?usage: tests/run.sh BUILD [FILTER]}
filter=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
export K3="$root/$build/k3-uring"
export K3_ROOT="$root"
export K3_TEST_TMP="$root/$build/test-tmp"
# Tests check properties, not speed: OpenMP threads that spin while they wait crawl on a
# shared machine whose cores are taken.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
timeout_s=${K3_TEST_TIMEOUT:-300}
cpus=$(nproc)
# How many independent checks a test of many (tokenizer_parity, docs_commands)
# keeps going at once: the CPUs, at most 4 (tests/cli/lib.sh: concurrently).
export K3_TEST_PAR=${K3_TEST_PAR:-$((cpus < 4 ? cpus : 4))}
mkdir -p "$K3_TEST_TMP"
# The shared checkpoint the k3-tiny fixture pins (tests/util.h, tests/cli/lib.sh): made
# afresh by this build's synth, not left over from an older one.
rm -rf "$K3_TEST_TMP/k3-tiny-seed1"

passed=0 failed=0 skipped=0
failed_names=() skipped_names=()
logdir="$K3_TEST_TMP/logs"
mkdir -p "$logdir"
start_all=$SECONDS

# The time limit of a test starting now: timeout_s on an idle machine, stretched by the
# load (the 1-minute load average over the CPUs, from 1 up to 8 times): a test's threads
# get about CPUs/load of the machine when others keep it busy, so a limit that holds alone
# must grow with the load to still catch only a hung test.
limit_now() {
  local load
  read -r load _ </proc/loadavg
  awk -v base="$timeout_s" -v load="$load" -v cpus="$cpus" \
    'BEGIN { f = load / cpus; if (f < 1) f = 1; if (f > 8) f = 8; printf "%d %s", base * f, load }'
}

run_one() {
  local name=$1; shift
  [[ -n "$filter" && "$name" != *"$filter"* ]] && return
  local log="$logdir/${name//\//-}.log" start=$SECONDS rc limit load
  read -r limit load < <(limit_now)
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  local took=$((SECONDS - start))
  case $rc in
    0) passed=$((passed + 1)); printf 'PASS  %-40s %4ss\n' "$name" "$took" ;;
    77) skipped=$((skipped + 1)); skipped_names+=("$name")
        printf 'SKIP  %-40s %s\n' "$name" "$(grep -m1 '^skip:' "$log" | cut -c7-)" ;;
    124) failed=$((failed + 1)); failed_names+=("$name (timeout)")
         printf 'FAIL  %-40s timed out after %ss (load %s at its start)\n' "$name" "$limit" "$load" ;;
    *) failed=$((failed + 1)); failed_names+=("$name")
       printf 'FAIL  %-40s exit %s\n' "$name" "$rc"; sed 's/^/      /' "$log" | tail -25 ;;
  esac
}

for t in "$root/$build"/tests/test_*; do
  [[ -x "$t" ]] && run_one "$(basename "$t")" "$t"
done
for t in "$root"/tests/cli/*.sh; do
  [[ -x "$t" ]] && run_one "cli/$(basename "$t" .sh)" "$t"
done

echo
echo "took $((SECONDS - start_all)) s; logs in $logdir"
((skipped)) && echo "skipped: ${skipped_names[*]}"
((failed)) && echo "failed: ${failed_names[*]}"
echo "$skipped skipped"
echo "$passed passed, $failed failed"
((failed == 0))
