#!/bin/bash
# k3-slice (every width of the released K3, 4 layers) against tests/ref, our own PyTorch
# implementation of the model written from the spec:
#   tests/ref/check_slice.sh [CHECKPOINT]        (or: make check-slice)
# 1. the checkpoint: CHECKPOINT (default $K3_SLICE, else bench/lib.sh's: SLICE, else DATA's
#    k3-slice), written by
#    `k3-uring synth --config k3-slice --seed 1` when missing (13.75 GB; refused when it
#    would leave less than $KEEP_FREE_GB free);
# 2. the reference (gen_fixtures.py, float32, one torch thread) writes the prompt and decode
#    logits, greedy ids and per-layer summaries; its peak anonymous RSS is reported (the
#    shards are mapped: their pages are page cache, not the reference's memory);
# 3. the engine runs the same ids (-m CHECKPOINT, or DRIVES=a,b for a pack of it);
# 4. compare_engine.py: greedy ids identical, logits within REL_TOL of max|logit|, layer rms
#    within 1e-3.
# Long-running (minutes: the reference widens K3's 10.4 GB trunk at every call), so not part
# of `make test`.  Knobs (environment): K3 binary (./k3-uring), PROMPT ids
# (163584,17,300,1200,42,150000), N greedy tokens (4), REL_TOL (1e-4), THREADS engine threads
# (2), OUT folder (build/ref/k3-slice-check), DRIVES (empty: -m), KEEP_FREE_GB (20).
# Exit 0 pass, 1 fail, 77 skip (no torch, or no room for the checkpoint).
set -euo pipefail
cd "$(dirname "$0")/../.."
prog=check_slice
source bench/lib.sh
k3=${K3:-./k3-uring}
ckpt=${1:-${K3_SLICE:-$slice_ckpt}}
prompt=${PROMPT:-163584,17,300,1200,42,150000}
n=${N:-4}
rel_tol=${REL_TOL:-1e-4}
threads=${THREADS:-2}
out=${OUT:-build/ref/k3-slice-check}
keep_free_gb=${KEEP_FREE_GB:-20}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

say() { echo "check_slice: $*" >&2; }
[[ -x "$k3" ]] || { say "no binary $k3 (make k3-uring)"; exit 1; }
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null ||
  { say "skip: /usr/bin/python3 cannot import torch and numpy (make deps-ref)"; exit 77; }

if [[ ! -f "$ckpt/config.json" ]]; then
  mkdir -p "$(dirname "$ckpt")"
  free_gb=$(df -BG --output=avail "$(dirname "$ckpt")" | tail -1 | tr -dc 0-9)
  if ((free_gb - 14 < keep_free_gb)); then
    say "skip: $ckpt needs 14 GB and $(dirname "$ckpt") has ${free_gb} GB free" \
        "(KEEP_FREE_GB=$keep_free_gb must stay free)"
    exit 77
  fi
  say "writing $ckpt (13.75 GB)"
  "$k3" synth --config k3-slice --seed 1 --out "$ckpt" -q
fi

rm -rf "$out"
mkdir -p "$out/ref" "$out/engine"

# The reference, its peak anonymous RSS sampled from /proc every half second.
say "reference: $(uptime)"
start=$(date +%s.%N)
/usr/bin/python3 tests/ref/gen_fixtures.py --model "$ckpt" --out "$out/ref" --config-name k3-slice \
  --seed 1 --prompt-ids "$prompt" --n "$n" --dtype float32 &
pid=$!
peak_kb=0
while kill -0 "$pid" 2>/dev/null; do
  kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
  ((${kb:-0} > peak_kb)) && peak_kb=$kb
  sleep 0.5
done
wait "$pid" || { say "FAIL: the reference (gen_fixtures.py) failed"; exit 1; }
ref_s=$(echo "$(date +%s.%N) - $start" | bc)
say "reference: ${ref_s} s, peak anonymous RSS $((peak_kb / 1024)) MB"

if [[ -n "${DRIVES:-}" ]]; then src=(--drives "$DRIVES"); else src=(-m "$ckpt"); fi
say "engine: ${src[*]}, $threads threads: $(uptime)"
start=$(date +%s.%N)
"$k3" run "${src[@]}" --ids "$prompt" -n "$n" --ignore-eos --print-ids -q -t "$threads" \
  --logits-out "$out/engine/logits.f32" --dump-layers "$out/engine/layers.json" \
  >"$out/engine/ids.txt" || { say "FAIL: k3-uring run failed"; exit 1; }
say "engine: $(echo "$(date +%s.%N) - $start" | bc) s"

/usr/bin/python3 tests/ref/compare_engine.py "$out/ref" "$out/engine" --rel-tol "$rel_tol"
