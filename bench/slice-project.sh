#!/bin/bash
# Full K3 projected from k3-slice's measured per-layer times.
#
# k3-slice has every width of the released K3 in 4 layers (KDA + dense, KDA + MoE twice,
# MLA + MoE), so one decode step of it times each kind of K3 layer at K3's widths.  This
# script
#   1. runs k3-slice with the whole trunk resident (a checkpoint folder: -m; a pack:
#      --drives D), THREADS threads, --stats and --trace (skipped when TRACE and STATS name
#      an earlier run's trace and stderr).  By default with reads free: a budget that
#      caches every record (CACHED_RAM) and a prompt of WARM_TOKENS positions whose prefill
#      reads every expert, so the decode steps read nothing and their pieces are compute
#      alone.  Measured while reading (CACHED_RAM=0: the trunk resident, 843 MB of records
#      a token), a 2-core box's pieces also carry the read path's CPU (completions,
#      checksums, a checkpoint's span copies), which a box of many cores does not pay on
#      its compute (the two compared: bench/results/slice-project-20261201-201220.json);
#   2. measures this disk's read rate (skipped when DISK_GBPS is given; lib.sh read_rate):
#      on a pack, `k3-uring iobench --ram floor --no-cache` (O_DIRECT reads of trunk
#      segments and 16 random records per MoE layer); on a checkpoint, fio (O_DIRECT, 1 MiB
#      reads 16 deep) over the experts' last shard;
#   3. takes from the trace, per decode token: the embedding, each layer's attention (KDA,
#      MLA), the dense MLP, the MoE's shared experts + latent projection, its routed
#      experts (team spans, per expert), the rest of the MoE span (router, prediction, up
#      projection; the step's stall on reads, from the closing statistics, taken out of
#      it: records are waited for only there), the rest of each layer (Attention
#      Residuals, norms), and the output head;
#   4. composes full K3 (the `k3` preset: 93 layers, 69 KDA + 24 MLA, 92 MoE layers of 896
#      experts, 16 active) from those pieces and prints s/token at THREADS threads here and
#      on 2 x EPYC 7763 with 8 Gen4 drives, reads from (a) this disk and (b) 8 x 7 GB/s,
#      with every assumption printed beside the table;
#   5. writes bench/results/slice-project-DATE.json: the measured pieces, the projection,
#      and the per-core rates `k3-uring plan --calibration FILE` reads
#      (mxfp4_gbps_per_core, bf16_gbps_per_core), then prints plan's projection with them.
#
# usage: bench/slice-project.sh [MODEL]    MODEL: k3-slice's checkpoint folder, or its pack's
#        drive folders (D0,D1,..); default SLICE, else DATA's k3-slice (bench/lib.sh)
# Knobs (environment, with defaults):
#   K3=./k3-uring  THREADS=2  TOKENS=6 (generated; TOKENS-1 decode steps are measured)
#   CACHED_RAM=14G (0: measure while reading)  WARM_TOKENS=48 (each prefill position
#   routes 16 of a layer's 64 experts: 48 leave one unread with odds 1e-6 a layer)
#   PROMPT=163584,17,300,1200 (CACHED_RAM=0)  KERNELS=auto (K3_KERNELS of the run: avx2
#   times the AVX2 kernels an EPYC 7763 would run)
#   TRACE= STATS= LOAD= (an earlier run's --trace file, stderr and load average: no new run)
#   DISK_GBPS= (no disk measurement)  IOBENCH_TOKENS=3
#   EPYC_CORES=128 EPYC_NODES=2 EPYC_MEM_GBPS=150 (per node) EPYC_DRIVES=8 EPYC_DRIVE_GBPS=7
#   READ_CPU_S_PER_GB=0.42 (the read path's CPU, core seconds per GB read: iobench prints it)
#   STAT=min (each piece's least-disturbed step; mean: as measured under the box's load)
#   OUT=bench/results/slice-project-DATE.json
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prog=slice-project.sh
source "$root/bench/lib.sh"
model=${1:-$slice_ckpt}
k3=$(realpath "${K3:-$root/k3-uring}")
threads=${THREADS:-2}
tokens=${TOKENS:-6}
prompt=${PROMPT:-163584,17,300,1200}
stamp=$(date -u +%Y%m%d-%H%M%S)
out=${OUT:-$root/bench/results/slice-project-$stamp.json}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[[ -x $k3 ]] || die "no binary $k3 (make k3-uring)"
command -v python3 >/dev/null || die "python3 missing"
load_run=$(uptime | sed 's/.*load average: //')
if [[ -n ${TRACE:-} && -n ${STATS:-} ]]; then
  trace=$TRACE stats=$STATS
  cmd="(earlier run: TRACE=$TRACE STATS=$STATS)"
  load_run=${LOAD:-"not recorded (an earlier run; LOAD= to give it)"}
