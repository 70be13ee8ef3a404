#!/bin/bash
# `k3-uring serve` through curl: every endpoint and its JSON shape, streaming framing,
# stop strings, every error status with its OpenAI error body (and the server answering
# after each), a client that hangs up mid-stream freeing its sequence, and odd bodies
# that must all come back as 200 or a clean 400.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)

# ---- the command line: usage errors (2) before anything loads, runtime errors (1) -------
expect_error 2 "exactly one of -m DIR or --drives" "$K3" serve
expect_error 2 "--parallel: 33 is outside [1, 32]" "$K3" serve -m "$m" --parallel 33
expect_error 2 "--parallel: 0 is outside" "$K3" serve -m "$m" --parallel 0
expect_error 2 "--ctx-size 1:" "$K3" serve -m "$m" --ctx-size 1
expect_error 1 "below the floor of" "$K3" serve -m "$m" --ram 1M --port 0
expect_error 2 "--max-body: \"lots\" is not a size" "$K3" serve -m "$m" --max-body lots
expect_error 1 "exceeds the model's max_position_embeddings" "$K3" serve -m "$m" --ctx-size 100000

KEY=k3-test-key
start_server serve-api -m "$m" --parallel 1 --queue 1 --max-body 4096 --api-key "$KEY" --ctx-size 256 \
  --n-predict 4
model=$(basename "$m")
expect_error 1 "cannot listen on 127.0.0.1 port ${URL##*:}" "$K3" serve -m "$m" --port "${URL##*:}"
hi='{"role": "user", "content": "Hi"}'

# ---- endpoints ------------------------------------------------------------------------
body=$(curl -s "$URL/health")
[[ "$body" == '{"status":"ok"}' ]] || fail "/health without the key: $body"
body=$(curl -s "$URL/v1/models")
jq -e --arg m "$model" '.object == "list" and .data[0].id == $m and .data[0].object == "model"' \
  <<<"$body" >/dev/null || fail "/v1/models: $body"
body=$(curl -s -H "Authorization: Bearer $KEY" "$URL/metrics")
for name in requests_running requests_queued requests_total prompt_tokens_total \
  tokens_generated_total read_bytes_total stall_seconds_total cache_hits_total steps_total \
  decode_rows_per_step decode_union_experts decode_seconds_total decode_read_bytes_total decode_stall_seconds_total; do
  grep -q "^# TYPE k3_$name " <<<"$body" && grep -q "^k3_$name [0-9.e+-]*$" <<<"$body" ||
    fail "/metrics lacks k3_$name"
done

post /v1/chat/completions "{\"messages\": [$hi], \"max_tokens\": 5, \"temperature\": 0, \"logits_hash\": true, \"model\": \"$model\"}"
[[ $STATUS == 200 ]] || fail "chat: $STATUS $BODY"
grep -qi '^content-type: application/json' <<<"$HEADERS" || fail "chat: content type: $HEADERS"
jq -e '.object == "chat.completion" and (.id | startswith("chatcmpl-")) and
       .choices[0].message.role == "assistant" and (.choices[0].message.content | type == "string") and
       (.choices[0].finish_reason | IN("stop", "length")) and
       .usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens and
       .usage.completion_tokens <= 5 and (.logits_hash | test("^[0-9a-f]{16}$"))' <<<"$BODY" >/dev/null ||
  fail "chat body: $BODY"
chat_text=$(jq -r .choices[0].message.content <<<"$BODY")
chat_hash=$(jq -r .logits_hash <<<"$BODY")

post /v1/completions '{"prompt": "The history of", "max_tokens": 6, "temperature": 0}'
jq -e '.object == "text_completion" and (.id | startswith("cmpl-")) and
       (.choices[0].text | type == "string") and .choices[0].finish_reason == "length" and
       .usage.completion_tokens == 6 and (has("logits_hash") | not)' <<<"$BODY" >/dev/null ||
  fail "completion: $STATUS $BODY"
greedy=$(jq -r .choices[0].text <<<"$BODY")
post /v1/completions '{"prompt": [5, 17, 300], "max_tokens": 2}'
jq -e '.usage.prompt_tokens == 3 and .usage.completion_tokens == 2' <<<"$BODY" >/dev/null ||
  fail "a prompt of token ids: $STATUS $BODY"
