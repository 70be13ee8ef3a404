"""Spans of a k3-uring trace (`--trace FILE`, Chrome trace-event JSON), for the overlap
reports: the compute track's stage spans, every read's flight, the teams' expert spans."""
import json

COMPUTE_TID = 1


def load(path):
    return json.load(open(path))["traceEvents"]


def spans_named(events, name):
    """(begin, end) of the B/E spans called name on the compute track."""
    stack, out = [], []
    for e in events:
        if e.get("tid") != COMPUTE_TID or e["ph"] not in "BE":
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


def team_spans(events, name):
    """(begin, end) of the complete (X) spans called name on the team tracks."""
    return [(e["ts"], e["ts"] + e["dur"]) for e in events
            if e["ph"] == "X" and e.get("tid", 0) > COMPUTE_TID and e.get("name") == name]


def merged(spans):
    """The spans' union, as disjoint (begin, end) in order."""
    out = []
    for s, f in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], f)
        else:
            out.append([s, f])
    return [tuple(x) for x in out]


def covered(a, b, spans):
    """Time within [a, b] that some span covers."""
    return sum(f - s for s, f in merged((max(a, s), min(b, f)) for s, f in spans if s < b and f > a))