else
  [[ -d ${model%%,*} ]] || die "no k3-slice at $model (k3-uring synth --config k3-slice --seed 1 --out DIR)"
  if [[ -f $model/config.json ]]; then src=(-m "$model"); else src=(--drives "$model"); fi
  cached_ram=${CACHED_RAM:-14G}
  if [[ $cached_ram == 0 ]]; then
    src+=(--ram trunk)
  else
    need_ram "CACHED_RAM=$cached_ram (0: measure while reading)" "$cached_ram"
    src+=(--ram "$cached_ram" --predict off)
    prompt=$(seq -s, 1000 $((1000 + ${WARM_TOKENS:-48} - 1)))
  fi
  trace=$tmp/trace.json stats=$tmp/stats.txt
  cmd="K3_KERNELS=${KERNELS:-auto} $k3 run ${src[*]} -t $threads --ids $prompt -n $tokens --ignore-eos --print-ids --stats --trace $trace"
  say "measuring: $cmd (load $load_run)"
  K3_KERNELS=${KERNELS:-auto} "$k3" run "${src[@]}" -t "$threads" --ids "$prompt" \
    -n "$tokens" --ignore-eos --print-ids --stats --trace "$trace" >/dev/null 2>"$stats" ||
    { cat "$stats" >&2; die "the k3-slice run failed"; }
  load_run="$load_run .. $(uptime | sed 's/.*load average: //')"
  read_records=$(decode_records_read <"$stats")
  [[ $cached_ram == 0 ]] || ((read_records == 0)) ||
    die "the decode steps read $read_records records: raise CACHED_RAM ($cached_ram) or WARM_TOKENS"
fi
if [[ -n ${DISK_GBPS:-} ]]; then
  disk_gbps=$DISK_GBPS disk_src="given (DISK_GBPS)"
else
  IFS=$'\t' read -r disk_gbps disk_src < <(read_rate "$k3" "$model")
  [[ -n $disk_gbps ]] || die "no read rate for $model"
fi
say "this disk: $disk_gbps GB/s ($disk_src)"

python3 - "$trace" "$stats" "$out" "$threads" "$disk_gbps" "$disk_src" "$cmd" "$load_run" \
  "${EPYC_CORES:-128}" "${EPYC_NODES:-2}" "${EPYC_MEM_GBPS:-150}" "${EPYC_DRIVES:-8}" \
  "${EPYC_DRIVE_GBPS:-7}" "${KERNELS:-auto}" "${STAT:-min}" "${READ_CPU_S_PER_GB:-0.42}" <<'EOF'
import json, re, statistics, sys
(trace_path, stats_path, out_path, threads, disk_gbps, disk_src, cmd, load, epyc_cores, epyc_nodes,
 epyc_mem, epyc_drives, epyc_drive_gbps, kernels, stat, read_cpu) = sys.argv[1:]
read_cpu = float(read_cpu)
threads, disk_gbps = int(threads), float(disk_gbps)
epyc_cores, epyc_nodes, epyc_mem = int(epyc_cores), int(epyc_nodes), float(epyc_mem)
epyc_drives, epyc_drive_gbps = int(epyc_drives), float(epyc_drive_gbps)

