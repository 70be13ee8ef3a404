#!/bin/bash
# The committed fixtures (k3-tiny, k3-tiny-grouped) still come out of `k3-uring synth` +
# tests/ref (our own PyTorch implementation of the model, written from the spec):
# runs tests/ref's self-checks, regenerates the fixtures into $K3_TEST_TMP and compares
# (identical checkpoint hashes and token ids; logits within 1e-5 of max|logit|).
# Exit 0 pass, 1 fail, 77 skip when /usr/bin/python3 has no torch (make deps-ref).
set -u
cd "${K3_ROOT:-$(dirname "$0")/../..}" || exit 1
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  echo "skip: /usr/bin/python3 cannot import torch and numpy (make deps-ref)" >&2
  exit 77
fi
out="${K3_TEST_TMP:-build/test-tmp}/fixtures-drift"
rm -rf "$out"
mkdir -p "$out"

# A drift check against a reference that fails its own checks would mean nothing.
/usr/bin/python3 tests/ref/test_ref.py || { echo "FAIL: tests/ref/test_ref.py"; exit 1; }
K3_REF_CKPT_DIR="$out/checkpoint" tests/ref/make_fixtures.sh "$out" ||
  { echo "FAIL: tests/ref/make_fixtures.sh did not complete"; exit 1; }
rc=0
for name in k3-tiny k3-tiny-grouped; do
  /usr/bin/python3 tests/ref/compare_fixtures.py "fixtures/$name" "$out/$name" || rc=1
done
exit $rc
