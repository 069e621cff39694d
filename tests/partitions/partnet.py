"""Hosts of the partition tests: network namespaces on one bridge.

Each host (a RabbitMQ root, the routers' Redis, a router, two edges) is a
network namespace `<prefix>-<host>` with one veth pair: `eth0` inside, on
10.77.<n>.<k>/24, the other end `<prefix>-<host>` on the bridge
`<prefix>br` in this (the main) namespace, which has 10.77.<n>.1: the tests'
clients (pika, stomp.py, requests) run here. No namespace has a default
route and the main namespace routes 10.77.<n>.0/24 to the bridge only, so
no packet of the tests leaves the machine.

A cut is silent, as a datacenter partition is: packets vanish, nobody gets
a reset. `cut(a, b)` adds a blackhole route to the other's address in both
namespaces (what either sends to the other is dropped before it leaves);
`isolate(host)` sets the host's port on the bridge down (its carrier goes:
nothing in or out, browsers included). The kernel here has no netem, so
there is no loss rate or delay, only all or nothing.

`Net.destroy` (and scripts/partition-tests.sh's trap, with the same
prefix) ends every process in the namespaces (`ip netns pids`), deletes the
namespaces and the bridge.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

# The last octet of each host's address.
HOSTS = {"root": 2, "redis": 3, "router": 4, "edge1": 11, "edge2": 12}


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


def free_subnet() -> int:
    """The first 10.77.<n>.0/24 (n from 0) that no route of this namespace
    uses: two runs at once get different subnets."""
    used = ip("-4", "route", "show", "table", "all").stdout
    for n in range(0, 250):
        if f"10.77.{n}." not in used:
            return n
    raise RuntimeError("no free 10.77.<n>.0/24 subnet")


class Net:
    def __init__(self, prefix: str, subnet: int):
        if not 1 <= len(prefix) <= 8 or not prefix.replace("-", "").isalnum():
            raise ValueError(f"prefix {prefix!r}: 1 to 8 letters or digits (interface names)")
        self.prefix = prefix
        self.base = f"10.77.{subnet}"
        self.bridge = f"{prefix}br"
        self.cuts: set[tuple[str, str]] = set()
        self.isolated: set[str] = set()

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def addr(self, host: str) -> str:
        return f"{self.base}.{HOSTS[host]}"

    @property
    def gateway_addr(self) -> str:
        """The main namespace's address on the bridge (the clients')."""
        return f"{self.base}.1"

    def create(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway_addr}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for host in HOSTS:
            ns, port = self.ns(host), self.ns(host)
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", port, "master", self.bridge)
            ip("link", "set", port, "up")
            ip("-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")

    # -- faults --------------------------------------------------------------
    def cut(self, a: str, b: str) -> None:
        """Packets between hosts a and b vanish (both directions)."""
        ip("-n", self.ns(a), "route", "add", "blackhole", f"{self.addr(b)}/32")
        ip("-n", self.ns(b), "route", "add", "blackhole", f"{self.addr(a)}/32")
        self.cuts.add((a, b))

    def heal(self, a: str, b: str) -> None:
        ip("-n", self.ns(a), "route", "del", "blackhole", f"{self.addr(b)}/32")
        ip("-n", self.ns(b), "route", "del", "blackhole", f"{self.addr(a)}/32")
        self.cuts.discard((a, b))

    def isolate(self, host: str) -> None:
        """The host's port on the bridge goes down: nothing in or out."""
        ip("link", "set", self.ns(host), "down")
        self.isolated.add(host)

    def rejoin(self, host: str) -> None:
        ip("link", "set", self.ns(host), "up")
        self.isolated.discard(host)

    def heal_all(self) -> None:
        for a, b in list(self.cuts):
            self.heal(a, b)
        for h in list(self.isolated):
            self.rejoin(h)

    # -- processes -----------------------------------------------------------
    def spawn(self, host: str, cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        """Run `cmd` in the host's namespace (`ip netns exec` execs it: the
        pid is the command's), output to `log`."""
        out = open(log, "ab")  # noqa: SIM115 - the child keeps it
        try:
            return subprocess.Popen(["ip", "netns", "exec", self.ns(host), *cmd], env=env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()

    def run(self, host: str, cmd: list[str], env: dict[str, str], timeout: float):
        return subprocess.run(["ip", "netns", "exec", self.ns(host), *cmd], env=env,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def pids(self, host: str) -> list[int]:
        res = ip("netns", "pids", self.ns(host), check=False)
        return [int(p) for p in res.stdout.split()]

    def destroy(self, grace: float = 10.0) -> None:
        """End every process in the namespaces (TERM, then KILL after
        `grace` seconds), delete the namespaces and the bridge."""
        destroy(self.prefix, grace)


def destroy(prefix: str, grace: float = 10.0) -> None:
    namespaces = [f"{prefix}-{h}" for h in HOSTS]
    existing = set(ip("netns", "list", check=False).stdout.split())
    namespaces = [ns for ns in namespaces if ns in existing]

    def pids() -> list[int]:
        out = []
        for ns in namespaces:
            res = ip("netns", "pids", ns, check=False)
            out += [int(p) for p in res.stdout.split()]
        return out

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids() and time.monotonic() < deadline:
            time.sleep(0.1)  # polling for the processes to end, bounded
        if not pids():
            break
    for ns in namespaces:
        ip("netns", "del", ns, check=False)
    ip("link", "del", f"{prefix}br", check=False)
