#!/bin/bash
# Determinism per request: ten requests (a chat, completions of text and of ids, each
# its own seed and sampling, one greedy, one prompt longer than a prefill chunk, a chat
# constrained to a tool call and one to a JSON schema) give the same text, calls, token
# count and logits hash alone, all at once (--parallel 8, ten clients), and when half of
# them join while the other half decode (streamed); the same seed gives the same text
# again, another seed another text.  Two long requests hold the server busy through each
# shared phase, and the server's own /metrics show they still run when it ends: every
# request of the phase shared its decode steps, however fast or loaded the machine.
# At -b 1 --parallel 4 four requests still decode in one step.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/serve-determinism"
rm -rf "$d" && mkdir -p "$d"
start_server serve-determinism -m "$m" --parallel 8 --queue 16 --prefill-chunk 8 --ctx-size 4096

long_ids=$(seq -s, 100 73 1600)   # 21 ids: prefilled over three steps
bodies=(
  '{"prompt": [5, 17, 300, 9, 41], "temperature": 0.9, "top_p": 0.95, "seed": 11}'
  '{"prompt": "The history of the printing press", "temperature": 0.7, "top_k": 40, "seed": 12}'
  "{\"prompt\": [$long_ids], \"temperature\": 1.0, \"seed\": 13}"
  '{"messages": [{"role": "user", "content": "Hello there"}], "temperature": 0.8, "seed": 14}'
  '{"prompt": [7, 7, 7], "temperature": 0}'
  '{"prompt": "Once upon a time", "temperature": 1.5, "seed": 16}'
  '{"prompt": "A bell", "temperature": 0.6, "seed": 17, "stop": ["zz"]}'
  '{"prompt": [1000, 3, 4], "temperature": 1.0, "top_k": 5, "seed": 18}'
  '{"messages": [{"role": "user", "content": "Call"}], "tool_choice": "required", "chat_template_kwargs": {"thinking": false}, "temperature": 0.9, "seed": 19, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "s": {"type": "string", "maxLength": 3}}, "required": ["n"]}}}]}'
  '{"messages": [{"role": "user", "content": "JSON"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}}, "required": ["a", "b"]}}}, "chat_template_kwargs": {"thinking": false}, "temperature": 1.0, "seed": 20}'
)
common='{"max_tokens": 8, "logits_hash": true}'

