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

work="$K3_TEST_TMP/serve-anthropic"
mkdir -p "$work"
want="$K3_ROOT/tests/serve/package.json"
if ! cmp -s "$want" "$work/package.json" ||
   [[ ! -f "$work/node_modules/@anthropic-ai/sdk/package.json" || ! -f "$work/node_modules/ajv/package.json" ]]; then
  cp "$want" "$work/package.json"
  if ! (cd "$work" && timeout 180 npm install --no-audit --no-fund --no-package-lock \
          --loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 \
          --fetch-retry-maxtimeout=5000) >"$work/npm.log" 2>&1; then
    grep -m3 'npm error' "$work/npm.log" >&2
    skip "npm install @anthropic-ai/sdk failed (is the npm registry reachable?)"
  fi
fi

source "$(dirname "$0")/serve_lib.sh"
m=$(tiny_model)
start_server serve-anthropic -m "$m" --api-key k3-anthropic-key
node "$K3_ROOT/tests/serve/anthropic.mjs" "$work" "$URL" "$(basename "$m")" k3-anthropic-key ||
  fail "the anthropic client's checks (server log: $(tail -3 "$LOG"))"
stop_server TERM
[[ $STOP_RC == 0 ]] || fail "SIGTERM: exit $STOP_RC"
finish