post /v1/completions '{"prompt": [5, 17, 300], "max_tokens": null, "temperature": 0}'
jq -e '.usage.completion_tokens == 4 or .choices[0].finish_reason == "stop"' <<<"$BODY" >/dev/null ||
  fail "no max_tokens: --n-predict 4 is the limit: $STATUS $BODY"

# ---- streaming: data: events, the role first, one finish_reason last, then [DONE] -------
sse="$K3_TEST_TMP/serve-api.sse"
check_stream() { # NAME OBJECT: the events in $sse; their concatenated text in $streamed
  local name=$1 object=$2
  if ! printf 'data: [DONE]\n\n' | cmp -s - <(tail -c 14 "$sse"); then
    fail "$name: does not end with [DONE]: $(tail -c 300 "$sse")"
    return
  fi
  # events: "data: JSON" lines, each followed by one blank line, nothing else
  awk 'NR % 2 == 1 && !/^data: / { exit 1 } NR % 2 == 0 && length($0) { exit 1 }' "$sse" ||
    fail "$name: not data: lines separated by blank lines"
  local chunks; chunks=$(grep '^data: {' "$sse" | sed 's/^data: //' | jq -s .)
  jq -e --arg o "$object" 'all(.[]; .object == $o) and (map(.id) | unique | length == 1) and
     ([.[] | select(.choices | length > 0)] | (map(.choices[0].finish_reason) | .[:-1] | all(. == null)) and
      (last.choices[0].finish_reason | IN("stop", "length")))' <<<"$chunks" >/dev/null ||
    fail "$name: chunks: $chunks"
  if [[ $object == chat.completion.chunk ]]; then
    jq -e '.[0].choices[0].delta.role == "assistant"' <<<"$chunks" >/dev/null || fail "$name: no role first"
    streamed=$(jq -j '.[] | .choices[0].delta.content // empty' <<<"$chunks")
  else
    streamed=$(jq -j '.[] | .choices[0].text // empty' <<<"$chunks")
  fi
  echo "ok: $name: $(grep -c '^data: ' "$sse") events"
}
curl -sN -D "$sse.h" -H "Authorization: Bearer $KEY" --max-time 120 "$URL/v1/chat/completions" \
  -d "{\"messages\": [$hi], \"max_tokens\": 5, \"temperature\": 0, \"stream\": true, \"logits_hash\": true}" >"$sse"
grep -qi '^content-type: text/event-stream' "$sse.h" || fail "stream: content type: $(cat "$sse.h")"
check_stream "chat stream" chat.completion.chunk
[[ "$streamed" == "$chat_text" ]] || fail "chat stream text \"$streamed\", whole \"$chat_text\""
[[ "$(grep '^data: {' "$sse" | tail -1 | sed 's/^data: //' | jq -r .logits_hash)" == "$chat_hash" ]] ||
  fail "chat stream: the final chunk's logits_hash is not the whole answer's $chat_hash"
curl -sN -H "Authorization: Bearer $KEY" --max-time 120 "$URL/v1/completions" \
  -d '{"prompt": "The history of", "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}' >"$sse"
check_stream "completion stream" text_completion
[[ "$streamed" == "$greedy" ]] || fail "completion stream text \"$streamed\", whole \"$greedy\""
grep '^data: {' "$sse" | tail -1 | sed 's/^data: //' |
  jq -e '.choices == [] and .usage.completion_tokens == 6 and .usage.total_tokens == .usage.prompt_tokens + 6' >/dev/null ||
  fail "include_usage: no closing usage chunk"

