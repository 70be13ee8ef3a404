#!/usr/bin/python3
"""Compares two fixture folders written by make_fixtures.sh:

    /usr/bin/python3 tests/ref/compare_fixtures.py EXPECTED_DIR ACTUAL_DIR

The checkpoint hashes, the recorded settings and all token ids must be identical; logits
and layer summaries may differ by 1e-5 of their largest magnitude, since torch on another
CPU may round differently.  Prints every difference; exit 0 when none, 1 otherwise.
"""

import json
import os
import sys

import numpy as np

REL_TOL = 1e-5
EXACT_KEYS = ("model_config", "seed", "prompt_ids", "greedy_ids", "dtype", "mla_norm_eps", "kda_l2_eps",
              "router_bias_changed")


def compare_logits(name, expected, actual, vocab):
    a = np.fromfile(expected, dtype="<f4")
    b = np.fromfile(actual, dtype="<f4")
    if a.size != b.size:
        return [f"{name}: {b.size // vocab} rows, expected {a.size // vocab}"]
    if a.size == 0:
        return []
    diff = np.abs(a - b).reshape(-1, vocab)
    scale = float(np.abs(a).max())
    worst = float(diff.max())
    if not worst <= REL_TOL * scale:
        row, col = np.unravel_index(int(np.nanargmax(diff)), diff.shape)
        return [f"{name}: max |diff| {worst:.3g} (row {row}, token {col}) > {REL_TOL} * max|logit| {scale:.4g}"]
    return []


FILES = ("checkpoint.xxh64", "fixture.json", "prompt_logits.f32", "decode_logits.f32")


def compare(expected_dir, actual_dir):
    missing = [os.path.join(d, f) for d in (expected_dir, actual_dir) for f in FILES
               if not os.path.isfile(os.path.join(d, f))]
    if missing:
        return [f"missing {m}" for m in missing]
    problems = []
    with open(os.path.join(expected_dir, "checkpoint.xxh64")) as f:
        want_hash = f.read()
    with open(os.path.join(actual_dir, "checkpoint.xxh64")) as f:
        got_hash = f.read()
    if want_hash != got_hash:
        problems.append("checkpoint.xxh64 differs (k3-uring synth writes another checkpoint):\n"
                        f"  expected:\n    {want_hash.strip().replace(chr(10), chr(10) + '    ')}\n"
                        f"  actual:\n    {got_hash.strip().replace(chr(10), chr(10) + '    ')}")
    with open(os.path.join(expected_dir, "fixture.json")) as f:
        want = json.load(f)
    with open(os.path.join(actual_dir, "fixture.json")) as f:
        got = json.load(f)
    for key in EXACT_KEYS:
        if want.get(key) != got.get(key):
            problems.append(f"fixture.json {key}: {got.get(key)}, expected {want.get(key)}")
    ws, gs = np.array(want["layer_stats"]), np.array(got["layer_stats"])
    if ws.shape != gs.shape:
        problems.append(f"layer_stats shape {gs.shape}, expected {ws.shape}")
    elif not np.abs(ws - gs).max() <= REL_TOL * np.abs(ws).max():
        pos, layer, what = np.unravel_index(int(np.abs(ws - gs).argmax()), ws.shape)
        problems.append(f"layer_stats differ by {np.abs(ws - gs).max():.3g} "
                        f"(row {pos}, layer {layer}, {('rms', 'mean', 'max_abs')[what]})")
    prompt_rows = len(want["prompt_ids"])
    vocab = os.path.getsize(os.path.join(expected_dir, "prompt_logits.f32")) // 4 // prompt_rows
    for name in ("prompt_logits.f32", "decode_logits.f32"):
        problems += compare_logits(name, os.path.join(expected_dir, name), os.path.join(actual_dir, name), vocab)
    return problems


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    problems = compare(sys.argv[1], sys.argv[2])
    for p in problems:
        print(f"DIFFERS: {p}")
    if problems:
        return 1
    print(f"fixtures match: {sys.argv[1]} and {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