# ---- k3-slice and K3 as the presets define them (engine/model/config_presets.c) ----
H, V, P, E_K3, E_SLICE, TOPK = 7168, 163840, 12288, 896, 64, 16
RECORD = 17547264                                  # bytes of one MXFP4 expert record
BYTES = {                                          # bf16 weight bytes each piece reads
    "kda": 2 * (4 * P * H + 128 * H + P * 128 + 96 * H + H * P),
    "mla": 2 * (1536 * H + 96 * 192 * 1536 + 576 * H + 96 * 256 * 512 + 2 * 96 * 128 * H),
    "dense": 2 * 3 * 33792 * H,
    "moe_trunk": 2 * (3 * 6144 * H + 2 * 3584 * H),
    "head": 2 * V * H,
}
K3 = {"layers": 93, "kda_moe": 68, "mla_moe": 24, "moe": 92}   # layer 0: KDA + dense
ROUTER_EXTRA = 2 * (E_K3 - E_SLICE) * H * 2        # bytes: router + the prediction's pass

# ---- the trace: compute spans (B/E, nested) and the teams' expert spans (X) ----
events = json.load(open(trace_path))["traceEvents"]
stack, spans, experts = [], [], []
for ev in events:
    ph = ev.get("ph")
    if ph == "B":
        stack.append(ev)
    elif ph == "E":
        b = stack.pop()
        spans.append({"name": b["name"], "args": b.get("args", {}), "ts": b["ts"],
                      "dur": ev["ts"] - b["ts"], "depth": len(stack)})
    elif ph == "X" and ev.get("name") == "expert":
        experts.append(ev)
tokens = [s for s in spans if s["name"] == "token"]
if not tokens:
    sys.exit("slice-project: the trace has no decode token spans (TOKENS >= 2?)")

def inside(s, outer):
    return outer["ts"] <= s["ts"] and s["ts"] + s["dur"] <= outer["ts"] + outer["dur"] + 0.05

per = []                                           # per decode token: {piece: seconds}
for tok in tokens:
    mine = [s for s in spans if s is not tok and inside(s, tok)]
    layers = sorted((s for s in mine if s["name"] == "layer"), key=lambda s: s["args"]["layer"])
    row = {"token": tok["dur"] / 1e6, "layers": []}
    for ly in layers:
        l = ly["args"]["layer"]
        sub = [s for s in mine if inside(s, ly) and s is not ly]
        attn = next(s for s in sub if s["name"] in ("KDA", "MLA"))
        ffn = next(s for s in sub if s["name"] in ("MLP", "MoE"))
        sl = sum(s["dur"] for s in sub if s["name"] == "shared + latent")
        ex = [x["dur"] for x in experts if x["args"].get("layer") == l and inside(x, ly)]
        row["layers"].append({"layer": l, "kind": attn["name"], "ffn": ffn["name"],
                              "layer_s": ly["dur"] / 1e6, "attn_s": attn["dur"] / 1e6,
                              "ffn_s": ffn["dur"] / 1e6, "shared_latent_s": sl / 1e6,
                              "experts_s": sum(ex) / 1e6, "n_experts": len(ex)})
    out = [s for s in mine if s["name"] == "output"]
    row["head_s"] = out[0]["dur"] / 1e6 if out else 0.0
    row["embed_s"] = row["token"] - sum(x["layer_s"] for x in row["layers"]) - row["head_s"]
    per.append(row)
n_tok = len(per)
layer_map = [(x["kind"], x["ffn"]) for x in per[0]["layers"]]
if layer_map != [("KDA", "MLP"), ("KDA", "MoE"), ("KDA", "MoE"), ("MLA", "MoE")]:
    sys.exit(f"slice-project: the run's layers are {layer_map}, not k3-slice's (KDA + dense, "
             "KDA + MoE twice, MLA + MoE): the composition into K3 needs K3's widths")

# ---- the closing statistics: the decode steps' stall on reads, s/token ----
run_summary = [l.strip() for l in open(stats_path) if "s/token" in l]
stall_m = re.search(r"stall ([\d.]+) s/token", run_summary[-1]) if run_summary else None
if not stall_m:
    sys.exit("slice-project: no 'stall ... s/token' in the run's statistics " + stats_path)
stall_per_token = float(stall_m.group(1))

