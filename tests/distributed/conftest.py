"""Fixtures of the distributed end-to-end tests.

One deployment per session, brought up by `deploy/up` on loopback with a
fresh state directory (two RabbitMQ roots, the routers' Redis, two routers,
three edges, HAProxy, Varnish in front of the routers)
from binaries that are already built, the routers configured by
router.toml beside this file (`deploy/up --router-config`: callbacks may
reach 127.0.0.1, a short claim lease), and torn down with
`deploy/down --purge`. Tests that stop or kill something put it back before
they end; before every test `wait_ready` checks that every edge is healthy
and UP in HAProxy and that every router and edge consumes on every root.

Environment:
  HERALD_DIST_BIN_DIR  where herald-router and herald-gateway are (default:
                       target/debug, under $CARGO_TARGET_DIR if set: what
                       scripts/test.sh builds)
  HERALD_DIST_KEEP=1   keep the state directory (logs, broker data) after
                       the run instead of purging it
  HERALD_DIST_PORT_OFFSET
                       deploy/up --port-offset (default: the first of 2000,
                       2010, ... whose ports are all free, so the suite runs
                       beside a deployment on the default ports)
  HERALD_DIST_ROUTING  the routers' routing.mode: fanout (default) or
                       targeted; targeted adds TARGETED_ROUTER below to
                       router.toml and has the edges send presence
                       snapshots every 3 s (deploy/up --edge-config), and
                       the tests marked targeted_only run (they skip otherwise)
  HERALD_DIST_STATE    use the deployment already running from this state
                       directory (deploy/up --state-dir DIR) instead of
                       starting one; it is left running (for iterating on
                       a test: tests that stop or kill something restore it).
                       Start it with --router-config tests/distributed/router.toml
                       for the callback tests.
Logs of every process are copied next to pytest's temporary directory when a
test failed (the path is printed at the end).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from herald_dist import REPO, Deployment, parse_env_file, wait_until

DEPLOY = REPO / "deploy"
# The routers' TOML (deploy/up --router-config).
ROUTER_CONFIG = Path(__file__).resolve().parent / "router.toml"

# What HERALD_DIST_ROUTING=targeted adds to the routers' TOML: targeted
# routing, trusting an edge 15 s after its last report (the edges report
# every 10 s) and routing to every edge for the first 15 s of a view.
TARGETED_ROUTER = '\n[routing]\nmode = "targeted"\nstale_ms = 15000\n'
# And to the edges' (deploy/up --edge-config): a snapshot every 3 s, so a
# restarted router trusts its view again within seconds (60 s by default).
TARGETED_EDGE = "[edge]\npresence_sync_ms = 3000\n"


def routing_mode() -> str:
    mode = os.environ.get("HERALD_DIST_ROUTING", "fanout")
    if mode not in ("fanout", "targeted"):
        pytest.fail(f"HERALD_DIST_ROUTING={mode!r}: fanout or targeted", pytrace=False)
    return mode


# pika logs every refused connection at ERROR with a traceback; the tests
# refuse connections on purpose (a root down) and report real failures
# themselves.
logging.getLogger("pika").setLevel(logging.CRITICAL)


def bin_dir() -> Path:
    env = os.environ.get("HERALD_DIST_BIN_DIR")
    if env:
        return Path(env).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "debug"


def deploy_env() -> dict[str, str]:
    # The deployment decides every Herald setting: nothing from the caller's
    # shell (HERALD_JWT_SECRET, HERALD_DEPLOY_STATE ...) leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.setdefault("RUST_LOG", "info")
    return env


# deploy/up's ports (deploy/README.md), before --port-offset.
DEPLOY_PORTS = [5681, 5682, 25681, 25682, 6390, 9101, 9102, 9103, 9201, 9202, 8000, 8404,
                8100]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_offset() -> int:
    env = os.environ.get("HERALD_DIST_PORT_OFFSET")
    if env:
        return int(env)
    for offset in range(2000, 2200, 10):
        if all(port_free(p + offset) for p in DEPLOY_PORTS):
            return offset
    pytest.fail("no free set of deploy/up ports with --port-offset 2000..2190", pytrace=False)


def tagged_processes(state: Path) -> dict[int, str]:
    """Live processes carrying this deployment's tag (deploy/lib.sh): pid ->
    command line."""
    tag = f"HERALD_DEPLOY_TAG={state}#".encode()
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            if not any(v.startswith(tag) for v in environ.split(b"\0")):
                continue
            if (proc / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            out[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return out


def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=deploy_env(), stdin=subprocess.DEVNULL)


_logs_copied: list[Path] = []


@pytest.fixture(scope="session")
def deployment(request, tmp_path_factory):
    bins = bin_dir()
    existing = os.environ.get("HERALD_DIST_STATE")
    if existing:
        state = Path(existing).resolve()
        # deploy/up again (a test restoring what it killed) must start it on
        # the ports and with the edges it runs with, read back from
        # deployment.env (router1 listens on 9201 + the offset).
        env = parse_env_file(state / "deployment.env")
        offset = int(env["ADDR_router1"].rpartition(":")[2]) - 9201
        dep = Deployment.from_state(state, ["--state-dir", str(state), "--bin-dir", str(bins),
                                            "--port-offset", str(offset),
                                            "--edges", str(len(env["EDGES"].split()))])
        dep.routing = routing_mode()
        dep.wait_ready()
        yield dep
        return
    for b in ("herald-router", "herald-gateway"):
        if not (bins / b).is_file():
            pytest.fail(f"{bins / b} does not exist: build it (cargo build -p herald-router "
                        "-p herald-gateway) or set HERALD_DIST_BIN_DIR")
    # Short path: HAProxy's admin socket lives under it (sun_path is 108 bytes).
    top = Path(tempfile.mkdtemp(prefix="herald-dist-"))
    state = top / "state"
    router_config = ROUTER_CONFIG
    extra = []
    if routing_mode() == "targeted":
        router_config = top / "router.toml"
        router_config.write_text(ROUTER_CONFIG.read_text() + TARGETED_ROUTER)
        edge_config = top / "edge.toml"
        edge_config.write_text(TARGETED_EDGE)
        extra = ["--edge-config", str(edge_config)]
    up_args = ["--state-dir", str(state), "--bin-dir", str(bins), "--timeout", "60",
               "--port-offset", str(port_offset()), "--router-config", str(router_config),
               *extra]
    down = [str(DEPLOY / "down"), "--state-dir", str(state), "--timeout", "20"]
    keep = os.environ.get("HERALD_DIST_KEEP") == "1"
    try:
        res = run([str(DEPLOY / "up"), *up_args], timeout=300)
        if res.returncode != 0:
            pytest.fail(f"deploy/up failed (exit {res.returncode}):\n{res.stdout[-3000:]}"
                        f"\n{res.stderr[-3000:]}", pytrace=False)
        dep = Deployment.from_state(state, up_args)
        dep.routing = routing_mode()
        dep.wait_ready()
        yield dep
    finally:
        if request.session.testsfailed and (state / "logs").is_dir():
            dest = tmp_path_factory.getbasetemp() / "deploy-logs"
            shutil.copytree(state / "logs", dest, dirs_exist_ok=True)
            _logs_copied.append(dest)
        res = run(down + ([] if keep else ["--purge"]), timeout=180)
        if not keep:
            shutil.rmtree(top, ignore_errors=True)
        assert res.returncode == 0, f"deploy/down failed:\n{res.stdout}\n{res.stderr}"
        # deploy/down stops everything deploy/up started (whatever it
        # recorded or not): no process with the deployment's tag is left.
        wait_until("deploy/down to leave no process of the deployment behind",
                   lambda: not tagged_processes(state), timeout=10)


@pytest.fixture
def dep(deployment):
    """The deployment, ready for a test; the test's STOMP sessions are closed
    after it."""
    deployment.wait_ready()
    try:
        yield deployment
    finally:
        deployment.close_sessions()


def pytest_terminal_summary(terminalreporter):
    for path in _logs_copied:
        terminalreporter.write_line(f"distributed deployment logs: {path}")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "targeted_only: needs routing.mode = targeted (HERALD_DIST_ROUTING=targeted)")
