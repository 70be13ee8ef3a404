#!/bin/bash
# K3's chat encoding as Moonshot's encoder writes it, through serve's /apply-template,
# `tokenize --chat` and a chat completion's prompt_tokens, for every case of
# tests/chat/golden.json (tests/serve/golden.mjs; node, no npm package).
source "$(dirname "$0")/lib.sh"
command -v node >/dev/null || { echo "skip: node is not installed" >&2; exit 77; }
source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
start_server chat-golden -m "$m"
node "$K3_ROOT/tests/serve/golden.mjs" "$K3_ROOT/tests/chat/golden.json" "$URL" "$K3" "$m" ||
  fail "golden cases (server log: $(tail -3 "$LOG"))"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