def mean(xs):
    return sum(xs) / len(xs)

# The decode steps' stall, step by step when --stats printed it (a pack), else the mean.
step_stall = [float(x) for x in re.findall(r"k3-uring: token \d+: .*?, stall ([\d.]+) s,",
                                            open(stats_path).read())]
stall_by_step = len(step_stall) == n_tok
if not stall_by_step:
    step_stall = [stall_per_token] * n_tok

moe = lambda x: x["ffn"] == "MoE"
def pieces_of(r, stall):
    """One decode step's pieces, each the mean over the step's layers of its kind."""
    def avg(key, pred):
        return mean([x[key] for x in r["layers"] if pred(x)])
    moes = [x for x in r["layers"] if moe(x)]
    return {
        "embed_s": r["embed_s"],
        "head_s": r["head_s"],
        "kda_attn_s": avg("attn_s", lambda x: x["kind"] == "KDA"),
        "mla_attn_s": avg("attn_s", lambda x: x["kind"] == "MLA"),
        "dense_mlp_s": avg("ffn_s", lambda x: x["ffn"] == "MLP"),
        "shared_latent_s": avg("shared_latent_s", moe),
        "expert_s": sum(x["experts_s"] for x in moes) / sum(x["n_experts"] for x in moes),
        # router, prediction, latent up projection, combine: the span's rest less its
        # share of the step's stall (records are waited for only inside MoE spans)
        "moe_rest_s": mean([x["ffn_s"] - x["shared_latent_s"] - x["experts_s"] for x in moes])
                      - stall / len(moes),
        "layer_rest_s": mean([x["layer_s"] - x["attn_s"] - x["ffn_s"] for x in r["layers"]]),
        "token_s": r["token"],
        "stall_s": stall,
    }
steps = [pieces_of(r, st) for r, st in zip(per, step_stall)]
measured = {"mean": {k: mean([p[k] for p in steps]) for k in steps[0]},
            "min": {k: min(p[k] for p in steps) for k in steps[0]}}
if not stall_by_step:   # a step's rest less the mean stall says nothing about that step
    measured["min"]["moe_rest_s"] = measured["mean"]["moe_rest_s"]
for v in measured.values():   # timer noise around a stall that took nearly all of the rest
    v["moe_rest_s"] = max(v["moe_rest_s"], 0.0)
m = measured[stat]

# ---- compose K3 ----
bf16_rate = (BYTES["kda"] + BYTES["dense"]) / (m["kda_attn_s"] + m["dense_mlp_s"])   # B/s, here
moe_trunk = m["shared_latent_s"] + m["moe_rest_s"] + ROUTER_EXTRA / bf16_rate
pieces = {   # seconds per K3 token at `threads` threads here, and the weight bytes each reads
    "embedding": (m["embed_s"], 0),
    "layer 0 (KDA + dense MLP)": (m["kda_attn_s"] + m["dense_mlp_s"] + m["layer_rest_s"],
                                  BYTES["kda"] + BYTES["dense"]),
    "68 KDA attention": (K3["kda_moe"] * m["kda_attn_s"], K3["kda_moe"] * BYTES["kda"]),
    "24 MLA attention": (K3["mla_moe"] * m["mla_attn_s"], K3["mla_moe"] * BYTES["mla"]),
    "92 MoE trunk (shared, latent, router 896)": (K3["moe"] * moe_trunk,
                                                 K3["moe"] * (BYTES["moe_trunk"] + 2 * E_K3 * H * 2)),
    "92 x 16 routed experts": (K3["moe"] * TOPK * m["expert_s"], K3["moe"] * TOPK * RECORD),
    "92 layers' rest (AttnRes, norms)": ((K3["layers"] - 1) * m["layer_rest_s"], 0),
    "output head": (m["head_s"], BYTES["head"]),
}
t_here = sum(t for t, _ in pieces.values())
t_experts = pieces["92 x 16 routed experts"][0]

