"""What the distributed benchmarks (edge_scaling.py, failover.py) share: a
deployment started by `deploy/up` in a state directory of their own, driven
with the distributed tests' helpers (tests/distributed/herald_dist.py), and a
process's CPU read from /proc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "distributed"))

from herald_dist import Client, Deployment  # noqa: E402 - after the path is set

CLK = os.sysconf("SC_CLK_TCK")
# How long a deployment may take to serve after a start or a routers'
# restart: targeted routers route to every edge for routing.stale_ms (35 s
# by default) and show they trust the edges with the edges' next report.
READY_S = 180.0


def cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def routing_toml(mode: str, stale_ms: int | None = None) -> str:
    """The routers' [routing] section."""
    extra = f"stale_ms = {stale_ms}\n" if stale_ms else ""
    return f'[routing]\nmode = "{mode}"\n{extra}'


def deploy(top: Path, bins: Path, n_edges: int, offset: int, router_toml: str,
           edge_toml: str = "") -> Deployment:
    """Start a deployment (deploy/up) under `top`, with release binaries
    from `bins`, and wait until it serves."""
    router = top / "router.toml"
    router.write_text(router_toml)
    args = ["--state-dir", str(top / "state"), "--bin-dir", str(bins), "--edges", str(n_edges),
            "--port-offset", str(offset), "--router-config", str(router), "--timeout", "90"]
    if edge_toml:
        edge = top / "edge.toml"
        edge.write_text(edge_toml)
        args += ["--edge-config", str(edge)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.setdefault("RUST_LOG", "warn")
    res = subprocess.run([str(REPO / "deploy" / "up"), *args], capture_output=True, text=True,
                         timeout=600, env=env, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise SystemExit(f"deploy/up failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    dep = Deployment.from_state(top / "state", args)
    dep.routing = "targeted" if 'mode = "targeted"' in router_toml else "fanout"
    dep.wait_ready(READY_S)
    return dep


def down(top: Path) -> None:
    """Stop the deployment under `top` and delete its state."""
    subprocess.run([str(REPO / "deploy" / "down"), "--state-dir", str(top / "state"),
                    "--purge", "--timeout", "20"], capture_output=True, timeout=300,
                   stdin=subprocess.DEVNULL)
    shutil.rmtree(top, ignore_errors=True)


def root_pids(dep: Deployment) -> dict[str, int]:
    """Each root's RabbitMQ VM (beam.smp; deploy/up records it beside the
    node's start script)."""
    return {r: int((dep.state / "run" / f"{r}.beam.pid").read_text().split()[0])
            for r in dep.roots}


def switch_mode(dep: Deployment, router_toml: str) -> None:
    """Restart both routers with this TOML: it replaces the file deploy/up
    was given (`--router-config`, copied to each router it starts), and
    the routers are killed and started again."""
    given = Path(dep.up_args[dep.up_args.index("--router-config") + 1])
    given.write_text(router_toml)
    for r in dep.routers:
        dep.kill(r)
    dep.up_again()
    dep.routing = "targeted" if 'mode = "targeted"' in router_toml else "fanout"
    dep.wait_ready(READY_S)


def session(dep: Deployment, uid: str, tap, headers: dict | None = None) -> Client:
    """A subscribed stomp.py session of `uid` through HAProxy, every event
    to `tap`, `.edge` the edge it landed on. The socket's read timeout is lifted once connected: a
    benchmark's session may sit idle longer than any heart-beat it would
    ask for (stomp.py drops the connection on a read timeout)."""
    c = dep.client(uid, headers=headers, tap=tap, subscribe=False)
    c.read_timeout(None)
    c.subscribe()
    return c
