#!/usr/bin/python3
"""Writes the reference fixtures of a checkpoint: prompt and decode logits, the greedy
continuation and per-layer hidden-state summaries (see tests/ref/README.md).

    /usr/bin/python3 tests/ref/gen_fixtures.py --model DIR --out DIR \
        [--prompt-ids 1,2,3] [--n 32] [--dtype float32|float64] [--config-name k3-tiny] [--seed 1]

Fails (exit 1, nothing written) when the fixture would be useless as a check: a
non-finite logit, no routing that the router bias changed, or the prefill and
incremental paths disagreeing beyond 1e-4 of max|logit|.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_ref  # noqa: E402

PREFILL_VS_INCREMENTAL_REL_TOL = 1e-4


def greedy(row):
    """argmax of a float32 logits row; np.argmax returns the lowest index among ties."""
    return int(np.argmax(row))


def top2_margin(rows):
    """Smallest gap between the best and second-best logit over the rows: how much rounding
    a greedy comparison can take."""
    top2 = np.sort(rows, axis=1)[:, -2:]
    return float((top2[:, 1] - top2[:, 0]).min())


def write_fixture_json(fixture, f):
    """One key per line with a compact value, layer_stats one position per line, so that a
    diff of two fixtures stays readable."""
    items = []
    for key, value in fixture.items():
        if key == "layer_stats":
            rows = ",\n  ".join(json.dumps(row) for row in value)
            items.append(f' "{key}": [\n  {rows}\n ]')
        else:
            items.append(f" {json.dumps(key)}: {json.dumps(value)}")
    f.write("{\n" + ",\n".join(items) + "\n}\n")


def as_f32(logits):
    return logits.detach().to(torch.float32).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint folder as shipped")
    ap.add_argument("--out", required=True, help="folder for the fixture files")
    ap.add_argument("--prompt-ids", default="5,17,300,1200,42,7,999,2031,0,64,1024,2032")
    ap.add_argument("--n", type=int, default=32, help="greedy tokens to generate")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--config-name", help="recorded as model_config (default: the model folder's name)")
    ap.add_argument("--seed", type=int, help="synth seed of the checkpoint, recorded as seed")
    args = ap.parse_args()

    # One thread: the summation order inside torch then does not depend on the core count.
    torch.set_num_threads(1)
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    if not prompt or args.n < 1:
        sys.exit("gen_fixtures: need a non-empty prompt and --n >= 1")
    model = k3_ref.K3Reference(args.model, dtype=getattr(torch, args.dtype))
    for note in model.audit_notes:
        print(f"gen_fixtures: note: {note}", file=sys.stderr)
    if any(t < 0 or t >= model.cfg.vocab_size for t in prompt):
        sys.exit(f"gen_fixtures: prompt ids must lie in [0, {model.cfg.vocab_size})")

    # Path (a): the whole prompt at once; then path (b) for the greedy continuation.
    pre, state = model.prefill(prompt)
    prompt_logits = as_f32(pre.logits)
    stats = [pre.layer_stats]
    bias_changed = pre.bias_changed
    ids = [greedy(prompt_logits[-1])]
    decode_rows = []
    for _ in range(args.n - 1):
        step = model.decode(ids[-1], state)
        decode_rows.append(as_f32(step.logits)[0])
        stats.append(step.layer_stats)
        bias_changed += step.bias_changed
        ids.append(greedy(decode_rows[-1]))
    decode_logits = np.array(decode_rows, dtype=np.float32).reshape(args.n - 1, model.cfg.vocab_size)

    # The prompt again, one token at a time: the two paths must agree.
    inc_state = model.new_state()
    inc = np.concatenate([as_f32(model.decode(t, inc_state).logits) for t in prompt])
    path_diff = float(np.abs(inc - prompt_logits).max())

    failures = []
    all_logits = np.concatenate([prompt_logits, decode_logits])
    if not np.isfinite(all_logits).all():
        failures.append("non-finite logits")
    max_logit = float(np.abs(all_logits).max())
    if bias_changed == 0:
        failures.append("router_bias_changed == 0: the bias never changed an expert set, "
                        "so the fixture cannot tell bias-for-selection from no bias")
    if not path_diff <= PREFILL_VS_INCREMENTAL_REL_TOL * max_logit:
        failures.append(f"prefill and incremental paths differ by {path_diff:.3g} "
                        f"(> {PREFILL_VS_INCREMENTAL_REL_TOL} * max|logit| {max_logit:.4g})")
    if failures:
        for f in failures:
            print(f"gen_fixtures: FAIL: {f}", file=sys.stderr)
        sys.exit(1)

    zeroed = sum(model.e8m0_255.values())
    if zeroed:
        print(f"gen_fixtures: note: {zeroed} MXFP4 groups had scale code 255 (zeroed)", file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    prompt_logits.astype("<f4").tofile(os.path.join(args.out, "prompt_logits.f32"))
    decode_logits.astype("<f4").tofile(os.path.join(args.out, "decode_logits.f32"))
    layer_stats = torch.cat(stats).to(torch.float32).tolist()   # [rows, L + 1, 3]
    fixture = {
        "model_config": args.config_name or os.path.basename(os.path.normpath(args.model)),
        "seed": args.seed,
        "prompt_ids": prompt,
        "greedy_ids": ids,
        "dtype": args.dtype,
        "mla_norm_eps": model.mla_norm_eps,
        "kda_l2_eps": model.kda_l2_eps,
        "router_bias_changed": bias_changed,
        "layer_stats": layer_stats,
        "prefill_vs_incremental_max_abs": path_diff,
    }
    with open(os.path.join(args.out, "fixture.json"), "w") as f:
        write_fixture_json(fixture, f)
    print(f"gen_fixtures: {len(prompt)} prompt + {args.n - 1} decode rows, max|logit| {max_logit:.6g}, "
          f"router_bias_changed {bias_changed}, prefill vs incremental {path_diff:.3g}, "
          f"smallest top-2 logit gap {top2_margin(all_logits):.3g}, greedy {ids[:8]}...")


if __name__ == "__main__":
    main()
