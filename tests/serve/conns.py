#!/usr/bin/env python3
"""Careless and hostile connections for the serve tests (loopback only).

usage: conns.py PORT SOURCE_ADDR N KIND SECONDS
KIND: half      a request line and one header, then nothing
      keepalive one whole GET /health kept alive, then nothing
      drip      a request one byte every quarter second, never finished
Prints "ready N" once the N connections are made (and, for keepalive, answered), holds
them for SECONDS (or until stdin closes), then prints "open M": how many the server had
not closed.
"""
import select
import socket
import sys
import time

port, source, n, kind, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
HALF = b"POST /v1/completions HTTP/1.1\r\nHost: k3\r\n"
DRIP = b"POST /v1/completions HTTP/1.1\r\nHost: k3\r\nContent-Type: application/json\r\n" + b"X: y\r\n" * 1000


def connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def still_open(s):
    """The server has not closed it (nothing to read, no end)."""
    s.setblocking(False)
    try:
        return s.recv(1 << 16) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


socks = []
for _ in range(n):
    try:
        s = connect()
        if kind == "half":
            s.sendall(HALF)
        elif kind == "keepalive":
            s.sendall(b"GET /health HTTP/1.1\r\nHost: k3\r\n\r\n")
            got = b""
            while b'{"status":"ok"}' not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        socks.append(s)
    except OSError:
        pass  # refused or reset: counted by the server, not held here
print("ready", len(socks), flush=True)

end, at = time.monotonic() + seconds, 0
while time.monotonic() < end:
    if select.select([sys.stdin], [], [], 0.25)[0] and not sys.stdin.readline():
        break
    if kind == "drip":
        for s in socks:
            try:
                s.send(DRIP[at:at + 1])
            except OSError:
                pass
        at += 1
print("open", sum(still_open(s) for s in socks), flush=True)
