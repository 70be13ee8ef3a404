#!/bin/bash
# An agent's view of `k3-uring serve`: tool calls, reasoning and structured output
# through the official OpenAI client (tests/serve/agents.mjs: calls validated by ajv, the
# SDK's stream helper, a three-round agent loop resumed from the prompt store), and the
# chat fields' refusals, each a 400 naming its field.  Skips (77) when node or the npm
# registry is missing.
source "$(dirname "$0")/lib.sh"
skip() { echo "skip: $*" >&2; exit 77; }
command -v node >/dev/null || skip "node is not installed"
command -v npm >/dev/null || skip "npm is not installed"
source "$(dirname "$0")/serve_npm.sh"
npm_clients serve-agents || skip "npm install failed (is the npm registry reachable?)"

source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
start_server serve-agents -m "$m" --parallel 2
node "$K3_ROOT/tests/serve/agents.mjs" "$NPM_WORK" "$URL/v1" "$(basename "$m")" ||
  fail "the agent checks (server log: $(tail -3 "$LOG"))"

user='{"role": "user", "content": "Hi"}'
fn='{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}'
call='{"id": "c1", "type": "function", "function": {"name": "g", "arguments": "{}"}}'
while IFS='|' read -r param body; do
  post /v1/chat/completions "$body" && expect_api_error 400 invalid_request_error "$param" "$body"
done <<JSON
tools|{"messages": [$user], "tools": {"name": "f"}}
tools[0].function.name|{"messages": [$user], "tools": [{"type": "function", "function": {"parameters": {"type": "object"}}}]}
tools[0].function.parameters|{"messages": [$user], "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}
reasoning_effort|{"messages": [$user], "reasoning_effort": "medium"}
tool_choice|{"messages": [$user], "tool_choice": "sometimes", "tools": [$fn]}
tool_choice.function.name|{"messages": [$user], "tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [$fn]}
messages[1].tool_calls[0].function.name|{"messages": [$user, {"role": "assistant", "content": null, "tool_calls": [$call]}], "tools": [$fn]}
messages[1]|{"messages": [$user, {"role": "tool", "tool_call_id": "c1", "content": "x"}]}
response_format.type|{"messages": [$user], "response_format": {"type": "yaml"}}
tools[0].function.parameters.properties.x.pattern|{"messages": [$user], "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}}}]}
response_format.json_schema.schema.properties.n.multipleOf|{"messages": [$user], "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}}
JSON
# After all of that the server still answers.
post /v1/chat/completions "{\"messages\": [$user], \"max_tokens\": 2}"
[[ $STATUS == 200 ]] || fail "a request after the refusals: $STATUS $BODY"

stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
