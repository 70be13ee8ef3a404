#!/bin/bash
# `k3-uring serve` through the official OpenAI client (npm `openai`): chat and completions,
# whole and streamed, the model list, usage, errors as the client's own classes.  The
# checks are in tests/serve/openai.mjs.  Skips (77) when node or the npm registry is
# missing.
source "$(dirname "$0")/lib.sh"
skip() { echo "skip: $*" >&2; exit 77; }
command -v node >/dev/null || skip "node is not installed"
command -v npm >/dev/null || skip "npm is not installed"

source "$(dirname "$0")/serve_npm.sh"
npm_clients serve-openai || skip "npm install openai failed (is the npm registry reachable?)"
work=$NPM_WORK

source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
start_server serve-openai -m "$m" --api-key k3-openai-key
node "$K3_ROOT/tests/serve/openai.mjs" "$work" "$URL/v1" "$(basename "$m")" k3-openai-key ||
  fail "the openai client's checks (server log: $(tail -3 "$LOG"))"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
