#!/bin/bash
# `serve` over mpirun's ranks: requests decoding together (prompts joining as others
# decode; a 38-id prompt spans two prefill steps; a chat constrained to a tool call) give
# the text, calls, token counts and logits hashes one process gives on one thread, on two
# threads, on 2 ranks from a checkpoint folder and on 3 from a pack per rank (pack --ranks
# 3); SIGTERM to the leader stops every rank, exit 0.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/serve_lib.sh"
source "$(dirname "$0")/ranks_lib.sh"
m=$(tiny_model)
d="$K3_TEST_TMP/ranks-serve"
rm -rf "$d" && mkdir -p "$d"/s{0,1,2}-{a,b}
"$K3" pack -m "$m" --drives "$d/s%r-a,$d/s%r-b" --ranks 3 -q || exit 1

bodies=(
  '{"prompt": [5, 17, 300, 9, 41], "temperature": 0.9, "top_p": 0.95, "seed": 11}'
  '{"prompt": "The history of the printing press", "temperature": 0.7, "top_k": 40, "seed": 12}'
  '{"messages": [{"role": "user", "content": "Hello there"}], "temperature": 0.8, "seed": 14}'
  "{\"prompt\": [$(seq -s, 100 51 2000)], \"temperature\": 0}"
  '{"messages": [{"role": "user", "content": "Call"}], "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "chat_template_kwargs": {"thinking": false}, "temperature": 0.9, "seed": 19, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"]}}}]}'
)
common='{"max_tokens": 8, "logits_hash": true}'

# answers OUT: every request at once; "text tokens hash" per line, in request order.
answers() {
  local i clients=()
  for i in "${!bodies[@]}"; do
    curl -s --max-time 300 "$URL$(endpoint "${bodies[$i]}")" -d "$(jq -c "$common + ." <<<"${bodies[$i]}")" |
      jq -c '[(.choices[0].text // .choices[0].message.content), .usage.completion_tokens, .logits_hash,
              (.choices[0].message.tool_calls // [] | map(.function))]' >"$1.$i" &
    clients+=($!)
  done
  wait "${clients[@]}"
  cat "$1".? >"$1"
}

start_server one -m "$m" --parallel 4 -t 1
answers "$d/one"
stop_server
jq -se 'all(.[2] | test("^[0-9a-f]{16}$"))' "$d/one" >/dev/null ||
  fail "one process: a request failed: $(cat "$d/one")"
start_server two-threads -m "$m" --parallel 4 -t 2
answers "$d/two-threads"
stop_server
cmp -s "$d/one" "$d/two-threads" || fail "two threads: $(diff "$d/one" "$d/two-threads")"

check() { # NAME NP ARGS...
  local name=$1 np=$2; shift 2
  LAUNCH=(mpirun --oversubscribe -np "$np")
  start_server "$name" --parallel 4 -t 1 "$@"
  answers "$d/$name"
  local leader i rc sent
  sent=$(metric k3_rank_exchange_bytes_total)
  awk -v b="${sent:-0}" 'BEGIN { exit !(b > 0) }' && echo "ok: $name: $sent bytes exchanged (/metrics)" ||
    fail "$name: /metrics counts no bytes exchanged between ranks: \"$sent\""
  leader=$(leader_pid "$PID")
  [[ -n "$leader" ]] && kill -TERM "$leader"
  for ((i = 0; i < 600; i++)); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$PID" 2>/dev/null && { kill -9 "$PID"; fail "$name: not stopped 60 s after SIGTERM to rank 0"; }
  wait "$PID"
  rc=$?
  if ! cmp -s "$d/one" "$d/$name"; then
    fail "$name: answers differ from one process's: $(diff "$d/one" "$d/$name")"
  elif [[ -z "$leader" || $rc -ne 0 ]]; then
    fail "$name: SIGTERM to rank 0 (pid \"$leader\"): mpirun exited $rc: $(cat "$LOG")"
  else
    echo "ok: $name: the same $(wc -l <"$d/$name") answers; stopped cleanly"
  fi
}
check ckpt-2 2 -m "$m"
check shares-3 3 --drives "$d/s%r-a,$d/s%r-b" --ram floor
finish
