#!/usr/bin/python3
"""B streaming clients against a k3-uring serve, all started at once.

Each client posts one /v1/completions request with "stream": true and a prompt of its
own (so the clients' experts differ, as different users' would), and times every
server-sent event.  Prints one JSON object:

  clients, tokens        the clients and the tokens each asked for
  generated              completion tokens, summed (the final chunks' usage)
  wall_s                 from the first request sent to the last stream's end
  aggregate_tps          generated / wall_s
  window_s, window_tps   while every client was decoding (from the last first token to
                         the first last token): the events arriving then, per second
  ttft_median_s, _max_s  time to first token, over the clients
  metrics                the server's /metrics after the run (labelled series as
                         name{label}): counters and means since the server started, so
                         each run wants a fresh server; refused if it had served before

Standard library only (the bench's python is Debian's /usr/bin/python3).
"""
import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request


def stream_one(url, prompt, tokens, start_gate, out):
    body = json.dumps({
        "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": True,
    }).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start_gate.wait()
    sent = time.monotonic()
    events, usage = [], None
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            if chunk.get("usage"):
                usage = chunk["usage"]
            if chunk.get("choices"):
                events.append(time.monotonic())
    if usage is None:
        raise RuntimeError("a stream ended without its usage chunk")
    out.update(sent=sent, events=events, end=time.monotonic(),
               generated=usage["completion_tokens"])


def scrape(url):
    """/metrics as {name: value}, the k3_ prefix dropped, labels kept."""
    values = {}
    with urllib.request.urlopen(url + "/metrics", timeout=60) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("k3_"):
                name, value = line[3:].rsplit(" ", 1)
                values[name] = float(value)
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    args = ap.parse_args()

    gate = threading.Event()
    results = [{} for _ in range(args.clients)]
    errors = []

    def client(i):
        # Four token ids of the client's own: the prompts share no token.
        prompt = [1000 + 4 * i + j for j in range(4)]
        try:
            stream_one(args.url, prompt, args.tokens, gate, results[i])
        except Exception as e:  # noqa: BLE001 - reported, and the run fails
            errors.append(f"client {i}: {e}")

    if scrape(args.url).get("steps_total", 0):
        sys.exit("serve_clients.py: the server has run steps already; start a fresh one")
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    if errors:
        sys.exit("serve_clients.py: " + "; ".join(errors))
    after = scrape(args.url)

    first = [r["events"][0] for r in results]
    last = [r["events"][-1] for r in results]
    t0 = min(r["sent"] for r in results)
    wall = max(r["end"] for r in results) - t0
    lo, hi = max(first), min(last)
    in_window = sum(1 for r in results for t in r["events"] if lo < t <= hi)
    ttft = [f - r["sent"] for f, r in zip(first, results)]
    generated = sum(r["generated"] for r in results)
    print(json.dumps({
        "clients": args.clients, "tokens": args.tokens, "generated": generated,
        "wall_s": round(wall, 4), "aggregate_tps": round(generated / wall, 4),
        "window_s": round(hi - lo, 4) if hi > lo else 0,
        "window_tps": round(in_window / (hi - lo), 4) if hi > lo else None,
        "ttft_median_s": round(statistics.median(ttft), 4), "ttft_max_s": round(max(ttft), 4),
        "metrics": after,
    }))


if __name__ == "__main__":
    main()
