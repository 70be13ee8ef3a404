#!/bin/bash
# Start-up against the RAM budget: for each budget, seconds from launching `k3-uring run`
# to its first token on stdout, and its RSS at that moment, the median of ROUNDS runs
# (interleaved: round 1 at every budget, then round 2...), each budget's time divided by
# the time at the smallest budget that holds the whole trunk (`--ram trunk`).  The read
# area is reserved and taken as reads reach it (iouring/uring_buffers.c), so the goal is a
# ratio <= 1.2 at every budget, and an RSS at first token that does not grow with it.
# Each run also says how much of the area it took and the seconds its reads' path spent
# faulting that in; the ratio is given again without those seconds, since where a
# hypervisor backs guest memory lazily they are host time that varies run to run.
# usage: bench/startup.sh [--help]
# knobs (environment): K3 (./k3-uring), DRIVES (DATA's prefill/d0, bench/lib.sh: a 1-drive pack of
#   k3-bench), BUDGETS ("trunk 4G 8G 12G 16G 20G"), ROUNDS (3), OUT
#   (bench/results/startup-DATE.json)
set -euo pipefail
prog=startup.sh
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/bench/lib.sh"
if [[ ${1:-} == --help || ${1:-} == -h ]]; then sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
k3=$(realpath "${K3:-./k3-uring}")
drives=${DRIVES:-$bench_data/prefill/d0}
budgets=${BUDGETS:-trunk 4G 8G 12G 16G 20G}
rounds=${ROUNDS:-3}
out=${OUT:-$root/bench/results/startup-$(date -u +%Y%m%d-%H%M%S).json}
[[ -x $k3 ]] || die "no engine at $k3 (make, or K3=)"
[[ -d $drives ]] || die "DRIVES: no folder $drives"
check_uint ROUNDS "$rounds"
say "K3=$k3${K3:+ (set)} DRIVES=$drives${DRIVES:+ (set)} BUDGETS=\"$budgets\"${BUDGETS:+ (set)}" \
    "ROUNDS=$rounds${ROUNDS:+ (set)} OUT=$out"

python3 - "$k3" "$drives" "$rounds" "$out" $budgets <<'EOF'
import json, os, re, select, statistics, subprocess, sys, time

k3, drives, rounds, out, budgets = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
args = ["run", "--drives", drives, "--ids", "5,17,300", "-n", "1", "--ignore-eos", "--print-ids", "-v"]

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def once(ram):
    """Seconds to the first byte on stdout, RSS then (MiB), the budget -v planned (bytes), the ids,
    and the read area taken (MB) with the seconds spent faulting it in (the run's line)."""
    t0 = time.monotonic()
    p = subprocess.Popen([k3] + args + ["--ram", ram], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    select.select([p.stdout], [], [])
    t = time.monotonic() - t0
    rss = rss_kib(p.pid) / 1024
    ids, err = p.communicate()
    if p.returncode:
        sys.exit(f"startup.sh: --ram {ram}: exit {p.returncode}: {err.decode().strip()[-300:]}")
    budget = int(re.search(r"budget [0-9.]+ GiB = ([0-9]+) B", err.decode()).group(1))
    area = re.search(r"read area: ([0-9.]+) MB taken as reads reached it, in ([0-9.]+) s", err.decode())
    taken, taking = (float(area.group(1)), float(area.group(2))) if area else (0.0, 0.0)
    return t, rss, budget, ids.decode().strip(), taken, taking

load_start = os.getloadavg()[0]
runs = {b: [] for b in budgets}
for r in range(rounds):
    for b in budgets:
        subprocess.run(["sync"])
        runs[b].append(once(b))
        x = runs[b][-1]
        print(f"startup.sh: round {r + 1} --ram {b}: first token {x[0]:.2f} s, RSS {x[1]:.0f} MiB, "
              f"area taken {x[4]:.0f} MB in {x[5]:.2f} s", file=sys.stderr)
ids = {x[3] for b in budgets for x in runs[b]}
if len(ids) != 1:
    sys.exit(f"startup.sh: the tokens differ across budgets: {sorted(ids)}")
# The run's time less the seconds its reads' path spent faulting fresh memory in: what the
# start costs where memory is cheap to take (it is not where a hypervisor backs guest
# memory lazily).
base = statistics.median(x[0] for x in runs[budgets[0]])
base_unfaulted = statistics.median(x[0] - x[5] for x in runs[budgets[0]])
rows = []
for b in budgets:
    t = statistics.median(x[0] for x in runs[b])
    t_unfaulted = statistics.median(x[0] - x[5] for x in runs[b])
    rows.append({"ram": b, "budget_bytes": runs[b][0][2], "first_token_s": round(t, 3),
                 "first_token_s_runs": [round(x[0], 3) for x in runs[b]],
                 "ratio": round(t / base, 3),
                 "rss_first_token_mib": round(statistics.median(x[1] for x in runs[b])),
                 "area_taken_mb": round(statistics.median(x[4] for x in runs[b])),
                 "area_taking_s_runs": [round(x[5], 3) for x in runs[b]],
                 "first_token_less_taking_s": round(t_unfaulted, 3),
                 "ratio_less_taking": round(t_unfaulted / base_unfaulted, 3)})
    print(f"--ram {b:>6} ({runs[b][0][2] / 2**30:6.2f} GiB): first token {t:6.2f} s, "
          f"{t / base:5.2f}x the trunk's, RSS at first token {rows[-1]['rss_first_token_mib']} MiB; "
          f"area taken {rows[-1]['area_taken_mb']} MB, less the time taking it "
          f"{t_unfaulted:5.2f} s, {t_unfaulted / base_unfaulted:5.2f}x")
doc = {"bench": "startup", "command": "bench/startup.sh", "engine": k3, "drives": drives,
       "args": args, "rounds": rounds, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "load_start": load_start, "load_end": os.getloadavg()[0], "goal": "ratio <= 1.2 at every budget",
       "met": all(r["ratio"] <= 1.2 for r in rows),
       "met_less_taking": all(r["ratio_less_taking"] <= 1.2 for r in rows), "results": rows}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
print(f"startup.sh: wrote {out}", file=sys.stderr)
EOF
