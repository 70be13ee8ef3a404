#!/bin/bash
# Parity of `k3-uring tokenize` with a real implementation: js-tiktoken (npm), on the
# cl100k_base and o200k_base vocabularies it ships (each with its own regex), plus K3's
# pattern over the o200k ranks.  The cases and the comparison are in
# tests/tokenizer/parity.mjs.  Skips (77) when node or the npm registry is missing.
set -u
skip() { echo "skip: $*" >&2; exit 77; }
command -v node >/dev/null || skip "node is not installed"
command -v npm >/dev/null || skip "npm is not installed"
[[ -x "${K3:-}" ]] || { echo "k3-uring binary not found at '${K3:-}'" >&2; exit 1; }

work="$K3_TEST_TMP/tokenizer-parity"
mkdir -p "$work"
want="$K3_ROOT/tests/tokenizer/package.json"
if ! cmp -s "$want" "$work/package.json" || [[ ! -f "$work/node_modules/js-tiktoken/package.json" ]]; then
  cp "$want" "$work/package.json"
  rm -rf "$work"/cl100k_base "$work"/o200k_base
  if ! (cd "$work" && timeout 180 npm install --no-audit --no-fund --no-package-lock \
          --loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 \
          --fetch-retry-maxtimeout=5000) >"$work/npm.log" 2>&1; then
    grep -m3 'npm error' "$work/npm.log" >&2
    skip "npm install js-tiktoken failed (is the npm registry reachable?)"
  fi
fi
exec node "$K3_ROOT/tests/tokenizer/parity.mjs" "$K3" "$work" "$K3_ROOT"
