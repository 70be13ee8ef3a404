#!/bin/bash
# Regenerates the reference fixtures: tests/ref/make_fixtures.sh OUTDIR
#   k3-tiny          the k3-tiny preset: 12 prompt tokens, 32 greedy tokens;
#   k3-tiny-grouped  tests/configs/k3-tiny-grouped.json: k3-tiny with 8 expert groups of which
#                    the router keeps 2 (and use_grouped_topk false, which the router does
#                    not read): 12 prompt tokens, 8 greedy tokens.
# For each:
#   1. ./k3-uring synth writes the seeded checkpoint (build/ref/NAME),
#   2. OUTDIR/NAME/checkpoint.xxh64 pins it, file by file,
#   3. tests/ref/gen_fixtures.py (our PyTorch implementation, from the spec) writes the logits and fixture.json.
# Deterministic: the same binary and reference give the same files.
# Environment: K3 = the binary (default ./k3-uring), K3_REF_CKPT_DIR = where the checkpoints
# go (default build/ref).
set -euo pipefail
export LC_ALL=C   # one file order (ls | sort) on every machine
out=${1:?usage: tests/ref/make_fixtures.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."

seed=1
prompt=5,17,300,1200,42,7,999,2031,0,64,1024,2032
k3=${K3:-./k3-uring}

[[ -x "$k3" ]] || { echo "make_fixtures: no binary $k3 (build it with: make k3-uring)" >&2; exit 1; }
command -v xxhsum >/dev/null || { echo "make_fixtures: xxhsum missing (apt-get install xxhash)" >&2; exit 1; }

# one_fixture NAME CONFIG N: the checkpoint synth makes of CONFIG, and the reference's
# logits for the prompt and N greedy tokens, into OUTDIR/NAME.
one_fixture() {
  local name=$1 config=$2 n=$3
  local ckpt=${K3_REF_CKPT_DIR:-build/ref}/$name
  # A fresh folder, so that no stale file from an earlier synth lands in the hash list.
  rm -rf "$ckpt"
  mkdir -p "$(dirname "$ckpt")" "$out/$name"
  "$k3" synth --config "$config" --seed "$seed" --out "$ckpt"
  # shellcheck disable=SC2046  # one argument per file name, as ls prints them
  (cd "$ckpt" && xxhsum -H1 $(ls | sort)) >"$out/$name/checkpoint.xxh64"
  /usr/bin/python3 tests/ref/gen_fixtures.py --model "$ckpt" --out "$out/$name" \
    --config-name "$name" --seed "$seed" --prompt-ids "$prompt" --n "$n" --dtype float32
}

one_fixture k3-tiny k3-tiny 32
one_fixture k3-tiny-grouped tests/configs/k3-tiny-grouped.json 8
