# Shared by the serve tests that drive the server with npm clients (sourced, not run):
# npm_clients NAME installs tests/serve/package.json's pinned packages into
# $K3_TEST_TMP/NAME once (again when the file changes) and sets NPM_WORK; 1 when npm
# cannot install them.
npm_clients() {
  NPM_WORK="$K3_TEST_TMP/$1"
  mkdir -p "$NPM_WORK"
  local want="$K3_ROOT/tests/serve/package.json"
  cmp -s "$want" "$NPM_WORK/package.json" && [[ -f "$NPM_WORK/node_modules/.installed" ]] && return 0
  cp "$want" "$NPM_WORK/package.json"
  if ! (cd "$NPM_WORK" && timeout 180 npm install --no-audit --no-fund --no-package-lock \
          --loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 \
          --fetch-retry-maxtimeout=5000) >"$NPM_WORK/npm.log" 2>&1; then
    grep -m3 'npm error' "$NPM_WORK/npm.log" >&2
    return 1
  fi
  touch "$NPM_WORK/node_modules/.installed"
}