# run_whole I OUT: request I, non-streaming; "text tokens hash" as JSON in OUT.
run_whole() {
  curl -s --max-time 300 "$URL$(endpoint "${bodies[$1]}")" -d "$(jq -c ". + $common" <<<"${bodies[$1]}")" |
    jq -c '[(.choices[0].text // .choices[0].message.content), .usage.completion_tokens, .logits_hash,
            (.choices[0].message.tool_calls // [] | map(.function))]' >"$2"
}
# run_stream I OUT: the same, streamed (the events in OUT.sse).
run_stream() {
  curl -sN --max-time 300 "$URL$(endpoint "${bodies[$1]}")" \
    -d "$(jq -c ". + $common + {stream: true, stream_options: {include_usage: true}}" <<<"${bodies[$1]}")" >"$2.sse"
  grep '^data: {' "$2.sse" | sed 's/^data: //' | jq -sc '[(map(.choices[0] | .text // .delta.content // empty) | join("")),
     (last.usage.completion_tokens), (map(.logits_hash // empty) | first),
     (map(.choices[0].delta.tool_calls // empty) | flatten | map(.function))]' >"$2"
}
# hold: two requests of 4000 tokens, running once this returns; unhold PHASE: they still
# ran when PHASE ended (so it shared their steps), then their clients leave.
hold() {
  holders=()
  local i
  for i in 1 2; do
    curl -s --max-time 300 "$URL/v1/completions" \
      -d '{"prompt": [9, 9], "max_tokens": 4000, "ignore_eos": true, "temperature": 0}' >/dev/null &
    holders+=($!)
  done
  wait_metric k3_requests_running 2 60 || fail "the two holding requests never ran"
}
unhold() {
  local running
  running=$(metric k3_requests_running)
  [[ $running -ge 2 ]] || fail "$1: the holding requests had ended ($running running): it may not have shared steps"
  kill "${holders[@]}" 2>/dev/null
  wait "${holders[@]}" 2>/dev/null
  wait_metric k3_requests_running 0 60 || fail "$1: the holding requests outlived their clients"
}
compare() { # PHASE
  local i
  for i in "${!bodies[@]}"; do
    if ! cmp -s "$d/alone-$i" "$d/$1-$i"; then
      fail "request $i $1: $(cat "$d/$1-$i"), alone: $(cat "$d/alone-$i")"
    fi
  done
  echo "ok: $1: the same text, tokens and logits hash as alone for all ${#bodies[@]}"
}

for i in "${!bodies[@]}"; do run_whole "$i" "$d/alone-$i"; done
for i in "${!bodies[@]}"; do
  # the constrained two may end before max_tokens (their grammar closes the answer)
  jq -e '(.[1] == 8 or (.[1] >= 1 and (.[3] | length) + (.[0] | length) > 0)) and
         (.[2] | test("^[0-9a-f]{16}$"))' "$d/alone-$i" >/dev/null ||
    fail "request $i alone: $(cat "$d/alone-$i")"
done

hold
pids=()
for i in "${!bodies[@]}"; do run_whole "$i" "$d/together-$i" & pids+=($!); done
wait "${pids[@]}"
unhold together
compare together
rows=$(metric k3_decode_rows_per_step)
awk -v r="$rows" 'BEGIN { exit !(r > 1) }' || fail "no decode step had several rows (rows per step $rows)"
# The union each MoE layer read per decode step: a series per MoE layer (k3-tiny: layers
# 1-12 of 13, 16 of 64 experts a token), each between one token's 16 and all 64, more than
# 16 somewhere now that steps held several rows, and their mean the overall figure.
unions=$(curl -s "$URL/metrics" | sed -n 's/^k3_decode_layer_union_experts{layer="\([0-9]*\)"} /\1 /p')
[[ $(awk '{print $1}' <<<"$unions" | paste -sd,) == 1,2,3,4,5,6,7,8,9,10,11,12 ]] ||
  fail "per-layer unions not for the MoE layers 1-12: $unions"
awk -v mean="$(metric k3_decode_union_experts)" '$2 < 16 || $2 > 64 { exit 1 } $2 > 16 { wider = 1 }
  { sum += $2 } END { exit !(wider && sum / NR - mean < 1e-9 && mean - sum / NR < 1e-9) }' <<<"$unions" ||
  fail "per-layer unions out of [16, 64], none above 16 or not averaging to the mean: $unions"

# Half start streaming; once one of them has text (the others still prefilling or decoding:
# eight tokens go by fast on k3-tiny) the other half joins.
hold
pids=()
for i in 0 1 2 3 8; do run_stream "$i" "$d/joined-$i" & pids+=($!); done
for ((k = 0; k < 600; k++)); do
  n=0
  for i in 0 1 2 3; do [[ -f "$d/joined-$i.sse" ]] && grep -q '"content":"[^"]\|"text":"[^"]' "$d/joined-$i.sse" && n=$((n + 1)); done
  ((n >= 1)) && break
  sleep 0.05
done
for i in 4 5 6 7 9; do run_whole "$i" "$d/joined-$i" & pids+=($!); done
wait "${pids[@]}"
unhold joined
compare joined

# The same seed again: the same text; another seed: another.
run_whole 5 "$d/again-5"
cmp -s "$d/alone-5" "$d/again-5" || fail "seed 16 again: $(cat "$d/again-5"), first $(cat "$d/alone-5")"
bodies[5]='{"prompt": "Once upon a time", "temperature": 1.5, "seed": 17}'
run_whole 5 "$d/other-5"
[[ $(jq -c '.[0]' "$d/other-5") != $(jq -c '.[0]' "$d/alone-5") ]] ||
  fail "seeds 16 and 17 gave the same text: $(cat "$d/other-5")"

stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"

# -b 1 below --parallel: a step still holds a row for each decoding slot (the rows asked
# of the runtime are never fewer than --parallel; with one row a step, one request
# decoded while the others, admitted, waited for it to end with their prompts unread).
start_server serve-determinism-b1 -m "$m" -b 1 --parallel 4 --prefill-chunk 8 --ctx-size 4096
hold
pids=()
for i in 0 3; do run_whole "$i" "$d/b1-$i" & pids+=($!); done
wait "${pids[@]}"
unhold "-b 1"
for i in 0 3; do
  cmp -s "$d/alone-$i" "$d/b1-$i" || fail "request $i at -b 1: $(cat "$d/b1-$i"), alone: $(cat "$d/alone-$i")"
done
echo "ok: -b 1 --parallel 4: four decoding at once, the same bytes as alone"
stop_server TERM
finish