# ---- stop strings: the text ends before the first one, held back while it may begin ----
stop=$(jq -rn --arg t "$greedy" '$t | (length / 2 | floor) as $h | .[$h:$h + 2]')
if [[ ${#greedy} -ge 4 ]]; then
  want=$(jq -rn --arg t "$greedy" --arg s "$stop" '$t | split($s)[0]')
  post /v1/completions "$(jq -n --arg s "$stop" '{prompt: "The history of", max_tokens: 6, temperature: 0, stop: [$s, "never appears"]}')"
  jq -e --arg w "$want" '.choices[0].text == $w and .choices[0].finish_reason == "stop"' <<<"$BODY" >/dev/null ||
    fail "stop \"$stop\" in \"$greedy\": $BODY"
  curl -sN -H "Authorization: Bearer $KEY" --max-time 120 "$URL/v1/completions" \
    -d "$(jq -n --arg s "$stop" '{prompt: "The history of", max_tokens: 6, temperature: 0, stop: $s, stream: true}')" >"$sse"
  check_stream "stream with a stop string" text_completion
  [[ "$streamed" == "$want" ]] || fail "stream with stop \"$stop\": \"$streamed\", want \"$want\""
fi

# ---- errors ----------------------------------------------------------------------------
chat_with() { jq -nc --argjson extra "$1" "{messages: [$hi], max_tokens: 1} + \$extra"; }
post /v1/chat/completions '{"messages": [' && expect_api_error 400 invalid_request_error null "malformed JSON"
post /v1/chat/completions '[1, 2]' && expect_api_error 400 invalid_request_error null "not an object"
post /v1/chat/completions '{"max_tokens": 1}' && expect_api_error 400 invalid_request_error messages "no messages"
post /v1/chat/completions '{"messages": "Hi"}' && expect_api_error 400 invalid_request_error messages "messages a string"
post /v1/chat/completions '{"messages": [{"role": "robot", "content": "x"}]}' &&
  expect_api_error 400 invalid_request_error 'messages[0].role' "unknown role"
post /v1/chat/completions '{"messages": [{"role": "user", "content": 7}]}' &&
  expect_api_error 400 invalid_request_error 'messages[0].content' "content a number"
post /v1/chat/completions '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}' &&
  expect_api_error 400 invalid_request_error 'messages[0].content' "an image part"
post /v1/chat/completions "$(chat_with '{"model": "gpt-4o"}')" &&
  expect_api_error 400 invalid_request_error model "unknown model"
[[ $(jq -r .error.code <<<"$BODY") == model_not_found ]] || fail "unknown model: code $(jq .error.code <<<"$BODY")"
post /v1/chat/completions "$(jq -nc --arg t "$(printf 'word %.0s' {1..400})" '{messages: [{role: "user", content: $t}]}')" &&
  expect_api_error 400 invalid_request_error messages "a prompt longer than the context"
[[ $(jq -r .error.code <<<"$BODY") == context_length_exceeded ]] || fail "long prompt: code $(jq .error.code <<<"$BODY")"
for bad in '{"temperature": 2.5}' '{"temperature": -0.1}' '{"temperature": "hot"}' '{"top_p": 0}' \
  '{"top_p": 1.5}' '{"top_k": -1}' '{"max_tokens": -5}' '{"max_tokens": 0}' '{"max_tokens": 2.5}' \
  '{"max_completion_tokens": -1}' '{"seed": "x"}' '{"stream": "yes"}' '{"n": 2}' '{"logits_hash": 1}' '{"ignore_eos": "yes"}' \
  '{"stop": ["a", "b", "c", "d", "e"]}' '{"stop": 3}'; do
  param=$(jq -r 'keys[0]' <<<"$bad")
  post /v1/chat/completions "$(chat_with "$bad")" && expect_api_error 400 invalid_request_error "$param" "$bad"
done
post /v1/chat/completions "$(chat_with '{"stop": ["a", ""]}')" && expect_api_error 400 invalid_request_error 'stop[1]' "an empty stop string"
post /v1/chat/completions "$(printf '{"messages": [{"role": "user", "content": "caf\xe9"}]}')" &&
  expect_api_error 400 invalid_request_error 'messages[0].content' "invalid UTF-8 in a message"
post /v1/completions "$(printf '{"prompt": "\xc3\x28 bad"}')" && expect_api_error 400 invalid_request_error prompt "invalid UTF-8 in a prompt"
post /v1/completions '{"prompt": [5, 99999]}' && expect_api_error 400 invalid_request_error prompt "a token id out of range"
post /v1/chat/completions "$(chat_with "$(jq -nc --arg p "$(head -c 5000 /dev/zero | tr '\0' x)" '{pad: $p}')")" &&
  expect_api_error 413 invalid_request_error null "a body over --max-body"
# The same without a Content-Length: chunked, read and dropped past the limit.
STATUS=$(head -c 9000 /dev/zero | tr '\0' ' ' | curl -s -o "$K3_TEST_TMP/chunked" -w '%{http_code}' \
  -H "Authorization: Bearer $KEY" -H 'Transfer-Encoding: chunked' --data-binary @- "$URL/v1/completions")
BODY=$(cat "$K3_TEST_TMP/chunked")
expect_api_error 413 invalid_request_error null "a chunked body over --max-body"
KEY='' post /v1/completions '{"prompt": "x"}' && expect_api_error 401 invalid_request_error null "no API key"
KEY=wrong-key post /v1/completions '{"prompt": "x"}' && expect_api_error 401 invalid_request_error null "a wrong API key"
STATUS=$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics")
[[ $STATUS == 401 ]] || fail "/metrics without the key: $STATUS"
post /v1/embeddings '{"input": "x"}' && expect_api_error 404 invalid_request_error null "an unknown path"
post '/v1/%ff%1b%5B31m' '{}' && expect_api_error 404 invalid_request_error null "an unknown path of odd bytes"
grep -q $'\e\[31m' "$LOG" && fail "a client's escape sequence reached the log"
post /v1/completions "{\"prompt\": \"x\", \"model\": \"x$(printf '\xc3\xa9%.0s' {1..300})\"}" &&
  expect_api_error 400 invalid_request_error model "a long model name of two-byte characters"
STATUS=$(curl -s -o "$K3_TEST_TMP/405" -D "$K3_TEST_TMP/405.h" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$URL/v1/chat/completions")
BODY=$(cat "$K3_TEST_TMP/405")
expect_api_error 405 invalid_request_error null "GET on a POST path"
grep -qi '^allow: POST' "$K3_TEST_TMP/405.h" || fail "405 without Allow: POST"
post /v1/completions '{"prompt": "Still", "max_tokens": 1}'
[[ $STATUS == 200 ]] || fail "after the errors the server does not answer: $STATUS $BODY"

# ---- a full queue (--parallel 1, --queue 1), and clients that hang up -------------------
# A server whose sequences hold 4096 positions, so that a request of 2000 tokens is still
# running when its client leaves however fast the machine decodes; a body without
# max_tokens (the odd bodies below) stops at -n 64, not at the context's end (4094 tokens
# under ASan outlast the client's 120 s).
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC; $(tail -5 "$LOG")"
start_server serve-api-queue -m "$m" --parallel 1 --queue 1 --max-body 4096 --api-key "$KEY" \
  --ctx-size 4096 -n 64
long='{"prompt": "Once", "max_tokens": 2000, "stream": true}'
curl -sN -H "Authorization: Bearer $KEY" "$URL/v1/completions" -d "$long" >/dev/null & a=$!
wait_metric k3_requests_running 1 60 || fail "the first request never ran"
curl -s -H "Authorization: Bearer $KEY" "$URL/v1/completions" -d '{"prompt": "Once", "max_tokens": 2000}' >/dev/null & b=$!
wait_metric k3_requests_queued 1 30 || fail "the second request never queued"
post /v1/completions '{"prompt": "x", "max_tokens": 1}' && expect_api_error 503 unavailable_error null "a full queue"
grep -qi '^retry-after: ' <<<"$HEADERS" || fail "503 without Retry-After: $HEADERS"
kill "$b"   # a queued request's client leaves: it will never take a sequence
made=$(metric k3_tokens_generated_total)   # the running one makes tokens, then its client leaves too
wait_metric_above k3_tokens_generated_total "$made" 60 || fail "the running request made no token"
t0=$(date +%s%N)
kill "$a"
wait_metric k3_requests_running 0 30 || fail "the sequence of a client gone mid-stream is still running"
echo "ok: a client gone mid-stream: its sequence freed in $((($(date +%s%N) - t0) / 1000000)) ms"
wait_metric k3_requests_queued 0 30 || fail "the queued request of a gone client stayed queued"
# A non-streaming client that leaves while its tokens keep coming: the server notices at
# the next token, not at the end of its 4000, and says so.
gone=$(grep -c "the client went away" "$LOG")
made=$(metric k3_tokens_generated_total)
curl -s -H "Authorization: Bearer $KEY" "$URL/v1/completions" -d '{"prompt": "Once", "max_tokens": 4000, "ignore_eos": true}' >/dev/null & c=$!
wait_metric_above k3_tokens_generated_total "$made" 60 || fail "the non-streaming request made no token"
kill "$c"
t0=$(date +%s%N)
wait_metric k3_requests_running 0 60 || fail "the sequence of a non-streaming client that left is still running"
[[ $(($(metric k3_tokens_generated_total) - made)) -lt 4000 ]] ||
  fail "a non-streaming client that left: its request made all its 4000 tokens"
echo "ok: a non-streaming client gone: its sequence freed in $((($(date +%s%N) - t0) / 1000000)) ms"
[[ $(grep -c "the client went away" "$LOG") -gt $gone ]] ||
  fail "a non-streaming client that timed out: its request ran to its end: $(grep 'POST /v1/completions' "$LOG" | tail -1)"
post /v1/completions '{"prompt": "Then", "max_tokens": 2}'
[[ $STATUS == 200 && $(jq .usage.completion_tokens <<<"$BODY") == 2 ]] ||
  fail "a request after the clients left: $STATUS $BODY"
# ignore_eos: neither end of message nor a chat's close ends the text (without it this
# seed's chat closes at its 572nd token).
post /v1/chat/completions '{"messages": [{"role": "user", "content": "Go"}], "max_tokens": 600, "ignore_eos": true, "seed": 2}'
[[ $STATUS == 200 ]] && jq -e '.usage.completion_tokens == 600 and .choices[0].finish_reason == "length"' \
  <<<"$BODY" >/dev/null || fail "a chat with ignore_eos ended early: $STATUS $(jq -c .usage <<<"$BODY")"
grep -q 'the client went away' "$LOG" || fail "the log does not tell of the clients that left"

# ---- odd bodies: each a clean 400 (or 200 where it is valid), never a crash ---------------
base='{"prompt": "Hi", "max_tokens": 1, "temperature": 0.5}'
odd=0
check_odd() {
  if [[ $STATUS == 200 && $BODY == "data: "* ]]; then
    [[ $BODY == *'data: [DONE]' ]] || fail "odd body $1: a stream without [DONE]: $BODY"
  elif [[ $STATUS == 200 ]]; then
    jq -e '.choices[0] | has("text")' <<<"$BODY" >/dev/null || fail "odd body $1: 200 without a choice: $BODY"
  elif [[ $STATUS != 400 ]] || ! jq -e '.error.type == "invalid_request_error"' <<<"$BODY" >/dev/null; then
    fail "odd body $1: $STATUS $BODY"
  fi
  odd=$((odd + 1))
}
for ((i = 1; i < ${#base}; i += 3)); do post /v1/completions "${base:0:i}" && check_odd "cut at $i"; done
for field in model prompt max_tokens temperature top_p top_k seed stop stream stream_options n logits_hash echo; do
  for value in null true -1 1.5 '"x"' '[]' '{}' '[null]' 1e400 123456789012345678901234567890 '"\u0000"' '"\ud800"'; do
    post /v1/completions "${base%\}}, \"$field\": $value}" # a repeated key: the last one counts
    check_odd "$field: $value"
  done
done
RANDOM=42
for ((i = 0; i < 40; i++)); do
  bytes=""
  for ((k = 0; k < RANDOM % 64 + 1; k++)); do printf -v byte '\\x%02x' $((RANDOM % 255 + 1)) && bytes+=$byte; done
  post /v1/chat/completions "$(printf "$bytes")" && check_odd "random bytes $i"
done
for deep in "$(printf '[%.0s' {1..2000})" "$(printf '{"a":%.0s' {1..700})1" '{"prompt": "Hi", "prompt": 1}' \
  '{"messages": [{"role": "user", "content": [{"type": "text"}]}]}' '{"messages": [null]}' '{"messages": [[]]}'; do
  post /v1/chat/completions "$deep" && check_odd "${deep:0:30}"
done
echo "ok: $odd odd bodies"
[[ "$(curl -s "$URL/health")" == '{"status":"ok"}' ]] || fail "not healthy after the odd bodies"

stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC; $(tail -5 "$LOG")"
finish
