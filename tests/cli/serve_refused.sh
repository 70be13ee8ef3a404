#!/bin/bash
# A server whose step meets a refused resubmission (review 6.3: it aborted, taking every
# client with it): the first read fails and its retry's submission is refused
# (K3_FAULTS=eio-at:1,refuse-at:2).  That request gets an error naming the read; the
# server stays up, answers the next request as a fault-free server does (text, tokens,
# logits hash) and stops with exit 0.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/serve-refused"
rm -rf "$d" && mkdir -p "$d/a" "$d/b"
"$K3" pack -m "$m" --drives "$d/a,$d/b" -q || exit 1
serve_args=(--drives "$d/a,$d/b" --ram floor -t 1 -q)
body='{"prompt": [5, 6, 7, 8], "max_tokens": 4, "temperature": 0, "logits_hash": true}'
signature() { jq -c '[.choices[0].text, .usage.completion_tokens, .logits_hash]' <<<"$BODY"; }

start_server serve-refused-ref "${serve_args[@]}"
post /v1/completions "$body"
[[ $STATUS == 200 ]] || { echo "FAIL: the fault-free server: $STATUS $BODY"; exit 1; }
want=$(signature)
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "the fault-free server: exit $STOP_RC"

K3_FAULTS=eio-at:1,refuse-at:2 start_server serve-refused "${serve_args[@]}"
post /v1/completions "$body"
if [[ $STATUS != 200 && $BODY == *"Input/output error; read again: submitting reads of "* ]]; then
  echo "ok: the refused retry: $STATUS $(jq -c .error.message <<<"$BODY")"
else
  fail "the refused retry: $STATUS $BODY (server log: $(tail -c 300 "$LOG"))"
fi
post /v1/completions "$body"
if [[ $STATUS == 200 && $(signature) == "$want" ]]; then
  echo "ok: the next request: $want"
else
  fail "the next request: $STATUS $BODY, want $want"
fi
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "the server after the refused retry: exit $STOP_RC: $(tail -c 300 "$LOG")"
finish
