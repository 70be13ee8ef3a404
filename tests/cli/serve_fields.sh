#!/bin/bash
# Every row of docs/serving.md's request-fields table, sent to the server (a field of both
# endpoints to one of them, in turn): a field
# "honoured" is answered 200; "refused" is a 400 naming it, and with the value the row
# says turns it off, the same answer as without it; "ignored" gives the same answer (text
# and logits hash) as without it; a field of one endpoint is refused by the other; an
# unknown field is refused.  Then logit_bias and the penalties at work: -100 on the
# greedy token changes the answer and the token never comes out, and penalties change a
# sampled answer that repeats tokens.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
model=$(basename "$m")

# A value to send for each row (for a refused row, one that is not off).
declare -A value=(
  [model]="\"$model\"" [messages]='[{"role": "user", "content": "Hi"}]' [prompt]='"Once upon"'
  [max_tokens]=2 [max_completion_tokens]=2 [temperature]=0.5 [top_p]=0.9 [top_k]=5 [seed]=9
  [stop]='["\n"]' [stream]=true [stream_options]='{"include_usage": true}' [logit_bias]='{"1": 5}'
  [presence_penalty]=1 [frequency_penalty]=1 [ignore_eos]=true [cache_prompt]=false
  [logits_hash]=true [n]=2 [best_of]=2 [echo]=true [suffix]='"x"' [logprobs]=true
  [tools]='[{"type": "function", "function": {"name": "f"}}]' [functions]='[{"name": "f"}]'
  [top_logprobs]=2 [function_call]='"auto"' [tool_choice]='"auto"' [add_generation_prompt]=true
  [response_format]='{"type": "json_object"}' [reasoning_effort]='"low"' [verbosity]='"high"'
  [modalities]='["text", "audio"]' [audio]='{"voice": "alloy", "format": "wav"}'
  [prediction]='{"type": "content", "content": "x"}' [web_search_options]='{}'
  [user]='"u1"' [safety_identifier]='"s1"' [metadata]='{"k": "v"}' [store]=true
  [service_tier]='"flex"' [prompt_cache_key]='"k"' [prompt_cache_retention]='"24h"'
  [parallel_tool_calls]=false [n_predict]=5 [min_p]=0.05 [typical_p]=0.9 [top_n_sigma]=1
  [dynatemp_range]=0.5 [repeat_penalty]=1.1 [mirostat]=2 [dry_multiplier]=0.8
  [xtc_probability]=0.5 [samplers]='["top_k"]' [min_keep]=1 [grammar]='"root ::= \"a\""'
  [json_schema]='{}' [n_probs]=3 [post_sampling_probs]=true [return_tokens]=true
  [return_progress]=true [timings_per_token]=true [response_fields]='["content"]' [n_indent]=2
  [n_cmpl]=2 [t_max_predict_ms]=100 [lora]='[{"id": 0, "scale": 0.5}]'
  [multimodal_data]='["aGk="]' [image_data]='[{"data": "aGk=", "id": 1}]'
  [chat_template_kwargs]='{"enable_thinking": false}' [reasoning_format]='"deepseek"'
  [dynatemp_exponent]=1 [repeat_last_n]=64 [mirostat_tau]=5 [mirostat_eta]=0.1 [dry_base]=1.75
  [dry_allowed_length]=2 [dry_penalty_last_n]=64 [dry_sequence_breakers]='["\n"]'
  [xtc_threshold]=0.1 [n_keep]=4 [n_cache_reuse]=0 [id_slot]=1 [sse_ping_interval]=5
)
base_completion='{"prompt": "Once upon", "max_tokens": 3, "temperature": 0.8, "seed": 5, "logits_hash": true}'
base_chat='{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0.8, "seed": 5, "logits_hash": true}'

start_server serve-fields -m "$m" --parallel 2 --ctx-size 256 -q
declare -A want
for kind in completion chat; do
  base_var=base_$kind
  post "$([[ $kind == chat ]] && echo /v1/chat/completions || echo /v1/completions)" "${!base_var}"
  [[ $STATUS == 200 ]] || fail "the $kind base request: $STATUS $BODY"
  want[$kind]=$(jq -c '[(.choices[0].text // .choices[0].message.content), .logits_hash]' <<<"$BODY")
done

# send KIND FIELD JSON: the base request of KIND with FIELD set; STATUS, BODY.
send() {
  local base_var=base_$1 path=/v1/completions
  [[ $1 == chat ]] && path=/v1/chat/completions
  post "$path" "$(jq -c --arg f "$2" --argjson v "$3" '.[$f] = $v' <<<"${!base_var}")"
}
same_as_base() { [[ $(jq -c '[(.choices[0].text // .choices[0].message.content), .logits_hash]' <<<"$BODY" 2>/dev/null) == "${want[$1]}" ]]; }

