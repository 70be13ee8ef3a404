#!/usr/bin/env python3
"""How much of a prompt's time the drives kept reading, and how much of the routed
experts' compute ran under reads.

usage: bench/pass_overlap.py TRACE.json   (a `k3-uring run --trace` file of a prompt, -n 1)

Prints one JSON object: the run's span on the compute track (seconds), the time with at
least one read in flight, the time some team computed routed experts, and the part of
that during which a read was in flight.
"""
import json
import sys

from trace_spans import COMPUTE_TID, covered, load, merged, read_spans, team_spans


def main():
    events = load(sys.argv[1])
    ts = [e["ts"] for e in events if e.get("tid") == COMPUTE_TID and e["ph"] in "BE"]
    if not ts:
        sys.exit(f"{sys.argv[1]}: no compute spans (a run with --trace?)")
    t0, t1 = min(ts), max(ts)
    reads = read_spans(events)
    experts = merged(team_spans(events, "expert"))
    print(json.dumps({
        "seconds": round((t1 - t0) / 1e6, 3),
        "reads_in_flight": round(covered(t0, t1, reads) / 1e6, 3),
        "expert_compute": round(sum(f - s for s, f in experts) / 1e6, 3),
        "expert_compute_under_reads": round(sum(covered(s, f, reads) for s, f in experts) / 1e6, 3),
    }))


if __name__ == "__main__":
    main()
