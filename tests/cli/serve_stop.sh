#!/bin/bash
# SIGTERM or SIGINT to `k3-uring serve` mid-stream: the running requests end at the next
# step with finish_reason "length" (each stream gets its final chunk and [DONE], and a
# clean end of the chunked body), a queued request gets a 503 error, the server stops
# listening and exits 0.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/serve-stop"
rm -rf "$d" && mkdir -p "$d"

# ends_cleanly FILE: a stream whose last chunk has finish_reason "length", then [DONE].
ends_cleanly() {
  local last
  last=$(grep '^data: {' "$1" | tail -1 | sed 's/^data: //')
  jq -e '.choices[0].finish_reason == "length"' <<<"$last" >/dev/null ||
    fail "$1: the last chunk is not a finish: $last"
  printf 'data: [DONE]\n\n' | cmp -s - <(tail -c 14 "$1") || fail "$1: no [DONE] at the end"
  [[ $(grep -c '"content":"[^"]' "$1") -ge 1 ]] || fail "$1: no text before the stop"
}

for sig in TERM INT; do
  start_server "serve-stop-$sig" -m "$m" --parallel 2 --queue 4
  # ignore_eos: the streams run until the signal, however fast the model reaches its end
  long='{"messages": [{"role": "user", "content": "Go"}], "max_tokens": 4000, "stream": true, "ignore_eos": true,
        "reasoning_effort": "none"}'
  for i in 1 2; do
    curl -sN --max-time 300 "$URL/v1/chat/completions" -d "$long" >"$d/$sig-$i.sse" & eval "c$i=\$!"
  done
  wait_metric k3_requests_running 2 60 || fail "SIG$sig: the two streams never ran"
  curl -s --max-time 300 -o "$d/$sig-queued.json" -w '%{http_code}' "$URL/v1/completions" \
    -d '{"prompt": "Wait", "max_tokens": 4}' >"$d/$sig-queued.status" & q=$!
  wait_metric k3_requests_queued 1 30 || fail "SIG$sig: the third request never queued"
  for ((i = 0; i < 600; i++)); do # both streams have text
    [[ $(grep -c '"content":"[^"]' "$d/$sig-1.sse") -ge 1 && $(grep -c '"content":"[^"]' "$d/$sig-2.sse") -ge 1 ]] && break
    sleep 0.1
  done
  stop_server "$sig"
  [[ $STOP_RC == 0 ]] || fail "SIG$sig: exit $STOP_RC; $(tail -5 "$LOG")"
  wait "$c1" || fail "SIG$sig: stream 1: curl exit $? (the chunked body did not end cleanly)"
  wait "$c2" || fail "SIG$sig: stream 2: curl exit $?"
  wait "$q"
  ends_cleanly "$d/$sig-1.sse"
  ends_cleanly "$d/$sig-2.sse"
  [[ $(cat "$d/$sig-queued.status") == 503 ]] &&
    jq -e '.error.type == "unavailable_error" and (.error.message | test("shutting down"))' \
      "$d/$sig-queued.json" >/dev/null || fail "SIG$sig: the queued request: $(cat "$d/$sig-queued.status") $(cat "$d/$sig-queued.json")"
  curl -s --max-time 5 "$URL/health" >/dev/null && fail "SIG$sig: still listening after exit"
  echo "ok: SIG$sig: two streams ended with length and [DONE], the queued request got 503, exit 0"
done

# Idle: a signal with nothing running stops it at once.
start_server serve-stop-idle -m "$m"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "idle SIGTERM: exit $STOP_RC"
finish
