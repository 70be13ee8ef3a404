# Shared by the CLI tests (sourced, not run): the binary, the synthetic tiny model,
# and the bad-input expectation.
K3=${K3:?K3 must point at the k3-uring binary}
K3_TEST_TMP=${K3_TEST_TMP:?}
failures=0

failed_checks=()
fail() { echo "FAIL: $*"; failures=$((failures + 1)); failed_checks+=("$*"); }

# The k3-tiny seed-1 checkpoint, made once per test run.
tiny_model() {
  local dir="$K3_TEST_TMP/k3-tiny-seed1"
  [[ -d "$dir" ]] || "$K3" synth --config k3-tiny --seed 1 --out "$dir" -q || exit 1
  echo "$dir"
}

# A private copy of the tiny model to break.
tiny_copy() {
  local dir="$K3_TEST_TMP/$1"
  rm -rf "$dir"
  cp -r "$(tiny_model)" "$dir"
  echo "$dir"
}

# same_as_want NAME RUN-ARGS...: `k3-uring run` with RUN-ARGS and the caller's "${args[@]}" gives
# the logits and tokens in $d/want.f32 and $d/want.ids, byte for byte.
same_as_want() {
  local name=$1
  shift
  "$K3" run "$@" "${args[@]}" -q --logits-out "$d/got.f32" >"$d/got.ids" 2>"$d/err" ||
    { fail "$name: $(cat "$d/err")"; return; }
  cmp -s "$d/want.f32" "$d/got.f32" || fail "$name: logits differ"
  cmp -s "$d/want.ids" "$d/got.ids" || fail "$name: tokens differ"
}

# concurrently CMD...: runs CMD (a check that calls fail) in the background, at most
# K3_TEST_PAR at once (run.sh sets it from the CPUs; 2 when a test runs alone), so that a
# test of many independent, CPU-bound checks keeps every CPU busy (not for runs whose time
# is their first touch of fresh memory, which a VM's host may serve one at a time);
# wait_concurrent waits for them all.
# A check's output and failures reach the test when it ends.  CMD must not share files
# with another check nor depend on its order.
K3_TEST_PAR=${K3_TEST_PAR:-2}
declare -A concurrent_out=()
concurrent_started=0
concurrently() {
  while ((${#concurrent_out[@]} >= K3_TEST_PAR)); do reap_concurrent; done
  local out="$K3_TEST_TMP/concurrent.$$.$((concurrent_started++))"
  { failures=0; "$@"; exit $((failures < 100 ? failures : 100)); } >"$out" 2>&1 &
  concurrent_out[$!]=$out
}

# reap_concurrent: waits for one check of concurrently, shows its output, counts its
# failures (its exit status: their number, or the status it exited with).
reap_concurrent() {
  local pid rc line
  wait -n -p pid "${!concurrent_out[@]}"
  rc=$?
  while IFS= read -r line || [[ -n $line ]]; do # its output, and its failures kept
    printf '%s\n' "$line"
    [[ $line == "FAIL: "* ]] && failed_checks+=("${line#FAIL: }")
  done <"${concurrent_out[$pid]}"
  rm -f "${concurrent_out[$pid]}"
  unset "concurrent_out[$pid]"
  failures=$((failures + rc))
}

wait_concurrent() {
  while ((${#concurrent_out[@]})); do reap_concurrent; done
}

# expect_error CODE NEEDLE CMD...: CMD exits with CODE (no signal, no crash), prints
# exactly one line on stderr containing NEEDLE, and nothing on stdout.
expect_error() {
  local code=$1 needle=$2; shift 2
  local out err rc
  out=$("$@" 2>"$K3_TEST_TMP/stderr") && rc=0 || rc=$?
  err=$(cat "$K3_TEST_TMP/stderr")
  if [[ $rc -ne $code ]]; then
    fail "$* exited $rc, want $code; stderr: $err"
  elif [[ $(printf '%s\n' "$err" | wc -l) -ne 1 ]]; then
    fail "$*: want one line on stderr, got: $err"
  elif [[ "$err" != *"$needle"* ]]; then
    fail "$*: stderr \"$err\" does not mention \"$needle\""
  elif [[ -n "$out" ]]; then
    fail "$*: printed on stdout: $out"
  else
    echo "ok: $err"
  fi
}

finish() {
  # repeated last: the runner and a newcomer's tail show the end of a log
  if ((failures)); then printf 'failed: %s\n' "${failed_checks[@]}"; echo "$failures failure(s)"; exit 1; fi
  exit 0
}
