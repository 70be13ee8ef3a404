#!/bin/bash
# `k3-uring serve` against careless and hostile connections, all on the loopback: 300
# half-open connections from 127.0.0.2 do not keep a client of 127.0.0.1 out (the
# per-address limit closes the rest at once); a full table closes its idle kept-alive
# connections for a new client, and when none is idle answers it 503 with Retry-After
# instead of resetting it; a request whose headers or body do not arrive in
# --read-timeout is closed (a slow sender too, however often it sends); /metrics counts
# each of these.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
py=/usr/bin/python3 # not a version manager's shim: seconds to start on a busy machine
[[ -x $py ]] || py=$(command -v python3) || { echo "skip: python3 is not installed" >&2; exit 77; }
m=$(tiny_model)
conns="$K3_ROOT/tests/serve/conns.py"

# hold NAME SOURCE N KIND SECONDS: conns.py in the background (its output in
# $K3_TEST_TMP/NAME, stdin from a fifo the test closes to let go); waits for "ready".
HOLDERS=()
hold() {
  local out="$K3_TEST_TMP/$1" i
  rm -f "$out" "$out.fifo" && mkfifo "$out.fifo"
  "$py" "$conns" "${URL##*:}" "$2" "$3" "$4" "$5" <"$out.fifo" >"$out" &
  HOLDERS+=($!)
  exec {HOLD_FD}>"$out.fifo"
  for ((i = 0; i < 600; i++)); do
    grep -q '^ready' "$out" && return 0
    sleep 0.05
  done
  fail "$1: the connections were not made: $(cat "$out")"
}
# let_go NAME: the holder ends; OPEN: how many of its connections were still open.
let_go() {
  exec {HOLD_FD}>&-
  wait "${HOLDERS[-1]}"
  OPEN=$(sed -n 's/^open //p' "$K3_TEST_TMP/$1")
}
m_limit='k3_connections_refused_total{reason="limit"}'
m_full='k3_connections_refused_total{reason="full"}'
m_read='k3_connections_timed_out_total{phase="read"}'

# ---- the defaults: 300 half-open connections from one address --------------------------
start_server serve-conns -m "$m" --parallel 2 -q
hold half300 127.0.0.2 300 half 60
wait_metric "$m_limit" 236 10 || fail "of 300 half-open connections, 236 are not refused at once: $(metric "$m_limit")"
held=$(metric k3_connections_open)
t0=$(date +%s%N)
post /v1/completions '{"prompt": "Hi", "max_tokens": 2}'
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $STATUS == 200 ]] || fail "a client of 127.0.0.1 beside 300 half-open connections: $STATUS $BODY"
((ms < 5000)) || fail "a client of 127.0.0.1 waited $ms ms"
[[ $held -ge 64 ]] || fail "the half-open connections were not held while it was answered: $held open"
echo "ok: 300 half-open connections from 127.0.0.2 ($held held, the rest refused): 127.0.0.1 answered in $ms ms"
let_go half300
[[ $OPEN == 64 ]] || fail "the server closed half-open connections within --read-timeout 30"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"

# ---- a small table: idle ones give way, then 503; the read deadline ---------------------
start_server serve-conns-small -m "$m" --parallel 1 --max-connections 4 --read-timeout 2 -q
hold idle4 127.0.0.3 4 keepalive 60
post /v1/completions '{"prompt": "Hi", "max_tokens": 2}'
[[ $STATUS == 200 ]] || fail "a new client of a table full of idle connections: $STATUS $BODY"
wait_metric k3_connections_closed_idle_total 1 10 ||
  fail "no idle connection closed for a new client: $(metric k3_connections_closed_idle_total)"
let_go idle4
[[ $OPEN == 3 ]] || fail "of 4 idle kept-alive connections, $OPEN are open; want 3"
echo "ok: a table full of idle kept-alive connections closed one for a new client"

hold half4 127.0.0.4 4 half 60
for ((i = 0; i < 200; i++)); do # until the four are in the table: a new client gets 503
  post /v1/completions '{"prompt": "Hi", "max_tokens": 1}'
  [[ $STATUS == 503 ]] && break
  sleep 0.02
done
expect_api_error 503 unavailable_error null "a client of a table full of half-open connections"
grep -qi '^retry-after: ' <<<"$HEADERS" || fail "503 without Retry-After: $HEADERS"
grep -qi '^connection: close' <<<"$HEADERS" || fail "503 that keeps its connection: $HEADERS"
# --read-timeout 2: the half-open ones close, the table has room again
wait_metric "$m_read" 4 10 || fail "4 half-open connections not closed by --read-timeout 2: $(metric "$m_read")"
let_go half4
[[ $OPEN == 0 ]] || fail "half-open connections outlived --read-timeout"
[[ $(metric "$m_full") -ge 1 ]] || fail "/metrics does not count the 503: $(metric "$m_full")"
post /v1/completions '{"prompt": "Hi", "max_tokens": 1}'
[[ $STATUS == 200 ]] || fail "after the read deadline: $STATUS $BODY"
echo "ok: a full table answered 503 with Retry-After; --read-timeout closed the half-open connections"

# A sender of a byte every quarter second is never idle, and still has --read-timeout.
read0=$(metric "$m_read")
hold drip 127.0.0.5 1 drip 60
t0=$(date +%s%N)
wait_metric "$m_read" $((read0 + 1)) 10 || fail "a slow sender outlived --read-timeout 2"
ms=$((($(date +%s%N) - t0) / 1000000))
((ms < 3000)) || fail "a slow sender closed $ms ms after it connected, --read-timeout 2"
let_go drip
[[ $OPEN == 0 ]] || fail "the slow sender's connection is open"
echo "ok: a slow sender closed within $ms ms of its connection (--read-timeout 2)"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
