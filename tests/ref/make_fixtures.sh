#!/bin/bash
# Regenerates the reference fixtures of k3-tiny: tests/ref/make_fixtures.sh OUTDIR
#   1. ./k3-uring synth writes the seeded checkpoint (build/ref/k3-tiny),
#   2. OUTDIR/k3-tiny/checkpoint.xxh64 pins it, file by file,
#   3. the PyTorch reference (tests/ref/gen_fixtures.py) writes the logits and fixture.json.
# Deterministic: the same binary and reference give the same files.
# Environment: K3 = the binary (default ./k3-uring), K3_REF_CKPT_DIR = where the checkpoint
# goes (default build/ref).
set -euo pipefail
export LC_ALL=C   # one file order (ls | sort) on every machine
out=${1:?usage: tests/ref/make_fixtures.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."

config=k3-tiny
seed=1
prompt=5,17,300,1200,42,7,999,2031,0,64,1024,2032
n=32
k3=${K3:-./k3-uring}
ckpt=${K3_REF_CKPT_DIR:-build/ref}/$config

[[ -x "$k3" ]] || { echo "make_fixtures: no binary $k3 (build it with: make k3-uring)" >&2; exit 1; }
command -v xxhsum >/dev/null || { echo "make_fixtures: xxhsum missing (apt-get install xxhash)" >&2; exit 1; }

# A fresh folder, so that no stale file from an earlier synth lands in the hash list.
rm -rf "$ckpt"
mkdir -p "$(dirname "$ckpt")" "$out/$config"
"$k3" synth --config "$config" --seed "$seed" --out "$ckpt"
# shellcheck disable=SC2046  # one argument per file name, as ls prints them
(cd "$ckpt" && xxhsum -H1 $(ls | sort)) >"$out/$config/checkpoint.xxh64"
/usr/bin/python3 tests/ref/gen_fixtures.py --model "$ckpt" --out "$out/$config" \
  --config-name "$config" --seed "$seed" --prompt-ids "$prompt" --n "$n" --dtype float32
