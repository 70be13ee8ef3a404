#!/bin/bash
# A bounded load on the loopback under injected read faults: 40 requests from 8 clients
# (chat and completions, whole and streamed) to a server on a pack without replicas whose
# reads fail now and then (K3_FAULTS).  Every response must be the fault-free answer (the
# same text, tokens and logits hash as a fault-free server gave) or a clean OpenAI error
# (a 500 body, or an error event in a stream); the server must be healthy and answer
# correctly at the end, and stop with exit 0.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/serve-load"
rm -rf "$d" && mkdir -p "$d/a" "$d/b" "$d/out"
"$K3" pack --checkpoint "$m" --drives "$d/a,$d/b" -q 2>/dev/null || { echo "FAIL: pack"; exit 1; }
serve_args=(--drives "$d/a,$d/b" --ram floor --parallel 8 --queue 64 -q)

bodies=(
  '{"prompt": [5, 17, 300], "temperature": 0.9, "seed": 1}'
  '{"prompt": "The printing press", "temperature": 0}'
  '{"messages": [{"role": "user", "content": "Hi"}], "temperature": 0.7, "seed": 3}'
  '{"prompt": [1000, 3, 4, 5, 6], "temperature": 1.0, "top_k": 20, "seed": 4}'
  '{"prompt": "Once", "temperature": 0.5, "top_p": 0.9, "seed": 5}'
  '{"prompt": [7, 7], "temperature": 0}'
  '{"prompt": "A list of", "temperature": 1.1, "seed": 7}'
  '{"prompt": [42, 43, 44, 45], "temperature": 0.8, "seed": 8}'
)
common='{"max_tokens": 6, "logits_hash": true}'

# request I OUT STREAM: the response in OUT, its status in OUT.status.
request() {
  local extra=$common
  [[ $3 == 1 ]] && extra="$common + {stream: true, stream_options: {include_usage: true}}"
  curl -sN --max-time 120 -o "$2" -w '%{http_code}' "$URL$(endpoint "${bodies[$1]}")" \
    -d "$(jq -c ". + $extra" <<<"${bodies[$1]}")" >"$2.status"
}
# signature FILE: [text, completion tokens, logits hash] of a whole or streamed answer.
signature() {
  if [[ $(head -c 6 "$1") == "data: " ]]; then
    grep '^data: {' "$1" | sed 's/^data: //' | jq -sc '[(map(.choices[0] | .text // .delta.content // empty) | join("")),
       (last.usage.completion_tokens), (map(.logits_hash // empty) | first)]'
  else
    jq -c '[(.choices[0].text // .choices[0].message.content), .usage.completion_tokens, .logits_hash]' "$1"
  fi
}

# The fault-free answers.
start_server serve-load-ref "${serve_args[@]}"
pids=()
for i in "${!bodies[@]}"; do request "$i" "$d/ref-$i" 0 & pids+=($!); done
wait "${pids[@]}"
for i in "${!bodies[@]}"; do
  [[ $(cat "$d/ref-$i.status") == 200 ]] || { echo "FAIL: fault-free request $i: $(cat "$d/ref-$i")"; exit 1; }
  signature "$d/ref-$i" >"$d/ref-$i.sig"
done
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "the fault-free server: exit $STOP_RC"

# The same under faults: 8 clients, 5 requests each, every other one streamed.
K3_FAULTS="eio:0.01,short:0.03,eagain:0.02,delay:0.002,corrupt:0.00001" K3_FAULTS_SEED=11 \
  start_server serve-load "${serve_args[@]}"
t0=$SECONDS
client() {
  local c=$1 k i
  for ((k = 0; k < 5; k++)); do
    i=$(((c + k) % 8))
    request "$i" "$d/out/$c-$k-$i" $(((c + k) % 2))
  done
}
pids=()
for ((c = 0; c < 8; c++)); do client "$c" & pids+=($!); done
wait "${pids[@]}"
took=$((SECONDS - t0))

right=0 errors=0
for f in "$d"/out/*-*-*; do
  [[ $f == *.status ]] && continue
  i=${f##*-}
  status=$(cat "$f.status")
  if [[ $status == 200 && $(head -c 6 "$f") == "data: " ]]; then
    if grep -q '^data: {"error"' "$f"; then
      grep '^data: {"error"' "$f" | sed 's/^data: //' | jq -e '.error | (.message | length > 0) and .type == "server_error"' >/dev/null &&
        errors=$((errors + 1)) || fail "$f: a bad error event: $(grep '^data: {"error"' "$f")"
    elif [[ $(signature "$f") == "$(cat "$d/ref-$i.sig")" ]] && printf 'data: [DONE]\n\n' | cmp -s - <(tail -c 14 "$f"); then
      right=$((right + 1))
    else
      fail "$f: streamed $(signature "$f"), fault-free $(cat "$d/ref-$i.sig")"
    fi
  elif [[ $status == 200 ]]; then
    [[ $(signature "$f") == "$(cat "$d/ref-$i.sig")" ]] && right=$((right + 1)) ||
      fail "$f: $(signature "$f"), fault-free $(cat "$d/ref-$i.sig")"
  elif [[ $status == 500 ]] && jq -e '.error | (.message | length > 0) and .type == "server_error" and has("param") and has("code")' "$f" >/dev/null; then
    errors=$((errors + 1))
  else
    fail "$f: status $status: $(head -c 300 "$f")"
  fi
done
retries=$(metric k3_read_retries_total)
echo "40 requests from 8 clients in $took s under faults: $right the fault-free answer, $errors clean errors; $retries reads retried"
((right + errors == 40)) || fail "$((right + errors)) responses of 40"
((right > 0)) || fail "no request got through the faults"
[[ ${retries:-0} != 0 ]] || fail "no read was retried: were faults injected?"

# Still healthy, and still right (a fault may still end one request: a few tries).
[[ "$(curl -s --max-time 10 "$URL/health")" == '{"status":"ok"}' ]] || fail "not healthy after the load"
for ((k = 0; k < 5; k++)); do
  request 1 "$d/after" 0
  [[ $(cat "$d/after.status") == 200 ]] && break
done
[[ $(signature "$d/after") == "$(cat "$d/ref-1.sig")" ]] || fail "after the load: $(cat "$d/after")"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM after the load: exit $STOP_RC"
finish
