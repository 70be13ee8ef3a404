#!/bin/bash
# Faults over mpirun's ranks never hang and never give a wrong token: a rank that stalls
# (rank 1, or the leader) ends every rank after --rank-timeout with one line naming it; a
# rank that dies ends the run, mpirun naming it and the rank that waited for it saying
# for what (the leader, or the lowest follower when the leader died); ranks that disagree
# on who computes which expert end; a rank that cannot start ends every rank before any
# output; a step that fails on one rank fails on all with that rank's line, and a server
# answers the next request (and stops cleanly) after it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
source "$(dirname "$0")/ranks_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/ranks-faults"
rm -rf "$d" && mkdir -p "$d/r0-a" "$d/r0-b"
"$K3" pack -m "$m" --drives "$d/r0-a,$d/r0-b" -q || exit 1
common=(--ids 5,6,7,8 -n 8 --print-ids -t 1 -q)
"$K3" run -m "$m" "${common[@]}" >"$d/good.ids" || exit 1

# stopped NAME: the run in $d/NAME.* ended non-zero with stdout a prefix of the good ids;
# else says which and fails.
stopped() {
  local name=$1
  if ((${rc:-0} == 0)); then
    fail "$name: exited 0"
  elif [[ "$(cat "$d/good.ids")" != "$(cat "$d/$name.ids")"* ]]; then
    fail "$name: printed $(cat "$d/$name.ids"), not a prefix of $(cat "$d/good.ids")"
  else
    return 0
  fi
  return 1
}

# ended NAME NEEDLE: stopped, with exactly one line of ours on stderr, containing NEEDLE.
ended() {
  local name=$1 needle=$2 ours
  ours=$(grep '^k3-uring:' "$d/$name.err")
  stopped "$name" || return 0
  if [[ $(grep -c . <<<"$ours") -ne 1 || "$ours" != *"$needle"* ]]; then
    fail "$name: want one line of ours naming \"$needle\", got: $(cat "$d/$name.err")"
  else
    echo "ok: $name: exit $rc; $ours"
  fi
}

# ended_any NAME ERE MAX: as ended, but one to MAX lines of ours, each matching ERE and
# none a rank naming itself.
ended_any() {
  local name=$1 ere=$2 max=$3 ours n
  ours=$(grep '^k3-uring:' "$d/$name.err")
  n=$(grep -c . <<<"$ours")
  stopped "$name" || return 0
  if ((n < 1 || n > max)) || grep -Evq "$ere" <<<"$ours" || grep -Eq 'rank ([0-9]+): rank \1 ' <<<"$ours"; then
    fail "$name: want 1 to $max lines of ours matching \"$ere\", got: $(cat "$d/$name.err")"
  else
    echo "ok: $name: exit $rc; $ours"
  fi
}

K3_RANK_FAULT=1:stall@3 ranks 2 "$K3" run -m "$m" "${common[@]}" --rank-timeout 2 >"$d/stall1.ids" 2>"$d/stall1.err"
rc=$? ended stall1 "rank 0: no word from rank 1 in 2 s, waiting for layer 1's expert outputs in step 3"
K3_RANK_FAULT=0:stall@2 ranks 3 "$K3" run -m "$m" "${common[@]}" --rank-timeout 2 >"$d/stall0.ids" 2>"$d/stall0.err"
# Every follower waits for the leader: the first to time out ends the others, but under
# load mpirun may end them after they too have timed out and said so.
rc=$? ended_any stall0 'rank [12]: no word from rank 0 in [0-9]+ s' 2

K3_RANK_FAULT=2:exit@3 ranks 3 "$K3" run -m "$m" "${common[@]}" >"$d/exit2.ids" 2>"$d/exit2.err"
rc=$? ended exit2 "rank 0: ended by mpirun while waiting for rank 2 (layer 1's expert outputs in step 3)"
grep -q "Process name: \[\[[0-9]*,1\],2\]" "$d/exit2.err" || fail "exit2: mpirun does not name rank 2"
K3_RANK_FAULT=0:exit@3 ranks 3 "$K3" run -m "$m" "${common[@]}" >"$d/exit0.ids" 2>"$d/exit0.err"
rc=$? ended exit0 "rank 1: ended by mpirun while waiting for rank 0 (layer 1's expert outputs in step 3)"

# Ranks that would split a layer's experts differently (rank 1 predicts nothing, so deals
# otherwise) end at the first exchange that shows it, never summing the wrong rows.
mpirun --oversubscribe -np 1 "$K3" run -m "$m" "${common[@]}" : \
  -np 1 "$K3" run -m "$m" "${common[@]}" --predict off >"$d/differ.ids" 2>"$d/differ.err"
# Both ranks see it at the same exchange: either may say so first, and the other too
# before mpirun ends it.
rc=$? ended_any differ 'rank ([01]): rank (1|0) computed other experts of layer 1 than this rank gave it' 2

# Rank 1's drives (%r) are missing: nothing runs, and the leader says why.
ranks 2 "$K3" run --drives "$d/r%r-a,$d/r%r-b" "${common[@]}" >"$d/start.ids" 2>"$d/start.err"
rc=$? ended start "rank 1: drive $d/r1-a"
[[ -s "$d/start.ids" ]] && fail "start: printed $(cat "$d/start.ids") though rank 1 never started"

# Rank 1 loses a drive (no replicas) in the middle: the step fails on every rank.
rank1_faults=(--oversubscribe -np 1 "$K3" run -m "$m" "${common[@]}" --ram floor --no-cache :
              -np 1 env K3_FAULTS=drive-loss:0@40 "$K3" run -m "$m" "${common[@]}" --ram floor --no-cache)
mpirun "${rank1_faults[@]}" >"$d/lost.ids" 2>"$d/lost.err"
rc=$? ended lost "k3-uring: rank 1: layer "

# The same under serve: the request fails with rank 1's line, the server stays up.
LAUNCH=(mpirun --oversubscribe -np 1 "$K3" serve --port 0 -m "$m" --ram floor --no-cache -t 1 :
        -np 1 env K3_FAULTS=drive-loss:0@40)
start_server lost-serve -m "$m" --ram floor --no-cache -t 1
for i in 1 2; do
  post /v1/completions '{"prompt": [5, 6, 7, 8], "max_tokens": 8, "temperature": 0}'
  [[ "$STATUS" != 200 && "$BODY" == *"rank 1: "* ]] && echo "ok: request $i: $STATUS $BODY" ||
    fail "request $i with rank 1's drive lost: $STATUS $BODY"
done
curl -sf --max-time 10 "$URL/health" >/dev/null || fail "no /health after the failed steps"
leader=$(leader_pid "$PID")
kill -TERM "$leader"
for ((i = 0; i < 600; i++)); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
wait "$PID" && echo "ok: the server stopped cleanly after failed steps" ||
  fail "the server did not stop cleanly: $(cat "$LOG")"

expect_error 2 "K3_RANK_FAULT=1:nap@3: want RANK:stall@STEP or RANK:exit@STEP" \
  env K3_RANK_FAULT=1:nap@3 "$K3" run -m "$m" --ids 5
finish
