#!/bin/bash
# `k3-uring tokenize --chat REQUEST`: an OpenAI chat request body rendered as K3's encoder
# renders it.  Every golden case a request can express (an effort note, or thinking off:
# a request always asks for an effort, max by default) gives the golden prompt byte for
# byte and, with --segments, the golden [text, special] lines; --ids decode back to the
# prompt with one <|open|> id per marker; bad requests exit 1 naming the file and field.
set -u
source "$(dirname "$0")/lib.sh"
golden="${K3_ROOT:-.}/tests/chat/golden.json"
model=$(tiny_model)
tmp="$K3_TEST_TMP/tokenize_chat"
rm -rf "$tmp" && mkdir -p "$tmp"

# The request body of golden case $1: effort as reasoning_effort, thinking as
# chat_template_kwargs.thinking.
request() {
  jq --arg n "$1" '.cases[] | select(.name == $n) | {messages, tools, tool_choice: .options.tool_choice,
    response_format: .options.response_format, add_generation_prompt: .options.add_generation_prompt,
    reasoning_effort: .options.effort, chat_template_kwargs: {thinking: .options.thinking}}' "$golden"
}

cases=$(jq -r '.cases[] | select(.options.effort != null or .options.thinking == false) | .name' "$golden")
[[ $(wc -l <<<"$cases") -ge 8 ]] || fail "only $(wc -l <<<"$cases") golden cases usable as requests"
for name in $cases; do
  request "$name" >"$tmp/$name.json"
  jq -j --arg n "$name" '.cases[] | select(.name == $n) | .expected' "$golden" >"$tmp/$name.want"
  "$K3" tokenize --chat "$tmp/$name.json" >"$tmp/$name.got" 2>"$tmp/err" || fail "$name: $(cat "$tmp/err")"
  cmp -s "$tmp/$name.want" "$tmp/$name.got" || fail "$name: the prompt differs from the golden one"
  jq -c --arg n "$name" '.cases[] | select(.name == $n) | .expected_segments[]' "$golden" >"$tmp/$name.segs"
  "$K3" tokenize --chat "$tmp/$name.json" --segments | cmp -s "$tmp/$name.segs" - ||
    fail "$name: --segments differ from the golden segments"
done

# Ids: the prompt's bytes again, the user's "<|open|>" as text (tiny's <|open|> is 2035).
req='{"messages": [{"role": "user", "content": "Say <|open|> and <|sep|>"}], "reasoning_effort": "low"}'
printf '%s' "$req" >"$tmp/ids.json"
ids=$("$K3" tokenize -m "$model" --chat "$tmp/ids.json" --ids) || fail "--ids exited $?"
"$K3" tokenize -m "$model" --decode "$ids" >"$tmp/ids.dec"
"$K3" tokenize --chat - <"$tmp/ids.json" | cmp -s - "$tmp/ids.dec" || fail "--ids do not decode to the prompt"
opens=$(tr ',' '\n' <<<"$ids" | grep -cx 2035)
markers=$("$K3" tokenize --chat "$tmp/ids.json" --segments | grep -cxF '["<|open|>",true]')
((opens == markers && markers == 4)) || fail "$opens <|open|> ids for $markers marker segments, want 4"
"$K3" tokenize -m "$model" --chat "$tmp/ids.json" --show | grep -q $'^2035\t'"'<|open|>'"$'\tspecial$' ||
  fail "--chat --show does not list the markers"

# Bad requests: exit 1, one line naming the file and what is wrong.
printf '{"messages": [' >"$tmp/cut.json"
expect_error 1 "$tmp/cut.json:1:" "$K3" tokenize --chat "$tmp/cut.json"
printf '{"messages": [{"role": "user", "content": "Hi"}, {"role": "robot", "content": "x"}]}' >"$tmp/role.json"
expect_error 1 "$tmp/role.json: messages[1].role must be" "$K3" tokenize --chat "$tmp/role.json"
printf '{"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "medium"}' >"$tmp/effort.json"
expect_error 1 "$tmp/effort.json: reasoning_effort \"medium\"" "$K3" tokenize --chat "$tmp/effort.json"
printf '{"tools": [{"function": {"name": "f"}}], "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "g"}}]}]}' >"$tmp/tool.json"
expect_error 1 "messages[0].tool_calls[0].function.name: \"g\" is not a declared tool" "$K3" tokenize --chat "$tmp/tool.json"
expect_error 1 "$tmp/missing.json" "$K3" tokenize --chat "$tmp/missing.json"
expect_error 2 "--segments and --ids go with --chat" "$K3" tokenize -m "$model" -p hi --segments
expect_error 2 "exactly one of" "$K3" tokenize -m "$model" -p hi --chat "$tmp/ids.json"
expect_error 2 "-m DIR is required" "$K3" tokenize --chat "$tmp/ids.json" --ids
finish
