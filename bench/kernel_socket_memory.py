#!/usr/bin/env python3
"""Kernel memory per idle TCP connection on loopback, for docs/capacity.md.

Opens N loopback TCP connections between two child processes (each holds one
end, so neither passes its descriptor limit), exchanges a small request and
answer on each (as a WebSocket upgrade does), then leaves them idle and reads
what the kernel holds for them:

- /proc/slabinfo (root only): the growth of each slab cache, active objects x
  object size (TCP sockets, socket inodes, files, dentries, epoll items, ...);
- /proc/meminfo: Slab (and SUnreclaim), the same total seen another way;
- /proc/net/sockstat: TCP `mem`, pages the sockets' buffers hold.

The server side registers every accepted socket in an epoll set, as tokio does
in the gateway; the client side does not. Both ends are counted in the totals,
so the figure per edge-side socket is (growth - epoll items) / 2 + epoll items.

Usage: python3 bench/kernel_socket_memory.py [--connections 15000] [--runs 3]
Standard library only. Writes nothing but its report on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import time

REQUEST = b"G" * 200
ANSWER = b"A" * 200
EPOLL_CACHES = ("eventpoll_epi", "eventpoll_pwq")


def slabinfo() -> dict[str, int]:
    """Bytes held by each slab cache (active objects x object size)."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f:
            if line.startswith(("slabinfo", "#")):
                continue
            parts = line.split()
            out[parts[0]] = int(parts[1]) * int(parts[3])
    return out


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) * 1024
    return out


def sockstat_tcp_mem_pages() -> int:
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                fields = line.split()[1:]
                return int(dict(zip(fields[::2], fields[1::2]))["mem"])
    raise RuntimeError("no TCP line in /proc/net/sockstat")


def server(n: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    print(listener.getsockname()[1], flush=True)
    ep = select.epoll()
    held = []
    while len(held) < n:
        conn, _ = listener.accept()
        got = b""
        while len(got) < len(REQUEST):
            got += conn.recv(len(REQUEST) - len(got))
        conn.sendall(ANSWER)
        conn.setblocking(False)
        ep.register(conn.fileno(), select.EPOLLIN)
        held.append(conn)
    print("held", flush=True)
    sys.stdin.read()  # hold until the parent closes our stdin


def client(port: int, n: int) -> None:
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(REQUEST)
        got = b""
        while len(got) < len(ANSWER):
            got += s.recv(len(ANSWER) - len(got))
        held.append(s)
    print("held", flush=True)
    sys.stdin.read()


def settle() -> None:
    """Let deferred frees (RCU, TIME_WAIT of earlier runs) pass."""
    time.sleep(2.0)


def one_run(n: int) -> dict:
    me = os.path.abspath(__file__)
    settle()
    slab0, mem0, pages0 = slabinfo(), meminfo(), sockstat_tcp_mem_pages()
    srv = subprocess.Popen([sys.executable, me, "--role", "server", "--connections", str(n)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(srv.stdout.readline())
    cli = subprocess.Popen([sys.executable, me, "--role", "client", "--connections", str(n),
                            "--port", str(port)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert cli.stdout.readline().strip() == "held"
    assert srv.stdout.readline().strip() == "held"
    settle()
    slab1, mem1, pages1 = slabinfo(), meminfo(), sockstat_tcp_mem_pages()
    for p in (cli, srv):
        p.stdin.close()
        p.wait()
    grew = {k: slab1.get(k, 0) - slab0.get(k, 0) for k in set(slab0) | set(slab1)}
    top = sorted(((v, k) for k, v in grew.items() if v > 0), reverse=True)[:10]
    total = sum(v for v in grew.values())
    epoll = sum(grew.get(k, 0) for k in EPOLL_CACHES)
    return {
        "connections": n,
        "slab_growth_bytes": total,
        "per_connection_both_ends": round(total / n),
        "epoll_per_socket": round(epoll / n),
        "per_edge_socket": round((total - epoll) / (2 * n) + epoll / n),
        "meminfo_slab_per_connection": round((mem1["Slab"] - mem0["Slab"]) / n),
        "tcp_buffer_pages_growth": pages1 - pages0,
        "top_caches_per_connection": {k: round(v / n) for v, k in top},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=15000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--role", choices=["server", "client"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "server":
        return server(a.connections)
    if a.role == "client":
        return client(a.port, a.connections)
    if not os.access("/proc/slabinfo", os.R_OK):
        sys.exit("error: /proc/slabinfo is not readable: run as root")
    print(f"kernel {os.uname().release}, {os.cpu_count()} cores", flush=True)
    for i in range(a.runs):
        print(json.dumps(one_run(a.connections)), flush=True)


if __name__ == "__main__":
    main()
