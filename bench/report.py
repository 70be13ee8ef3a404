#!/usr/bin/env python3
"""The bench report: medians (and spreads) per drive count from a bench/run.sh JSON, as a
Markdown table beside the JSON and PNG plots made with gnuplot.  Says which drives were
measured: real ones (DRIVES=, with device and model), emulated, or plain folders.

    bench/report.py bench/results/bench-<stamp>.json
"""
import json
import os
import statistics
import subprocess
import sys


def med(xs):
    return statistics.median(xs)


def spread(xs):
    return f"{min(xs):.3f}-{max(xs):.3f}"


def where(data):
    """One sentence: what the drives were, real or not."""
    mode = data.get("mode") or ("emulated" if all(r["emulated"] for r in data["runs"]) else "plain")
    drives = data.get("drives", [])
    if mode == "drives":
        return "real drives, not emulated: " + ", ".join(
            f"`{d['path']}` ({d['device']}, {d['model']})" for d in drives)
    on = f" on {drives[0]['device']} ({drives[0]['model']})" if drives else ""
    if mode == "emulated":
        return f"emulated drives of {data['knobs']['mbps']} MB/s each{on}"
    return f"plain folders{on}, unthrottled (this machine could not emulate drives)"


def main(path):
    data = json.load(open(path))
    runs = data["runs"]
    model = os.path.basename(data["knobs"]["ckpt"].rstrip("/"))
    counts = sorted({r["drives"] for r in runs})
    by = {n: [r for r in runs if r["drives"] == n] for n in counts}
    rows = []
    for n in counts:
        rs = by[n]
        fio = med([r["fio_Bps"] for r in rs]) / 1e6
        floor = med([r["mb_per_token"] * 1e6 / r["fio_Bps"] for r in rs])
        compute = med([r["sync_s"] - r["sync_stall_s"] for r in rs])
        pred = [r["predict_s"] for r in rs]
        rows.append(dict(n=n, fio=fio, floor=floor, compute=compute,
                         sync=med([r["sync_s"] for r in rs]), pipe=med([r["pipeline_s"] for r in rs]),
                         pred=med(pred), pred_spread=spread(pred),
                         sync_floor=med([r["sync_s"] * r["fio_Bps"] / (r["mb_per_token"] * 1e6) for r in rs]),
                         pipe_floor=med([r["pipeline_s"] * r["fio_Bps"] / (r["mb_per_token"] * 1e6) for r in rs]),
                         pred_floor=med([r["predict_s"] * r["fio_Bps"] / (r["mb_per_token"] * 1e6) for r in rs]),
                         ready=med([r["predict_ready_pct"] for r in rs]),
                         stall=med([r["predict_stall_s"] for r in rs]),
                         floor_budget=med([r["floor_s"] for r in rs]),
                         plan=med([r["plan_s"] for r in rs]),
                         # the planner projects reads overlapping compute, not prediction
                         plan_err=med([abs(r["plan_s"] - r["pipeline_s"]) / r["pipeline_s"] for r in rs]),
                         emulated=all(r["emulated"] for r in rs)))
    base = rows[0]
    base_fio = base["fio"]
    out = [f"# bench {data['stamp']}", "",
           f"`make bench` (bench/run.sh): {model}, {where(data)}; "
           f"{data['knobs']['rounds']} rounds of {data['knobs']['tokens']} tokens, medians; "
           f"calibration MXFP4 {data['calibration']['mxfp4']} / bf16 {data['calibration']['bf16']} GB/s per core.",
           "",
           "Speedups are over the first row, engine against fio; the plan's error is against the "
           "pipelined run (the planner models reads overlapping compute, not prediction).",
           "",
           *([ "On emulated drives the blkio throttle credits back the time a drive sits idle, so "
               "`--sync` (no overlap) lands near the I/O floor too (sync / floor): there, pipelined / "
               "floor shows the read path's efficiency, not overlap.", ""]
             if data.get("mode", "emulated") == "emulated" else []),
           "| drives | fio MB/s | I/O floor s | compute s | sync s | pipelined s | predict s (spread) "
           "| sync / floor | pipelined / floor | predict / floor | speedup / fio's: pipelined, predict | ready % "
           "| plan s (error) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        fio_speed = r["fio"] / base_fio
        pipe_rel = base["pipe"] / r["pipe"] / fio_speed
        pred_rel = base["pred"] / r["pred"] / fio_speed
        plain = not r["emulated"] and data.get("mode") != "drives"
        out.append(f"| {r['n']}{' (plain)' if plain else ''} | {r['fio']:.0f} | {r['floor']:.3f} | "
                   f"{r['compute']:.3f} | {r['sync']:.3f} | {r['pipe']:.3f} | {r['pred']:.3f} ({r['pred_spread']}) | "
                   f"{r['sync_floor']:.2f} | {r['pipe_floor']:.2f} | {r['pred_floor']:.2f} | {pipe_rel:.2f}, {pred_rel:.2f} | "
                   f"{r['ready']:.1f} | {r['plan']:.3f} ({100 * r['plan_err']:.0f}%) |")
    md = os.path.splitext(path)[0] + ".md"
    open(md, "w").write("\n".join(out) + "\n")
    print("\n".join(out))
    dat = os.path.splitext(path)[0] + ".dat"
    with open(dat, "w") as f:
        for r in rows:
            f.write(f"{r['n']} {r['floor']} {r['sync']} {r['pipe']} {r['pred']} {r['stall']} {r['ready']} {r['compute']}\n")
    png = os.path.splitext(path)[0]
    kind = {"drives": "real drives", "emulated": "emulated drives"}.get(data.get("mode", "emulated"), "plain folders")
    script = f"""
set terminal pngcairo size 800,500
set output '{png}-s-per-token.png'
set title '{model} decode on {kind}: s/token against drives'
set xlabel 'drives'; set ylabel 's/token'; set logscale x 2; set key top right; set grid
plot '{dat}' u 1:2 w lp t 'I/O floor (bytes/token / fio)', '' u 1:8 w lp t 'compute', \\
     '' u 1:3 w lp t 'sync', '' u 1:4 w lp t 'pipelined', '' u 1:5 w lp t 'pipelined + prediction'
set output '{png}-stall.png'
set title 'stall (compute waiting for reads), pipelined + prediction'; set ylabel 's/token'
plot '{dat}' u 1:6 w lp t 'stall'
set output '{png}-ready.png'
set title 'records ready when asked (prefetched)'; set ylabel '%'; set yrange [0:100]
plot '{dat}' u 1:7 w lp t 'ready %'
"""
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print(f"report: wrote {md} and {png}-*.png")


if __name__ == "__main__":
    main(sys.argv[1])
