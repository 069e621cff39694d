#!/usr/bin/env python3
"""Redis memory and CPU per online user for the routers' presence, for docs/capacity.md.

Replays against a scratch Redis what a router's presence intake sends for one
edge's reports (`engine/src/presence/redis.rs`, `write`): per
report a read pipeline (`HGET` of the user's detail, `SMEMBERS` of their set),
then one write pipeline (the edge's keys, per user the `TRANSITION` script, the
sweep set, the detail hash, the company's `CLIENT_PUT` script). The two Lua
scripts are read from that file at run time, so this measures the code as it
is. Reports of `--batch` users (the edge sends one per 100 ms while users come
and go, up to 10,000 users), first every user coming online (a detail with one
mailbox, one WebSocket session, a client company), then every user leaving.

It prints Redis's `used_memory` per online user, and its main thread's CPU
(`INFO cpu`) per user coming online and per user going offline. Each report
reaches every root and is recorded once per root, so a deployment pays these
per root.

Usage: python3 bench/redis_presence.py [--users 100000] [--batch 1000]
    [--companies 100] [--without-companies] [--port 6397] [--redis-server redis-server]
Starts its own redis-server (no persistence) on 127.0.0.1:--port, stops it at
the end. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRESENCE_RS = REPO / "engine/src/presence/redis.rs"
PREFIX = "herald"
USER_TTL_MS = 7 * 24 * 3600 * 1000
EDGE = "edge-07"
BOOT = "0123456789abcdef"
MEMBER = f"{EDGE}:{BOOT}"


def lua(name: str) -> str:
    """The body of `const NAME: &str = r"...";` in presence.rs."""
    text = PRESENCE_RS.read_text()
    m = re.search(rf'const {name}: &str = r"(.*?)";', text, re.S)
    if not m:
        sys.exit(f"error: no const {name} in {PRESENCE_RS}")
    return m.group(1)


class Redis:
    """A minimal RESP2 client: pipelines of commands, replies parsed."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 20)
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def pipeline(self, commands: list[list]) -> list:
        out = bytearray()
        for cmd in commands:
            out += b"*%d\r\n" % len(cmd)
            for arg in cmd:
                a = arg if isinstance(arg, bytes) else str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return [self._reply() for _ in commands]

    def info(self, section: str) -> dict[str, str]:
        text = self.pipeline([["INFO", section]])[0].decode()
        return dict(l.split(":", 1) for l in text.splitlines() if ":" in l)


def cpu(r: Redis) -> float:
    i = r.info("cpu")
    if "used_cpu_user_main_thread" in i:
        return float(i["used_cpu_user_main_thread"]) + float(i["used_cpu_sys_main_thread"])
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def report(r: Redis, users: list[str], online: bool, companies: int, transition: str,
           client_put: str | None) -> None:
    """One report, as `RedisPresence::write` sends it (no other edge alive)."""
    k = lambda s: f"{PREFIX}:{s}"  # noqa: E731
    reads = []
    for u in users:
        reads += [["HGET", k(f"prd:{u}"), MEMBER], ["SMEMBERS", k(f"pr:{u}")]]
    r.pipeline(reads)
    w = [["SET", k(f"edge:{EDGE}"), BOOT, "PX", 35000],
         ["SET", k(f"edge-seen:{EDGE}"), BOOT, "PX", USER_TTL_MS],
         ["SADD", k("procs"), MEMBER], ["PEXPIRE", k("procs"), USER_TTL_MS]]
    pu = k(f"pu:{MEMBER}")
    for u in users:
        w.append(["EVAL", transition, 1, k(f"pr:{u}"), "add" if online else "del", MEMBER,
                  USER_TTL_MS])
        w.append(["SADD" if online else "SREM", pu, u])
    w.append(["PEXPIRE", pu, USER_TTL_MS])
    for u in users:
        client = f"company-{int(u.split('-')[1]) % companies:05d}"
        field = f"{MEMBER}\n{u}"
        detail = k(f"prd:{u}")
        if online:
            js = json.dumps([{"site": "", "client": client, "since_ms": 1795698000123,
                              "sessions": {"websocket": 1}}], separators=(",", ":"))
            w += [["HSET", detail, MEMBER, js], ["PEXPIRE", detail, USER_TTL_MS]]
        else:
            w.append(["HDEL", detail, MEMBER])
        if client_put is not None:
            w.append(["EVAL", client_put, 2, k("{pc}:names"), k(f"{{pc}}:c:{client}"), client,
                      field, 1 if online else 0, USER_TTL_MS])
    r.pipeline(w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--companies", type=int, default=100)
    ap.add_argument("--port", type=int, default=6397)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--without-companies", action="store_true",
                    help="leave out the company script (its {pc} keys share one hash slot): "
                         "the difference is the part one cluster master takes")
    a = ap.parse_args()
    transition = lua("TRANSITION")
    client_put = None if a.without_companies else lua("CLIENT_PUT")
    server = subprocess.Popen(
        [a.redis_server, "--port", str(a.port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--logfile", ""],
        stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                r = Redis(a.port)
                r.pipeline([["PING"]])
                break
            except (ConnectionError, OSError, RuntimeError):
                if time.monotonic() > deadline:
                    sys.exit(f"error: redis-server on port {a.port} did not start")
                time.sleep(0.05)
        version = r.info("server")["redis_version"]
        users = [f"user-{i:08d}" for i in range(a.users)]
        batches = [users[i:i + a.batch] for i in range(0, len(users), a.batch)]
        mem0 = int(r.info("memory")["used_memory"])
        c0 = cpu(r)
        for b in batches:
            report(r, b, True, a.companies, transition, client_put)
        c1 = cpu(r)
        mem1 = int(r.info("memory")["used_memory"])
        for b in batches:
            report(r, b, False, a.companies, transition, client_put)
        c2 = cpu(r)
        mem2 = int(r.info("memory")["used_memory"])
        print(json.dumps({
            "redis": version, "users": a.users, "batch": a.batch,
            "companies": 0 if a.without_companies else a.companies,
            "memory_per_online_user_bytes": round((mem1 - mem0) / a.users),
            "memory_left_per_user_after_offline_bytes": round((mem2 - mem0) / a.users),
            "cpu_us_per_user_online": round((c1 - c0) / a.users * 1e6, 1),
            "cpu_us_per_user_offline": round((c2 - c1) / a.users * 1e6, 1),
        }))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