rows=0 sent=0
declare -A seen
while IFS=$'\t' read -r field where what off; do
  rows=$((rows + 1))
  seen[$field]=1
  v=${value[$field]:-}
  [[ -n $v ]] || { fail "$field: no value to send for its row"; continue; }
  kinds=(completion) other="" # a field of both: each endpoint takes every other row
  ((rows % 2)) && kinds=(chat)
  [[ $field == prompt || $field == model ]] && kinds=(completion chat)
  [[ $where == chat ]] && kinds=(chat) other=completion
  [[ $where == completions ]] && kinds=(completion) other=chat
  for kind in "${kinds[@]}"; do
    [[ $field == messages && $kind == completion || $field == prompt && $kind == chat ]] && continue
    send "$kind" "$field" "$v"
    sent=$((sent + 1))
    case $what in
    honoured) [[ $STATUS == 200 ]] || fail "$field ($kind, honoured): $STATUS $BODY" ;;
    refused)
      [[ $STATUS == 400 && $(jq -r .error.param <<<"$BODY") == "$field" ]] ||
        fail "$field ($kind, refused): $STATUS $BODY"
      if [[ -n $off ]]; then
        send "$kind" "$field" "$off"
        sent=$((sent + 1))
        [[ $STATUS == 200 ]] && same_as_base "$kind" ||
          fail "$field ($kind) at $off, which turns it off: $STATUS $BODY"
      fi ;;
    ignored) [[ $STATUS == 200 ]] && same_as_base "$kind" || fail "$field ($kind, ignored): $STATUS $BODY, want ${want[$kind]}" ;;
    *) fail "$field: the row says \"$what\"" ;;
    esac
  done
  if [[ -n $other ]]; then # a field of the other endpoint
    send "$other" "$field" "$v"
    sent=$((sent + 1))
    [[ $STATUS == 400 && $(jq -r .error.param <<<"$BODY") == "$field" ]] ||
      fail "$field on the $other endpoint: $STATUS $BODY"
  fi
done < <(sed -n 's/^| `\([a-z_]*\)` | \(both\|chat\|completions\) | \(honoured\|refused\|ignored\)\( unless `\([^`]*\)`\)\{0,1\}.*/\1\t\2\t\3\t\5/p' \
  "$K3_ROOT/docs/serving.md")
((rows >= 80)) || fail "docs/serving.md's fields table has $rows rows"
for field in "${!value[@]}"; do [[ -n ${seen[$field]:-} ]] || fail "$field: a value here, no row in docs/serving.md"; done
send completion no_such_field 1
[[ $STATUS == 400 && $(jq -r .error.param <<<"$BODY") == no_such_field ]] || fail "an unknown field: $STATUS $BODY"
echo "ok: $rows rows of docs/serving.md's fields table, $sent requests"

# ---- logit_bias: -100 bans the greedy token ----------------------------------------------
prompt='[5, 17, 300]'
greedy=$("$K3" run -m "$m" --ids 5,17,300 -n 1 --print-ids -q) || fail "run: greedy token"
post /v1/completions "{\"prompt\": $prompt, \"max_tokens\": 6, \"temperature\": 0}"
plain=$(jq -r .choices[0].text <<<"$BODY")
post /v1/completions "{\"prompt\": $prompt, \"max_tokens\": 1, \"temperature\": 0}"
first=$(jq -r .choices[0].text <<<"$BODY")
post /v1/completions "{\"prompt\": $prompt, \"max_tokens\": 6, \"temperature\": 0, \"logit_bias\": {\"$greedy\": -100}}"
[[ $STATUS == 200 ]] || fail "logit_bias: $STATUS $BODY"
banned=$(jq -r .choices[0].text <<<"$BODY")
[[ $banned != "$plain" && $banned != "$first"* ]] ||
  fail "logit_bias -100 on the greedy token $greedy (\"$first\"): still \"$banned\""
# One token at a time from the two best (so the greedy token is drawn about half the
# time): with the bias it never is (the text of a single token names it).
with=0 without=0
for seed in $(seq 1 16); do
  post /v1/completions "{\"prompt\": $prompt, \"max_tokens\": 1, \"temperature\": 1, \"top_k\": 2, \"seed\": $seed}"
  [[ $(jq -r .choices[0].text <<<"$BODY") == "$first" ]] && without=$((without + 1))
  post /v1/completions "{\"prompt\": $prompt, \"max_tokens\": 1, \"temperature\": 1, \"top_k\": 2, \"seed\": $seed, \"logit_bias\": {\"$greedy\": -100}}"
  [[ $(jq -r .choices[0].text <<<"$BODY") == "$first" ]] && with=$((with + 1))
done
((without > 0)) || fail "the greedy token was never drawn from the two best in 16 seeds: the check proves nothing"
((with == 0)) || fail "a token banned by logit_bias -100 came out $with times in 16"
echo "ok: logit_bias -100 on token $greedy (\"$first\"): greedy \"$plain\" -> \"$banned\"; drawn $without of 16 times, 0 with the ban"

# ---- penalties change a sampled answer that repeats tokens --------------------------------
sampled='"max_tokens": 40, "temperature": 1, "top_k": 3, "seed": 3'
ids=$("$K3" run -m "$m" --ids 5,17,300 -n 40 --temp 1 --top-k 3 --seed 3 --print-ids -q) || fail "run: sampled ids"
repeats=$(tr ',' '\n' <<<"$ids" | sort | uniq -d | wc -l)
((repeats > 0)) || fail "the sampled answer repeats no token: the check proves nothing ($ids)"
post /v1/completions "{\"prompt\": $prompt, $sampled}"
plain=$(jq -r .choices[0].text <<<"$BODY")
for pen in presence_penalty frequency_penalty; do
  post /v1/completions "{\"prompt\": $prompt, $sampled, \"$pen\": 2}"
  [[ $STATUS == 200 && $(jq -r .choices[0].text <<<"$BODY") != "$plain" ]] ||
    fail "$pen 2 did not change an answer that repeats $repeats tokens: $STATUS $BODY"
done
echo "ok: presence_penalty and frequency_penalty change a sampled answer repeating $repeats tokens"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
