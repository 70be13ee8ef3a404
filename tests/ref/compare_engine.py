#!/usr/bin/python3
"""Compares one engine run with the reference's fixture of the same checkpoint and prompt:

    /usr/bin/python3 tests/ref/compare_engine.py FIXTURE_DIR ENGINE_DIR [--rel-tol 1e-4]

FIXTURE_DIR is what gen_fixtures.py wrote; ENGINE_DIR holds what `k3-uring run --ids P
-n N --print-ids --logits-out logits.f32 --dump-layers layers.json` wrote (ids.txt is its
stdout).  The greedy ids must be identical; every logit within rel_tol of the largest
reference logit; the per-layer rms within 1e-3 of the reference's (the first layer that is
not is named).  Prints the measured differences and the smallest top-2 logit gap (how
much rounding the greedy comparison could take); exit 0 when all hold, 1 otherwise.
"""

import argparse
import json
import os
import sys

import numpy as np

LAYER_RMS_REL_TOL = 1e-3


def load_fixture(d):
    with open(os.path.join(d, "fixture.json")) as f:
        fx = json.load(f)
    pre = np.fromfile(os.path.join(d, "prompt_logits.f32"), dtype="<f4")
    dec = np.fromfile(os.path.join(d, "decode_logits.f32"), dtype="<f4")
    vocab = pre.size // len(fx["prompt_ids"])
    return fx, np.concatenate([pre, dec]).reshape(-1, vocab)


def load_engine(d, vocab):
    with open(os.path.join(d, "ids.txt")) as f:
        ids = [int(t) for t in f.read().replace(",", " ").split()]
    logits = np.fromfile(os.path.join(d, "logits.f32"), dtype="<f4").reshape(-1, vocab)
    with open(os.path.join(d, "layers.json")) as f:
        layers = np.array(json.load(f)["layer_stats"], dtype=np.float64)
    return ids, logits, layers


def top2_gap(rows):
    top2 = np.sort(rows, axis=1)[:, -2:]
    return float((top2[:, 1] - top2[:, 0]).min())


def first_layer_divergence(ref, got, rows):
    """(row, layer, ref rms, engine rms) of the first layer summary whose rms differs by
    more than LAYER_RMS_REL_TOL, or None."""
    for r in range(rows):
        for l in range(ref.shape[1]):
            if abs(got[r, l, 0] - ref[r, l, 0]) > LAYER_RMS_REL_TOL * abs(ref[r, l, 0]):
                return r, l, ref[r, l, 0], got[r, l, 0]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture")
    ap.add_argument("engine")
    ap.add_argument("--rel-tol", type=float, default=1e-4, help="max |dlogit| / max|logit|")
    args = ap.parse_args()
    fx, want = load_fixture(args.fixture)
    ids, got, layers = load_engine(args.engine, want.shape[1])
    problems = []
    if ids != fx["greedy_ids"]:
        problems.append(f"greedy ids {ids}, reference {fx['greedy_ids']}")
    if got.shape != want.shape:
        problems.append(f"engine wrote {got.shape[0]} logit rows, reference {want.shape[0]}")
    else:
        if not np.isfinite(got).all():
            problems.append("non-finite engine logits")
        diff = np.abs(got.astype(np.float64) - want)
        scale = float(np.abs(want).max())
        worst = float(diff.max())
        row = int(np.unravel_index(int(diff.argmax()), diff.shape)[0])
        print(f"logits: {want.shape[0]} rows x {want.shape[1]}, max|logit| {scale:.5g}, "
              f"max |dlogit| {worst:.3g} (row {row}) = {worst / scale:.3g} of max|logit| "
              f"(tolerance {args.rel_tol:g}); per row: "
              + " ".join(f"{d:.2g}" for d in diff.max(axis=1) / scale))
        if not worst <= args.rel_tol * scale:
            problems.append(f"max |dlogit| {worst:.3g} > {args.rel_tol:g} x {scale:.4g}")
    ref_layers = np.array(fx["layer_stats"], dtype=np.float64)
    rows = min(len(ref_layers), len(layers))
    if rows and ref_layers.shape[1:] == layers.shape[1:]:
        rel = np.abs(layers[:rows, :, 0] - ref_layers[:rows, :, 0]) / np.abs(ref_layers[:rows, :, 0])
        print(f"layer rms: {rows} rows x {ref_layers.shape[1]} summaries, max relative difference "
              "by layer: " + " ".join(f"{v:.2g}" for v in rel.max(axis=0)))
        div = first_layer_divergence(ref_layers, layers, rows)
        if div:
            problems.append("first layer divergence: row %d layer %d: rms %.6g, reference %.6g"
                            % (div[0], div[1], div[3], div[2]))
    else:
        problems.append(f"layer summaries: engine {layers.shape}, reference {ref_layers.shape}")
    print(f"greedy ids: engine {ids}, reference {fx['greedy_ids']}; smallest top-2 gap of the "
          f"reference {top2_gap(want):.3g}")
    for p in problems:
        print(f"DIFFERS: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