expert_read = K3["moe"] * TOPK * RECORD
trunk_stream = 113487296000 - V * H * 2          # every segment but the embedding (rows on demand)
epyc_bw = epyc_drives * epyc_drive_gbps * 1e9
epyc_mem_bw = epyc_nodes * epyc_mem * 1e9
def epyc(t, b):   # this box's seconds at `threads` threads -> 2 x 7763: cores, capped by memory
    return max(t * threads / epyc_cores, b / epyc_mem_bw)
t_epyc = sum(epyc(t, b) for t, b in pieces.values())

rows = []
def scenario(name, t_c, cores, read_bytes, gbps):
    t_io = read_bytes / gbps
    t_c += read_bytes / 1e9 * read_cpu / cores    # the read path's CPU, over the cores
    rows.append({"scenario": name, "compute_s": t_c, "read_gb": read_bytes / 1e9,
                 "read_gbps": gbps / 1e9, "io_s": t_io, "pipelined_s": max(t_io, t_c),
                 "sync_s": t_io + t_c})
scenario(f"here, {threads} threads, this disk, trunk streamed (24 GiB RAM)", t_here, threads,
         expert_read + trunk_stream, disk_gbps * 1e9)
scenario(f"here, {threads} threads, this disk, trunk resident (needs ~115 GB RAM)", t_here, threads,
         expert_read, disk_gbps * 1e9)
scenario(f"here, {threads} threads, {epyc_drives} x {epyc_drive_gbps:g} GB/s, trunk resident",
         t_here, threads, expert_read, epyc_bw)
scenario(f"2 x EPYC 7763 ({epyc_cores} cores), this disk, trunk resident", t_epyc, epyc_cores,
         expert_read, disk_gbps * 1e9)
scenario(f"2 x EPYC 7763 ({epyc_cores} cores), {epyc_drives} x {epyc_drive_gbps:g} GB/s, trunk resident",
         t_epyc, epyc_cores, expert_read, epyc_bw)

assumptions = [
    f"k3-slice measured: {n_tok} decode steps, {threads} threads, kernels {kernels}, trunk resident, "
    f"load average {load}; {cmd}; each piece's {stat} over the steps",
    "a piece's time in a step is the mean over the step's layers of its kind; the MoE span's rest "
    "(router, the next layer's prediction, latent up projection, combine) is the span less shared + "
    "latent, the routed experts and its share of the step's stall on reads ("
    + ("--stats per step)" if stall_by_step else "the closing statistics' mean: its min is its mean)"),
    "full K3 = the k3 preset: 93 layers (layer 0 KDA + dense; 68 KDA + MoE; 24 MLA + MoE), "
    "896 experts, 16 active, 17,547,264-byte records; every K3 layer of a kind costs what "
    "k3-slice's layers of that kind cost (same widths)",
    f"router: 896 instead of 64 experts, the extra {ROUTER_EXTRA / 1e6:.1f} MB per layer (router + "
    "the prediction's pass) at the measured bf16 rate of KDA + dense",
    "Attention Residuals: each layer's rest as measured (K3 mixes up to 9 block candidates, the "
    "slice 3; a 7168-wide sum each, far below the weights' time)",
    "MLA at a short context (a few positions); a long context adds its latent-cache attention",
    "decode at one sequence, T = 1; no expert cache hits (synthetic routing is uniform; real "
    "routing repeats, so reads are an upper bound)",
    "pipelined = max(read, compute): perfect overlap, the lower bound; sync = read + compute",
    f"compute in each scenario includes the read path's CPU, {read_cpu:g} core s per GB read "
    "(READ_CPU_S_PER_GB; k3-uring iobench prints it) over the box's cores",
    f"this disk: {disk_src}",
    f"2 x EPYC 7763: each piece's time here x {threads} / {epyc_cores} cores (per-core speed "
    f"of this box's {kernels} kernels; the 7763 has AVX2, no AVX-512, and another clock: run "
    f"KERNELS=avx2 to time the AVX2 kernels here), but no faster than its weight bytes over "
    f"{epyc_nodes} x {epyc_mem:g} GB/s of memory; reads at {epyc_drives} x {epyc_drive_gbps:g} GB/s",
]
trunk_bytes_k3 = 113487296000 - V * H * 2
calib = {
    "read_cpu_s_per_gb": read_cpu,
    "mxfp4_gbps_per_core": RECORD / m["expert_s"] / threads / 1e9,
    "bf16_gbps_per_core": trunk_bytes_k3 / (t_here - t_experts - m["embed_s"]) / threads / 1e9,
}
result = {"source": "bench/slice-project.sh: k3-slice's measured per-layer times composed into K3",
          "threads": threads, "kernels": kernels, "load_average": load, "command": cmd,
          "run_summary": run_summary, "statistic": stat, "measured": measured, "per_token": per,
          "disk_gbps": disk_gbps, "disk_source": disk_src,
          "k3_pieces_s": {k: v[0] for k, v in pieces.items()},
          "k3_compute_s_here": t_here, "k3_compute_s_epyc": t_epyc,
          "projection": rows, "assumptions": assumptions, **calib}
