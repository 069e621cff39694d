"""Fixtures of the partition tests (run them with scripts/partition-tests.sh).

One deployment per session (cluster.py) on hosts made of network namespaces
(partnet.py), torn down at the end: every process in the namespaces ended,
the namespaces and the bridge deleted (scripts/partition-tests.sh's trap
does it again if pytest itself is killed). Needs root (`ip netns`).

Environment:
  HERALD_PART_BIN_DIR  where herald-router and herald-gateway are (default:
                       target/debug, under $CARGO_TARGET_DIR if set)
  HERALD_PART_PREFIX   the namespaces' and interfaces' name prefix (default
                       hp<pid>; the wrapper script sets it for its trap)
  HERALD_PART_KEEP=1   keep the state directory (logs) after the run
  HERALD_PART_FIGURES  append each case's measured figures (JSON lines) here
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from cluster import Cluster
from partnet import Net, free_subnet

REPO = Path(__file__).resolve().parents[2]
logging.getLogger("pika").setLevel(logging.CRITICAL)
logging.getLogger("stomp.py").setLevel(logging.CRITICAL)


def bin_dir() -> Path:
    env = os.environ.get("HERALD_PART_BIN_DIR")
    if env:
        return Path(env).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "debug"


@pytest.fixture(scope="session")
def cluster(request):
    if os.geteuid() != 0:
        pytest.fail("the partition tests build hosts from network namespaces (ip netns): "
                    "run them as root (scripts/partition-tests.sh)", pytrace=False)
    bins = bin_dir()
    for b in ("herald-router", "herald-gateway"):
        if not (bins / b).is_file():
            pytest.fail(f"{bins / b} does not exist: build it (cargo build -p herald-router "
                        "-p herald-gateway) or set HERALD_PART_BIN_DIR", pytrace=False)
    prefix = os.environ.get("HERALD_PART_PREFIX", f"hp{os.getpid() % 100000}")
    state = Path(tempfile.mkdtemp(prefix="herald-part-"))
    net = Net(prefix, free_subnet())
    c = Cluster(net=net, state=state, bins=bins)
    try:
        net.create()
        c.start()
        yield c
    finally:
        failed = request.session.testsfailed
        net.destroy()
        for p in c.procs.values():
            try:
                p.wait(timeout=5)
            except Exception:  # noqa: BLE001 - ended by destroy; reaped if it can be
                pass
        if failed or os.environ.get("HERALD_PART_KEEP") == "1":
            print(f"\npartition tests: logs kept in {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def part(cluster):
    """The deployment, whole again: every cut healed, every process alive
    and ready, both edges consuming, after the test its sessions closed."""
    cluster.wait_whole()
    try:
        yield cluster
    finally:
        cluster.close_sessions()
        cluster.net.heal_all()


@pytest.fixture
def figures(request):
    """A dict the test fills with its measured figures, printed (and
    appended to $HERALD_PART_FIGURES) at the end."""
    out: dict = {"case": request.node.name}
    yield out
    line = json.dumps(out)
    print(f"\nFIGURES {line}")
    path = os.environ.get("HERALD_PART_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
