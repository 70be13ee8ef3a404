#!/bin/bash
# `k3-uring serve` through Anthropic's official client (npm `@anthropic-ai/sdk`) on
# /v1/messages: a three-round agent loop with a tool (each call valid for its schema,
# checked with ajv), the streamed message equal to the whole one, errors as the client's
# own classes.  The checks are in tests/serve/anthropic.mjs.  Skips (77) when node or the
# npm registry is missing.
source "$(dirname "$0")/lib.sh"
skip() { echo "skip: $*" >&2; exit 77; }
command -v node >/dev/null || skip "node is not installed"
command -v npm >/dev/null || skip "npm is not installed"

source "$(dirname "$0")/serve_npm.sh"
npm_clients serve-anthropic || skip "npm install @anthropic-ai/sdk failed (is the npm registry reachable?)"
work=$NPM_WORK

source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
start_server serve-anthropic -m "$m" --api-key k3-anthropic-key
node "$K3_ROOT/tests/serve/anthropic.mjs" "$work" "$URL" "$(basename "$m")" k3-anthropic-key ||
  fail "the anthropic client's checks (server log: $(tail -3 "$LOG"))"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