with open(out_path, "w") as f:
    json.dump(result, f, indent=1)

print(f"k3-slice measured ({n_tok} decode steps, {threads} threads, kernels {kernels}, load {load}):")
print(f"  {'ms':<16} {'mean':>9} {'min':>9}")
for k in measured["mean"]:
    print(f"  {k[:-2]:<16} {measured['mean'][k] * 1e3:9.2f} {measured['min'][k] * 1e3:9.2f}")
print(f"the projection below composes each piece's {stat} over the steps (STAT=min|mean)")
print("full K3, compute per token:")
print(f"  {'piece':<44} {'here s':>8} {'EPYC s':>8}")
for k, (t, b) in pieces.items():
    print(f"  {k:<44} {t:8.3f} {epyc(t, b):8.4f}")
print(f"  {'total':<44} {t_here:8.3f} {t_epyc:8.4f}")
print(f"full K3, s/token (reads {expert_read / 1e9:.2f} GB of experts per token, "
      f"+{trunk_stream / 1e9:.1f} GB when the trunk streams):")
print(f"  {'scenario':<72} {'read s':>8} {'compute':>8} {'pipelined':>9} {'sync':>8}")
for r in rows:
    print(f"  {r['scenario']:<72} {r['io_s']:8.3f} {r['compute_s']:8.3f} {r['pipelined_s']:9.3f} "
          f"{r['sync_s']:8.3f}")
print("assumptions:")
for a in assumptions:
    print(f"  - {a}")
print(f"planner rates from this run (k3-uring plan --calibration {out_path}): "
      f"MXFP4 {calib['mxfp4_gbps_per_core']:.2f}, bf16 {calib['bf16_gbps_per_core']:.2f} GB/s per core")
EOF
say "wrote $out"
for box in "--cores $threads --drives 1 --drive-gbps $disk_gbps --ram floor" \
           "--cores $threads --drives 1 --drive-gbps $disk_gbps --ram trunk" \
           "--cores ${EPYC_CORES:-128} --numa-nodes ${EPYC_NODES:-2} --mem-gbps ${EPYC_MEM_GBPS:-150} --drives ${EPYC_DRIVES:-8} --drive-gbps ${EPYC_DRIVE_GBPS:-7} --ram trunk"; do
  # shellcheck disable=SC2086  # one word per option
  echo "k3-uring plan --config k3 --calibration $out $box:"
  # shellcheck disable=SC2086
  "$k3" plan --config k3 --calibration "$out" $box | sed -n 's/^  \(pipelined\|synchronous\|compute\|I\/O floor\)/  &/p'
done
# Beside it, what the kernel calibration alone (the mat-vecs, no load, no attention state)
# gives for the same 2-thread box with the trunk resident.
if [[ -f $root/bench/results/calibration.json ]]; then
  echo "for comparison, the kernels' calibration: k3-uring plan --config k3 --calibration bench/results/calibration.json --cores $threads --drives 1 --drive-gbps $disk_gbps --ram trunk:"
  "$k3" plan --config k3 --calibration "$root/bench/results/calibration.json" --cores "$threads" \
    --drives 1 --drive-gbps "$disk_gbps" --ram trunk | sed -n 's/^  \(compute\|pipelined\)/  &/p'
fi
