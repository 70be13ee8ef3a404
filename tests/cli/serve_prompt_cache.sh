#!/bin/bash
# Conversations that resume: a request whose prompt extends a stored one (the end of an
# earlier prompt, or of an earlier request's generation) computes only its new tokens
# (usage.prompt_tokens_details.cached_tokens) and gives the logits hash a fresh server
# gives; "cache_prompt": false and --cache-ram 0 resume nothing; /metrics counts the
# reuse and has the time-to-first-token and time-between-tokens histograms.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)

first=$(seq -s, 11 13 400)              # 30 ids
second="$first,$(seq -s, 7 3 40)"       # the same 30, then 12 more
chat1='[{"role": "user", "content": "Tell me about packs."}]'
# answer_of BODY: the second turn's messages, the first turn's answer between them.
second_turn() {
  jq -c --arg a "$1" '. + [{role: "assistant", content: $a}, {role: "user", content: "And drives?"}]' <<<"$chat1"
}
common='"max_tokens": 6, "temperature": 0.8, "seed": 5, "logits_hash": true'
# ask PATH JSON-FIELDS: "cached hash prompt_tokens text" of the answer.
ask() {
  post "$1" "{$2, $common}"
  [[ $STATUS == 200 ]] || { fail "$1 {$2}: status $STATUS: $BODY"; return; }
  jq -r '[.usage.prompt_tokens_details.cached_tokens, .logits_hash, .usage.prompt_tokens,
          (.choices[0].text // .choices[0].message.content)] | @tsv' <<<"$BODY"
}

start_server prompt-cache -m "$m" --parallel 2
IFS=$'\t' read -r c1 _ p1 _ < <(ask /v1/completions "\"prompt\": [$first]")
IFS=$'\t' read -r c2 h2 p2 _ < <(ask /v1/completions "\"prompt\": [$second]")
IFS=$'\t' read -r c3 h3 _ _ < <(ask /v1/completions "\"prompt\": [$second], \"cache_prompt\": false")
IFS=$'\t' read -r t1c _ t1p answer < <(ask /v1/chat/completions "\"messages\": $chat1")
IFS=$'\t' read -r t2c t2h t2p _ < <(ask /v1/chat/completions "\"messages\": $(second_turn "$answer")")
metrics=$(curl -s "$URL/metrics")
stop_server

[[ $c1 == 0 && $p1 == 30 ]] || fail "first prompt: $c1 cached of $p1"
[[ $c2 == 30 && $p2 == 42 ]] && echo "ok: the extended prompt resumed at 30 of 42" ||
  fail "extended prompt: $c2 cached of $p2, want 30 of 42"
[[ $c3 == 0 ]] || fail "cache_prompt false: $c3 cached"
[[ $t1c == 0 && $t2c -ge $t1p && $t2c -lt $t2p ]] && echo "ok: the second turn resumed at $t2c of $t2p (the first turn's prompt: $t1p)" ||
  fail "second turn: $t2c cached of $t2p; the first turn's prompt $t1p"
grep -q "^k3_prompt_cache_tokens_total $((30 + t2c))$" <<<"$metrics" ||
  fail "k3_prompt_cache_tokens_total: $(grep prompt_cache_tokens <<<"$metrics")"
grep -q '^k3_time_to_first_token_seconds_count 5$' <<<"$metrics" ||
  fail "time to first token histogram: $(grep first_token <<<"$metrics")"
grep -q '^k3_time_between_tokens_seconds_count 25$' <<<"$metrics" ||
  fail "time between tokens: $(grep between_tokens_seconds_count <<<"$metrics")"
grep -q '^k3_time_between_tokens_seconds_bucket{le="+Inf"} 25$' <<<"$metrics" ||
  fail "time between tokens +Inf bucket"

start_server prompt-cache-fresh -m "$m" --parallel 2 --cache-ram 0
IFS=$'\t' read -r f2c f2h _ _ < <(ask /v1/completions "\"prompt\": [$second]")
IFS=$'\t' read -r _ _ _ _ < <(ask /v1/completions "\"prompt\": [$first]")
IFS=$'\t' read -r f2c_again f2h_again _ _ < <(ask /v1/completions "\"prompt\": [$second]")
IFS=$'\t' read -r ft2c ft2h _ _ < <(ask /v1/chat/completions "\"messages\": $(second_turn "$answer")")
stop_server
[[ $f2c == 0 && $f2c_again == 0 && $ft2c == 0 ]] || fail "--cache-ram 0 resumed: $f2c, $f2c_again, $ft2c"
[[ $h2 == "$f2h" && $h3 == "$f2h" && $f2h_again == "$f2h" ]] &&
  echo "ok: resumed, opted out and fresh give logits hash $f2h" ||
  fail "logits hashes: resumed $h2, cache_prompt false $h3, fresh $f2h and $f2h_again"
[[ $t2h == "$ft2h" ]] && echo "ok: the resumed second turn's hash is a fresh server's" ||
  fail "second turn: resumed $t2h, fresh $ft2h"
finish
