#!/bin/bash
# An agent's round trip (a stage of bench/run.sh, or run alone): turn 1 forces a call,
# turn 2 sends its result back with the model's own reasoning and calls echoed; turn 2's
# time to first token (max_tokens 1) against a request of only its new tokens (the prompt
# less what the prompt store resumed), computed from scratch.  A ratio near 1 means the
# store resumed the whole earlier prompt and turn 2 paid only for what it added.  Each
# repetition is a new conversation (its own city), so nothing is resumed from an earlier
# one; medians over REPS.  Results in bench/results/agents-STAMP.md.
# Knobs (environment): CKPT (a checkpoint folder; default: k3-tiny synthesized in a
#   temporary folder), REPS=5, THREADS=0 (one per core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=agents.sh
source "$root/bench/lib.sh"
k3=${K3:-$root/k3-uring}
reps=${REPS:-5}
threads=${THREADS:-0}
stamp=${BENCH_STAMP:-$(date -u +%Y%m%d-%H%M%S)}
res=${BENCH_RESULTS:-$root/bench/results}
work=$(mktemp -d)
server=
cleanup() { [[ -n $server ]] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
check_uint REPS "$reps"
[[ -x $k3 ]] || die "no $k3: run make first"
ckpt=${CKPT:-$work/k3-tiny}
[[ -n ${CKPT:-} ]] || "$k3" synth --config k3-tiny --seed 1 --out "$ckpt" -q
say "every knob: CKPT=$ckpt REPS=$reps THREADS=$threads K3=$k3"

"$k3" serve -m "$ckpt" --port 0 -t "$threads" --parallel 1 2>"$work/serve.log" &
server=$!
for ((i = 0; i < 600; i++)); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/serve.log")
  [[ -n $port ]] && break
  kill -0 "$server" 2>/dev/null || die "serve did not start: $(cat "$work/serve.log")"
  sleep 0.1
done
url=http://127.0.0.1:$port

tools='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
  "properties":{"city":{"type":"string","maxLength":12},"unit":{"type":"string","enum":["c","f"]}},
  "required":["city","unit"]}}}]'
# post BODY: the answer in $work/out, the seconds it took on stdout
post() {
  curl -s -o "$work/out" -w '%{time_total}' -H 'Content-Type: application/json' --data-binary "$2" "$url$1"
}

rows=()
for ((r = 1; r <= reps; r++)); do
  msgs=$(jq -nc --arg c "City number $r" '[{role: "user", content: ("Weather in " + $c + "?")}]')
  turn1=$(jq -nc --argjson m "$msgs" --argjson t "$tools" '{messages: $m, tools: $t, seed: 1,
    chat_template_kwargs: {thinking: false},
    tool_choice: {type: "function", function: {name: "get_weather"}}, parallel_tool_calls: false,
    max_tokens: 300}')
  post /v1/chat/completions "$turn1" >/dev/null
  msg=$(jq -c '.choices[0].message' "$work/out")
  [[ $(jq -r '.tool_calls | length' <<<"$msg") -ge 1 ]] || die "turn 1 made no call: $(cat "$work/out")"
  turn2=$(jq -c --argjson a "$msg" '.messages += [$a, {role: "tool", tool_call_id: $a.tool_calls[0].id,
    content: "{\"temp\": 21}"}] | .max_tokens = 1 | del(.tool_choice)' <<<"$turn1")
  t2=$(post /v1/chat/completions "$turn2")
  prompt=$(jq .usage.prompt_tokens "$work/out")
  cached=$(jq .usage.prompt_tokens_details.cached_tokens "$work/out")
  new=$((prompt - cached))
  ids=$(seq -s, 100 7 $((100 + 7 * (new - 1))))
  alone=$(post /v1/completions "{\"prompt\": [$ids], \"max_tokens\": 1, \"cache_prompt\": false}")
  rows+=("$t2 $alone $prompt $cached $new")
  say "repetition $r: turn 2 $t2 s ($prompt prompt tokens, $cached resumed), its $new new tokens alone $alone s"
done

mkdir -p "$res"
out=$res/agents-$stamp.md
# median COLUMN: the median of that column of the rows
median() { printf '%s\n' "${rows[@]}" | awk -v c="$1" '{ print $c }' | sort -g |
           awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for i in "${!rows[@]}"; do rows[i]+=" $(awk '{ printf "%.4f", $1 / $2 }' <<<"${rows[i]}")"; done
{
  echo "# An agent round trip: turn 2 against its new tokens alone ($(basename "$ckpt"), $reps repetitions)"
  echo
  echo "| turn 2, median s | new tokens alone, median s | median ratio | prompt / resumed / new tokens (medians) |"
  echo "| --- | --- | --- | --- |"
  echo "| $(median 1) | $(median 2) | $(median 6)x | $(median 3) / $(median 4) / $(median 5) |"
} >"$out"
cat "$out"
say "written: $out"
