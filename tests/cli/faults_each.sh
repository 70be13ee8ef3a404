#!/bin/bash
# Each read and each submission failed in turn, as SQLite's fault tests replay a scenario:
# a short decode on a pack without replicas, every segment streamed (--ram floor), runs
# once fault-free and counts its read results R and submissions S (-v's faults line);
# then, at up to SAMPLES places spread evenly over each (every one when there are
# fewer), eio-at:i (the same-place retry must recover it), refuse-at:i, and refuse-at:i
# among random EIOs (so that some refusals hit a retry's resubmission, review 6.3), and
# eio:1 with refuse-at:2..4, where every submission after the first is a retry.  Every
# run must give the fault-free tokens and logits byte for byte, or exit 1 with one line
# of ours on stderr and a prefix of the tokens on stdout: never a signal (an assert's
# abort is exit 134).
source "$(dirname "$0")/lib.sh"
SAMPLES=${SAMPLES:-16}
m=$(tiny_model)
d="$K3_TEST_TMP/faults-each"
rm -rf "$d" && mkdir -p "$d/a" "$d/b" "$d/runs"
"$K3" pack -m "$m" --drives "$d/a,$d/b" -q || exit 1
args=(run --drives "$d/a,$d/b" --ids 5,6,7,8 -n 2 --ignore-eos --print-ids -t 1 --ram floor)
"$K3" "${args[@]}" -q --logits-out "$d/want.f32" >"$d/want.ids" || exit 1
K3_FAULTS=eio:0 "$K3" "${args[@]}" -v >"$d/count.ids" 2>"$d/count.err" || exit 1
cmp -s "$d/want.ids" "$d/count.ids" || fail "the fault hooks, injecting nothing, changed the tokens"
read -r R S < <(sed -n 's/.* of \([0-9]*\) read results and \([0-9]*\) submissions.*/\1 \2/p' "$d/count.err")
[[ $R -gt 0 && $S -gt 0 ]] || { echo "FAIL: no counts in: $(grep faults "$d/count.err")"; exit 1; }
echo "fault-free: $R read results, $S submissions"

# places N: 1, and up to SAMPLES places in 1..N evenly apart
places() {
  local n=$1 step=$(((${1} + SAMPLES - 1) / SAMPLES))
  seq 1 "$step" "$n"
}

# outcome NAME SPEC [SEED]: the run under K3_FAULTS=SPEC is the fault-free one or stops
# cleanly; writes identical or stopped to $d/runs/NAME.
outcome() {
  local name=$1 spec=$2 seed=${3:-1} rc ours
  K3_FAULTS=$spec K3_FAULTS_SEED=$seed "$K3" "${args[@]}" -q --logits-out "$d/runs/$name.f32" \
    >"$d/runs/$name.ids" 2>"$d/runs/$name.err"
  rc=$?
  ours=$(grep -c . "$d/runs/$name.err")
  if ((rc == 0)); then
    if cmp -s "$d/want.f32" "$d/runs/$name.f32" && cmp -s "$d/want.ids" "$d/runs/$name.ids"; then
      echo identical >"$d/runs/$name"
    else
      fail "$spec: exit 0 with other tokens or logits"
    fi
  elif ((rc >= 128)); then
    fail "$spec (seed $seed): killed by signal $((rc - 128)): $(tail -c 300 "$d/runs/$name.err")"
  elif ((rc != 1)) || ((ours != 1)) || ! grep -q '^k3-uring: ' "$d/runs/$name.err"; then
    fail "$spec: exit $rc, want 1 and one line of ours; stderr: $(cat "$d/runs/$name.err")"
  elif [[ "$(cat "$d/want.ids")" != "$(cat "$d/runs/$name.ids")"* ]]; then
    fail "$spec: printed $(cat "$d/runs/$name.ids"), not a prefix of $(cat "$d/want.ids")"
  else
    echo stopped >"$d/runs/$name"
  fi
}

for i in $(places "$R"); do concurrently outcome "eio-at-$i" "eio-at:$i"; done
for i in $(places "$S"); do concurrently outcome "refuse-at-$i" "refuse-at:$i"; done
for i in $(places "$S"); do concurrently outcome "retry-refused-$i" "eio:0.05,refuse-at:$i" "$i"; done
for i in 2 3 4; do concurrently outcome "all-eio-refuse-at-$i" "eio:1,refuse-at:$i"; done
wait_concurrent

# tally KIND: how the runs named KIND-* ended
tally() {
  local kind=$1 same stopped
  same=$(grep -lx identical "$d/runs/$kind"-[0-9]* 2>/dev/null | wc -l)
  stopped=$(grep -lx stopped "$d/runs/$kind"-[0-9]* 2>/dev/null | wc -l)
  echo "$kind: $same identical, $stopped stopped with one line" >&2
  echo "$same $stopped"
}
read -r same stopped < <(tally eio-at)
((stopped == 0)) || fail "eio-at: $stopped runs stopped; one EIO is read again at the same place"
read -r same stopped < <(tally refuse-at)
((stopped > 0)) || fail "refuse-at: no run stopped; were submissions refused?"
tally retry-refused >/dev/null
read -r same stopped < <(tally all-eio-refuse-at)
((same == 0)) || fail "eio:1: $same runs gave the tokens; were reads failed?"
finish
