#!/usr/bin/env python3
"""How much of each rank's time in expert exchanges its drives kept reading.

usage: bench/ranks_overlap.py TRACE.json   (a `mpirun ... k3-uring run --trace` file)

For each rank (a process of the trace): the exchanges (the "exchange" spans of its
compute track), their total time, and the share of it during which at least one of its
reads was in flight (the union of its read spans clipped to each exchange).
"""
import sys

from trace_spans import covered, load, read_spans, spans_named


def main():
    events = load(sys.argv[1])
    for pid in sorted({e["pid"] for e in events}):
        mine = [e for e in events if e["pid"] == pid]
        xs, reads = spans_named(mine, "exchange"), read_spans(mine)
        total = sum(b - a for a, b in xs)
        busy = sum(covered(a, b, reads) for a, b in xs)
        print(f"rank {pid - 1}: {len(xs)} exchanges, {total / 1e3:.1f} ms in them; "
              f"reads in flight {100 * busy / total if total else 0:.1f}% of that time")


if __name__ == "__main__":
    main()
