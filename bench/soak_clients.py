#!/usr/bin/env python3
"""Mixed clients for bench/soak.sh, all on the loopback (127.0.0.x only).

usage: soak_clients.py reference URL OUT.json
       soak_clients.py run URL REFERENCE.json SECONDS OUT.json

reference: the answers of a quiet server to every well-formed body (text, completion
tokens, logits hash).  run: for SECONDS, kinds of client in threads, each from its own
loopback address: whole and streamed requests (checked against the reference, or 503),
clients that hang up mid-stream, malformed and oversized bodies, slow senders, idle
half-open connections past the per-address limit, tool and chat requests on a kept-alive
connection.  Writes the outcomes by kind, and the counts /metrics should agree with.
"""
import http.client
import json
import random
import socket
import sys
import threading
import time

BODIES = [
    {"prompt": [5, 17, 300], "temperature": 0.9, "seed": 1},
    {"prompt": "The printing press", "temperature": 0},
    {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0.7, "seed": 3},
    {"prompt": [1000, 3, 4, 5, 6], "temperature": 1.0, "top_k": 20, "seed": 4},
    {"prompt": "Once", "temperature": 0.5, "top_p": 0.9, "seed": 5},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}],
     "temperature": 0, "logit_bias": {"11": -100}, "presence_penalty": 0.5},
]
COMMON = {"max_tokens": 8, "logits_hash": True}
TOOL = {"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 200,
        "tool_choice": "required", "parallel_tool_calls": False,
        "chat_template_kwargs": {"thinking": False},
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {
            "type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["days"]}}}]}
MALFORMED = [b'{"prompt": ', b"[1, 2]", b'{"prompt": "x", "temperature": "hot"}', b"\xff\xfe{}",
             b'{"messages": [{"role": "robot", "content": "x"}]}', b'{"prompt": [1, 99999999]}',
             b"[" * 100000, b'{"prompt": "x", "n": 5}']


def path(body):
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"


def signature_whole(data):
    d = json.loads(data)
    c = d["choices"][0]
    return [c.get("text", c.get("message", {}).get("content")), d["usage"]["completion_tokens"],
            d.get("logits_hash")]


def signature_stream(data):
    text, tokens, digest = "", None, None
    for line in data.decode().split("\n"):
        if not line.startswith("data: {"):
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            raise ValueError("error event: " + line)
        for c in ev.get("choices", []):
            text += c.get("text") or (c.get("delta") or {}).get("content") or ""
        digest = ev.get("logits_hash", digest)
        if ev.get("usage"):
            tokens = ev["usage"]["completion_tokens"]
    if not data.rstrip().endswith(b"data: [DONE]"):
        raise ValueError("no [DONE]")
    return [text, tokens, digest]


class Client:
    """A connection from one loopback address to the server."""

    def __init__(self, url, source):
        host, port = url.split("//")[1].split(":")
        self.host, self.port, self.source = host, int(port), source

    def conn(self, timeout=300):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout,
                                          source_address=(self.source, 0))

    def post(self, body, conn=None):
        c = conn or self.conn()
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.request("POST", path(body) if isinstance(body, dict) else "/v1/completions", data,
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.status, r.read()
        if not conn:
            c.close()
        return out


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.notes = []

    def add(self, kind, outcome, note=None):
        with self.lock:
            k = self.counts.setdefault(kind, {})
            k[outcome] = k.get(outcome, 0) + 1
            if note and len(self.notes) < 50:
                self.notes.append(f"{kind} {outcome}: {note}")


def full_body(i, stream):
    b = dict(BODIES[i], **COMMON)
    if stream:
        b.update(stream=True, stream_options={"include_usage": True})
    return b


def well_formed(cl, tally, ref, stream, kind):
    i = random.randrange(len(BODIES))
    try:
        status, data = cl.post(full_body(i, stream))
    except OSError as e:
        return tally.add(kind, "connection error", str(e))
    if status == 503:
        return tally.add(kind, "503")
    if status != 200:
        return tally.add(kind, f"status {status}", data[:200])
    try:
        sig = signature_stream(data) if stream else signature_whole(data)
    except (ValueError, KeyError) as e:
        return tally.add(kind, "wrong", str(e))
    tally.add(kind, "right" if sig == ref[i] else "wrong", None if sig == ref[i] else f"{sig} != {ref[i]}")


def hang_up(cl, tally):
    """A stream of 400 tokens the client leaves after its first chunks."""
    body = dict(BODIES[random.randrange(len(BODIES))], max_tokens=400, stream=True, ignore_eos=True)
    c = cl.conn()
    try:
        c.request("POST", path(body), json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status == 503:
            return tally.add("hang up", "503")
        r.read1(256) if hasattr(r, "read1") else r.read(256)
        tally.add("hang up", "left mid-stream" if r.status == 200 else f"status {r.status}")
    except OSError as e:
        tally.add("hang up", "connection error", str(e))
    finally:
        c.close()


def malformed(cl, tally):
    try:
        status, data = cl.post(random.choice(MALFORMED))
        ok = status == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"
        tally.add("malformed", "400" if ok else f"status {status}", None if ok else data[:200])
    except OSError as e:
        tally.add("malformed", "connection error", str(e))


def oversized(cl, tally):
    """3 MB, waiting for 100-continue or not: 413 (or the connection cut once the server has
    answered 413 and stopped reading)."""
    expect = random.random() < 0.5
    body = b'{"prompt": "' + b"x" * (3 << 20) + b'"}'
    s = socket.socket()
    try:
        s.bind((cl.source, 0))
        s.settimeout(60)
        s.connect((cl.host, cl.port))
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: k3\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n" + ("Expect: 100-continue\r\n" if expect else "") + "\r\n")
        s.sendall(head.encode())
        if not expect:
            try:
                s.sendall(body)
            except OSError:
                pass  # the server answered and closed before taking it all
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        status = got.split(b" ")[1].decode() if got.startswith(b"HTTP/1.1") else "none"
        tally.add("oversized", "413" if status == "413" else f"status {status}",
                  None if status == "413" else got[:100])
    except OSError as e:
        tally.add("oversized", "connection error", str(e))
    finally:
        s.close()


def slow_sender(cl, tally, ref):
    """A well-formed body a few bytes at a time over about 8 s (within --read-timeout)."""
    i = random.randrange(len(BODIES))
    body = json.dumps(full_body(i, False)).encode()
    s = socket.socket()
    try:
        s.bind((cl.source, 0))
        s.settimeout(300)
        s.connect((cl.host, cl.port))
        s.sendall((f"POST {path(BODIES[i])} HTTP/1.1\r\nHost: k3\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode())
        step = max(1, len(body) // 32)
        for at in range(0, len(body), step):
            s.sendall(body[at:at + step])
            time.sleep(0.25)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        head, _, data = got.partition(b"\r\n\r\n")
        status = head.split(b" ")[1].decode() if head else "none"
        if status == "503":
            return tally.add("slow sender", "503")
        if status != "200":
            return tally.add("slow sender", f"status {status}", got[:200])
        sig = signature_whole(data)
        tally.add("slow sender", "right" if sig == ref[i] else "wrong", None if sig == ref[i] else str(sig))
    except (OSError, ValueError) as e:
        tally.add("slow sender", "connection error", str(e))
    finally:
        s.close()


def idle_burst(cl, tally, hold):
    """80 half-open connections from one address, held past --read-timeout: the server
    refuses those past its per-address limit at once and closes the rest at the deadline."""
    socks = []
    for _ in range(80):
        s = socket.socket()
        try:
            s.bind((cl.source, 0))
            s.settimeout(10)
            s.connect((cl.host, cl.port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: k3\r\n")
            socks.append([s, time.monotonic(), None])
        except OSError:
            tally.add("idle", "connect failed")
    end = time.monotonic() + hold
    while time.monotonic() < end and any(x[2] is None for x in socks):
        for x in socks:
            if x[2] is not None:
                continue
            x[0].setblocking(False)
            try:
                if x[0].recv(1) == b"":
                    x[2] = time.monotonic() - x[1]
            except BlockingIOError:
                pass
            except OSError:
                x[2] = time.monotonic() - x[1]
        time.sleep(0.1)
    for s, _, closed in socks:
        s.close()
        if closed is None:
            tally.add("idle", "still open at the end")
        else:
            tally.add("idle", "refused at once" if closed < 2 else "closed at the read deadline")


def tool_outcome(status, data):
    """"a valid call" when the answer is one call to weather with 1 <= days <= 7."""
    if status != 200:
        return "503" if status == 503 else f"status {status}"
    choice = json.loads(data)["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    if choice["finish_reason"] != "tool_calls" or len(calls) != 1:
        return f"no call ({choice['finish_reason']})"
    args = json.loads(calls[0]["function"]["arguments"])
    ok = calls[0]["function"]["name"] == "weather" and 1 <= args.get("days", 0) <= 7
    return "a valid call" if ok else "an invalid call"


def tool_and_chat(cl, tally, ref):
    """A kept-alive connection: a request that must call a tool (the grammar keeps its call
    valid), then chat requests on the same connection."""
    c = cl.conn()
    try:
        status, data = cl.post(TOOL, c)
        tally.add("tool", tool_outcome(status, data))
        for _ in range(3):
            i = 2
            status, data = cl.post(full_body(i, False), c)
            if status == 200:
                sig = signature_whole(data)
                tally.add("kept-alive chat", "right" if sig == ref[i] else "wrong", None if sig == ref[i] else str(sig))
            else:
                tally.add("kept-alive chat", "503" if status == 503 else f"status {status}")
    except (OSError, ValueError, http.client.HTTPException) as e:
        tally.add("kept-alive chat", "connection error", str(e))
    finally:
        c.close()


def reference(url, out):
    cl = Client(url, "127.0.0.1")
    ref = []
    for i in range(len(BODIES)):
        status, data = cl.post(full_body(i, False))
        if status != 200:
            sys.exit(f"reference body {i}: {status} {data[:200]}")
        ref.append(signature_whole(data))
    json.dump(ref, open(out, "w"))


def run(url, ref_file, seconds, out):
    ref = json.load(open(ref_file))
    tally = Tally()
    end = time.monotonic() + seconds
    kinds = [  # (name, source address, one round)
        ("whole", "127.0.0.2", lambda cl: well_formed(cl, tally, ref, False, "whole")),
        ("whole", "127.0.0.3", lambda cl: well_formed(cl, tally, ref, False, "whole")),
        ("stream", "127.0.0.4", lambda cl: well_formed(cl, tally, ref, True, "stream")),
        ("stream", "127.0.0.5", lambda cl: well_formed(cl, tally, ref, True, "stream")),
        ("hang up", "127.0.0.6", lambda cl: (hang_up(cl, tally), time.sleep(1))),
        ("malformed", "127.0.0.7", lambda cl: (malformed(cl, tally), time.sleep(0.2))),
        ("oversized", "127.0.0.8", lambda cl: (oversized(cl, tally), time.sleep(2))),
        ("slow sender", "127.0.0.9", lambda cl: slow_sender(cl, tally, ref)),
        ("tool", "127.0.0.10", lambda cl: (tool_and_chat(cl, tally, ref), time.sleep(1))),
        ("idle", "127.0.0.11", lambda cl: idle_burst(cl, tally, 40)),
    ]

    def loop(round_, source):
        cl = Client(url, source)
        while time.monotonic() < end:
            round_(cl)

    threads = [threading.Thread(target=loop, args=(r, s)) for _, s, r in kinds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    json.dump({"counts": tally.counts, "notes": tally.notes}, open(out, "w"), indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "reference":
        reference(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
