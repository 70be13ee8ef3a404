#!/bin/bash
# Regenerates the small routes files the tests replay, from the real traces in
# ../shared/routing (when present; `make fixtures` runs this): the header and the first
# requests of a file, gzip'd the way the originals are.  The tests never read
# ../shared/routing themselves.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${ROUTING_DIR:-$here/../../../shared/routing}
if [[ ! -f "$src/dsv2lite-prompts-0001-1000.routes.gz" ]]; then
  echo "make_routes.sh: no routing traces at $src: the committed files stay" >&2
  exit 0
fi
# dsv2-r0-7: requests 0-7 of DeepSeek-V2-Lite's prompts (162 tokens, 26 MoE layers, top-6 of 64).
zcat "$src/dsv2lite-prompts-0001-1000.routes.gz" | awk '/^#/ || $1 < 8' |
  gzip -n -9 >"$here/dsv2-r0-7.routes.gz"
echo "make_routes.sh: wrote $here/dsv2-r0-7.routes.gz"
