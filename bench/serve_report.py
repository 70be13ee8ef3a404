#!/usr/bin/python3
"""The serve benchmark's table: rows of bench/serve_clients.py (one per client count, a
fresh server each) into bench/results/serve-STAMP.{json,md}.

Per client count B: decode tokens/s (the server's decode rows over its decode seconds),
the window's tokens/s as the clients saw them, time to first token, bytes read per
token in decode steps, the share of decode time compute waited for reads and the compute
per token (decode time less that wait, over the rows: where it nears the read time per
token, compute takes over), the measured union of experts per MoE layer and decode step beside the
uniform-routing expectation E*(1-(1-k/E)^B), and the goal ratio
    tps(B) / ((k*R / union(B)) * tps(1))
with R the mean rows of a decode step (B once every client decodes; less while prompts
join and streams end), which is 1 when every expert read saved becomes throughput
(goal: >= 0.9 while reads bound the step).  Usage: serve_report.py ROWS.jsonl META.json OUT_STEM
"""
import json
import sys


def main():
    rows_path, meta_path, stem = sys.argv[1:4]
    meta = json.load(open(meta_path))
    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    E, k = meta["experts"], meta["top_k"]
    base = None
    table = []
    for r in rows:
        m, B = r["metrics"], r["clients"]
        steps = m["decode_steps_total"]
        layers = [v for name, v in m.items() if name.startswith("decode_layer_union_experts{")]
        union = m["decode_experts_total"] / steps / len(layers)
        tps = m["decode_rows_total"] / m["decode_seconds_total"]
        if base is None and B == 1:
            base = tps
        rows_per_step = m["decode_rows_total"] / steps
        stall = m["decode_stall_seconds_total"]
        ideal = k * rows_per_step / union * base if base else None
        table.append({
            "clients": B, "decode_tps": round(tps, 4), "window_tps": r["window_tps"],
            "aggregate_tps": r["aggregate_tps"], "ttft_median_s": r["ttft_median_s"],
            "ttft_max_s": r["ttft_max_s"], "rows_per_step": round(rows_per_step, 3),
            "stall_share": round(stall / m["decode_seconds_total"], 3),
            "compute_s_per_token": round((m["decode_seconds_total"] - stall) / m["decode_rows_total"], 4),
            "mb_per_token": round(m["decode_read_bytes_total"] / m["decode_rows_total"] / 1e6, 2),
            "union": round(union, 2), "union_per_layer": [round(v, 2) for v in layers],
            "union_uniform": round(E * (1 - (1 - k / E) ** B), 2),
            "goal_ratio": round(tps / ideal, 3) if ideal else None,
        })
    json.dump({**meta, "rows": table, "clients_raw": rows}, open(stem + ".json", "w"), indent=1)
    with open(stem + ".md", "w") as f:
        f.write(f"k3-uring serve, {meta['what']}\n\n")
        f.write("| clients | decode tok/s | x one stream | goal ratio | union/layer (measured) | "
                "uniform E(1-(1-k/E)^B) | MB read/token | rows/step | "
                "waiting for reads | compute s/token | TTFT median / max s |\n|" + "---|" * 11 + "\n")
        for t in table:
            ratio = f"{t['goal_ratio']:.2f}" if t["goal_ratio"] is not None else "-"
            f.write(f"| {t['clients']} | {t['decode_tps']:.3f} | "
                    f"{t['decode_tps'] / base:.2f} | {ratio} | {t['union']:.1f} | "
                    f"{t['union_uniform']:.1f} | {t['mb_per_token']:.1f} | {t['rows_per_step']:.2f} | "
                    f"{t['stall_share']:.0%} | {t['compute_s_per_token']:.3f} | {t['ttft_median_s']:.2f} / {t['ttft_max_s']:.2f} |\n"
                    if base else "")
    print(open(stem + ".md").read(), end="")


if __name__ == "__main__":
    main()
