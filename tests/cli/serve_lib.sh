# Shared by the serve tests (sourced after lib.sh, not run): a server on a free port of
# the loopback, stopped with SIGTERM (so that under ASan its leak check runs and its exit
# code says so) and killed if it does not stop; curl and jq helpers.
command -v curl >/dev/null || { echo "skip: curl is not installed" >&2; exit 77; }
command -v jq >/dev/null || { echo "skip: jq is not installed" >&2; exit 77; }

SERVERS=()
stop_all_servers() {
  local pid
  for pid in "${SERVERS[@]}"; do kill -9 "$pid" 2>/dev/null; done
}
trap stop_all_servers EXIT

# start_server NAME ARGS...: k3-uring serve --port 0 ARGS (launched by the command in the
# array LAUNCH when set, e.g. mpirun), its stderr in $K3_TEST_TMP/NAME.log; waits for
# /health, then sets URL and PID.  Fails the test (exit 1) if it does not come up.
LAUNCH=()
start_server() {
  local name=$1; shift
  LOG="$K3_TEST_TMP/$name.log"
  "${LAUNCH[@]}" "$K3" serve --port 0 "$@" 2>"$LOG" &
  PID=$!
  SERVERS+=("$PID")
  local port="" i why=""
  for ((i = 0; i < 1200; i++)); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$LOG")
    if [[ -n "$port" ]] && why=$(curl -sS -f --max-time 10 "http://127.0.0.1:$port/health" 2>&1); then
      URL="http://127.0.0.1:$port"
      return 0
    fi
    kill -0 "$PID" 2>/dev/null || { echo "FAIL: the server did not start: $(cat "$LOG")"; exit 1; }
    sleep 0.1
  done
  echo "FAIL: the server did not answer /health in 120 s (port \"$port\": $why): $(cat "$LOG")"
  exit 1
}

# stop_server [SIGNAL]: signals the server (TERM) and waits up to 60 s; sets STOP_RC.
stop_server() {
  kill -"${1:-TERM}" "$PID" 2>/dev/null
  local i
  for ((i = 0; i < 600; i++)); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$PID" 2>/dev/null; then
    kill -9 "$PID"
    fail "the server did not stop within 60 s of SIG${1:-TERM}"
  fi
  wait "$PID"
  STOP_RC=$?
}

# slurp VAR FILE: FILE's text in VAR without its trailing newlines, as $(cat FILE) gives
# it, but read by the shell itself: the serve tests post hundreds of requests, and two
# forks for each were a third of their time.
slurp() {
  local -n into=$1
  into=""
  IFS= read -r -d '' into <"$2"
  while [[ $into == *$'\n' ]]; do into=${into%$'\n'}; done
}

# post PATH BODY: the response body in $BODY, its status in $STATUS, headers in $HEADERS.
# The files are emptied first: a request that gets no answer leaves both empty, never the
# last request's.
post() {
  local out="$K3_TEST_TMP/post.$$"
  : >"$out"
  : >"$out.h"
  STATUS=$(curl -s -o "$out" -D "$out.h" -w '%{http_code}' --max-time 120 \
    -H 'Content-Type: application/json' ${KEY:+-H "Authorization: Bearer $KEY"} \
    --data-binary "$2" "$URL$1")
  slurp BODY "$out"
  slurp HEADERS "$out.h"
}

# expect_api_error STATUS TYPE PARAM: $BODY is an OpenAI error of that status, type and
# param ("null" for none).
expect_api_error() {
  local what="$4"
  if [[ "$STATUS" != "$1" ]]; then
    fail "$what: status $STATUS, want $1: $BODY"
  elif ! jq -e --arg type "$2" --arg param "$3" '.error | (.message | type == "string" and
        length > 0) and .type == $type and ((.param // "null") == $param) and has("code")' \
        <<<"$BODY" >/dev/null; then
    fail "$what: not an OpenAI error of type $2, param $3: $BODY"
  else
    echo "ok: $what: $1 $(jq -c .error <<<"$BODY")"
  fi
}

# metric NAME: its value from /metrics.
metric() { curl -s --max-time 10 ${KEY:+-H "Authorization: Bearer $KEY"} "$URL/metrics" | sed -n "s/^$1 //p"; }

# wait_metric NAME VALUE SECONDS: until /metrics shows NAME at VALUE; 1 if it never does.
wait_metric() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    [[ "$(metric "$1")" == "$2" ]] && return 0
    sleep 0.05
  done
  return 1
}

# wait_metric_above NAME VALUE SECONDS: until /metrics shows NAME above VALUE; 1 if never.
wait_metric_above() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    awk -v v="$(metric "$1")" -v min="$2" 'BEGIN { exit !(v != "" && v > min) }' && return 0
    sleep 0.05
  done
  return 1
}

# endpoint BODY: the path a request body goes to: chat completions when it has messages.
endpoint() { if jq -e 'has("messages")' <<<"$1" >/dev/null; then echo /v1/chat/completions; else echo /v1/completions; fi; }
