#!/bin/bash
# Constrained decoding: the grammar mask's ms per token at K3's vocabulary size (163,840
# ids) at positions of a tools and a response_format grammar, on the synthesized
# vocabulary and on one stressed with punctuation (bench/grammar.c says how each is made).
# usage: bench/grammar.sh [--reps N] [--tokenizer DIR]   (DIR: a real tiktoken.model +
#        tokenizer_config.json, measured instead of the two synthetic ones)
# Writes bench/results/grammar-<date>.csv and prints the tables.  Seconds, one core.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/build/rel/bench/grammar"
stamp=$(date -u +%Y%m%d-%H%M%S)
out="$root/bench/results/grammar-$stamp.csv"
mkdir -p "$root/bench/results"
make -C "$root" --no-print-directory build/rel/bench/grammar
for a in "$@"; do [[ $a == --help ]] && exec "$bin" --help; done
reps=200 tokenizer=
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --tokenizer) tokenizer=$2; shift 2 ;;
    *) echo "grammar.sh: unknown option $1 (--help)" >&2; exit 1 ;;
  esac
done
echo "grammar.sh: reps=$reps (default 200) tokenizer=${tokenizer:-(none: synth and stress)}" >&2
echo "grammar.sh: $(lscpu | sed -n 's/^Model name: *//p'); $(git -C "$root" log -1 --format='commit %h' 2>/dev/null || echo 'no git')"
if [[ -n $tokenizer ]]; then
  "$bin" --tokenizer "$tokenizer" --reps "$reps" --csv "$out"
else
  "$bin" --vocab synth --reps "$reps" --csv "$out.synth"
  "$bin" --vocab stress --reps "$reps" --csv "$out.stress"
  { cat "$out.synth"; tail -n +2 "$out.stress"; } >"$out" && rm -f "$out.synth" "$out.stress"
fi
echo "grammar.sh: wrote $out"
