#!/usr/bin/env python3
"""How much of each rank's time in expert exchanges its drives kept reading.

usage: bench/ranks_overlap.py TRACE.json   (a `mpirun ... k3-uring run --trace` file)

For each rank (a process of the trace): the exchanges (the "exchange" spans of its
compute track), their total time, and the share of it during which at least one of its
reads was in flight (the union of its read spans clipped to each exchange).
"""
import json
import sys


def spans_named(events, name):
    """(begin, end) of the B/E spans called name on the compute track (tid 1)."""
    stack, out = [], []
    for e in events:
        if e.get("tid") != 1 or e["ph"] not in "BE":
            continue
        if e["ph"] == "B":
            stack.append((e["name"], e["ts"]))
        else:
            n, begin = stack.pop()
            if n == name:
                out.append((begin, e["ts"]))
    return out


def read_spans(events):
    """(submitted, landed) of every read."""
    open_, out = {}, []
    for e in events:
        if e.get("cat") != "read":
            continue
        if e["ph"] == "b":
            open_[e["id"]] = e["ts"]
        elif e["ph"] == "e" and e["id"] in open_:
            out.append((open_.pop(e["id"]), e["ts"]))
    return out


def covered(a, b, spans):
    """Time within [a, b] that some span covers."""
    total, cur = 0.0, None
    for s, f in sorted((max(a, s), min(b, f)) for s, f in spans if s < b and f > a):
        if cur is None or s > cur[1]:
            total += cur[1] - cur[0] if cur else 0
            cur = [s, f]
        else:
            cur[1] = max(cur[1], f)
    return total + (cur[1] - cur[0] if cur else 0)


def main():
    events = json.load(open(sys.argv[1]))["traceEvents"]
    for pid in sorted({e["pid"] for e in events}):
        mine = [e for e in events if e["pid"] == pid]
        xs, reads = spans_named(mine, "exchange"), read_spans(mine)
        total = sum(b - a for a, b in xs)
        busy = sum(covered(a, b, reads) for a, b in xs)
        print(f"rank {pid - 1}: {len(xs)} exchanges, {total / 1e3:.1f} ms in them; "
              f"reads in flight {100 * busy / total if total else 0:.1f}% of that time")


if __name__ == "__main__":
    main()
