"""Fixtures of the backend examples' tests (examples/*).

Each example runs as a backend team would run it, configured only by its
environment variables, against real Herald processes:

- the HTTP examples (Python, Node, Go, PHP, Java) as docs/examples.md says
  to run them (its recipe blocks, run as written), against the quickstart's
  standalone `herald-gateway` (HERALD_GATEWAY_BIN, dev mode:
  test_http_examples.py);
- the AMQP publishers (pika, amqplib) against a `herald-router`
  (HERALD_ROUTER_BIN) and an edge `herald-gateway`, both on the RabbitMQ at
  HERALD_TEST_AMQP_URL and the router's delayed store in the Redis at
  HERALD_TEST_REDIS_URL (what scripts/test.sh starts), with exchange, queue
  and key names of their own (a random suffix), removed at the end.

What an example did is then checked independently of its own output:
stomp.py sessions receive what it published, the test reads the delayed
notification's status itself. Every wait polls with a deadline.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
AMQP_URL = os.environ.get("HERALD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
REDIS_URL = os.environ.get("HERALD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _load_stomp_harness():
    """tests/python's conftest, as a plain module: its Gateway (one
    herald-gateway process) and stomp.py Client are what these tests need."""
    path = REPO / "tests" / "python" / "conftest.py"
    spec = importlib.util.spec_from_file_location("herald_stomp_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


harness = _load_stomp_harness()
Gateway = harness.Gateway
Client = harness.Client
token = harness.token
SECRET = harness.SECRET
API_KEY = harness.API_KEY
TIMEOUT = harness.TIMEOUT
# An example process: a JVM compiling its source, or `go run` with a cold
# build cache, takes seconds on a loaded 2-core machine.
EXAMPLE_TIMEOUT = 120.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(what: str, predicate, timeout: float = TIMEOUT):
    """Poll `predicate` until it returns something truthy (returned), or fail."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported at the deadline
            last = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(0.05)  # polling interval, bounded by the deadline


@dataclass
class Run:
    """An example's finished run: its output lines as (step, rest)."""
    cmd: list[str]
    stdout: str
    stderr: str

    def lines(self, step: str) -> list[str]:
        out = []
        for line in self.stdout.splitlines():
            head, _, rest = line.partition(" ")
            if head == step:
                out.append(rest)
        return out

    def one(self, step: str) -> str:
        got = self.lines(step)
        assert len(got) == 1, f"expected one {step!r} line, got {got}:\n{self}"
        return got[0]

    def answer(self, step: str, expect: int) -> dict:
        """An HTTP step's line, `<step> <status> <json>`: its status checked, its JSON."""
        status, _, body = self.one(step).partition(" ")
        assert int(status) == expect, f"{step}: {status} {body}"
        return json.loads(body)

    def __str__(self) -> str:
        return f"$ {' '.join(self.cmd)}\n{self.stdout}\n{self.stderr}"


def run_example(cmd: list[str], env: dict[str, str], cwd: Path) -> Run:
    """Run an example to completion with only `env` (plus PATH and HOME); it must exit 0."""
    base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "GOCACHE", "GOPATH", "JAVA_HOME")
            if k in os.environ}
    proc = subprocess.run(cmd, cwd=cwd, env={**base, **env}, capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT, stdin=subprocess.DEVNULL)
    run = Run(cmd, proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{run}"
    return run


# A session waits, idle, while an example runs (a JVM compiling its source
# may take more than stomp.py's 10 s socket timeout on a loaded machine,
# which would end the session): the gateway sends heart-beats every second
# to the sessions that ask for them (`watch`).
SESSION_TOML = "[session]\nheartbeat_send_ms = 1000\n"


def watch(gw: Gateway, user: str) -> tuple[Client, str]:
    """A stomp.py session of `user` (the test's own token) subscribed and
    receiving heart-beats; and its mailbox's epoch."""
    c = gw.client()
    connected = c.connect(token(user), headers={"heart-beat": "0,1000"})
    assert connected.headers["heart-beat"].split(",")[0] == "1000", connected
    c.subscribe()
    return c, connected.headers["epoch"]


def free_port() -> int:
    return harness.free_port()


def router_bin() -> Path:
    """HERALD_ROUTER_BIN, or herald-router beside the gateway under test."""
    env = os.environ.get("HERALD_ROUTER_BIN")
    return Path(env) if env else harness.gateway_bin().parent / "herald-router"


class Distributed:
    """A herald-router and one edge herald-gateway on the test broker and Redis."""

    def __init__(self, workdir: Path):
        s = f"examples-{secrets.token_hex(5)}"
        self.exchange = f"herald.{s}"
        self.queue = f"herald.publications.{s}"
        self.dead = f"herald.dead.{s}"
        self.edges = f"herald.edges.{s}"
        self.presence = f"herald.presence.{s}"
        self.edge_id = s
        self.redis_prefix = f"herald-{s}"
        self.api_key = secrets.token_hex(16)
        self.port = free_port()
        self.workdir = workdir
        config = workdir / "router.toml"
        config.write_text(
            f'listen = "127.0.0.1:{self.port}"\napi_keys = ["{self.api_key}"]\n'
            f'[amqp]\nurl = "{AMQP_URL}"\n'
            f'[amqp.topology]\nexchange = "{self.exchange}"\nqueue = "{self.queue}"\n'
            f'dead_exchange = "{self.dead}"\ndead_queue = "{self.dead}"\n'
            f'edges_exchange = "{self.edges}"\npresence_exchange = "{self.presence}"\n'
            f'presence_queue = "{self.presence}"\n'
            f'[redis]\nurl = "{REDIS_URL}"\nprefix = "{self.redis_prefix}"\n')
        if not router_bin().is_file():
            pytest.fail(f"{router_bin()} does not exist: build it (cargo build -p herald-router) "
                        "or set HERALD_ROUTER_BIN")
        self.router_log = open(workdir / "router.log", "ab")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        env.setdefault("RUST_LOG", "info")
        self.router = subprocess.Popen([str(router_bin()), "--config", str(config)],
                                       stdin=subprocess.DEVNULL, stdout=self.router_log,
                                       stderr=subprocess.STDOUT, env=env)
        (workdir / "edge").mkdir()
        self.edge = Gateway(workdir / "edge", config_toml=(
            f'[edge]\nid = "{self.edge_id}"\nroots = ["{AMQP_URL}"]\n'
            f'exchange = "{self.edges}"\npresence_exchange = "{self.presence}"\n'
            + SESSION_TOML))

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        def ready(url: str) -> bool:
            assert self.router.poll() is None, f"herald-router exited:\n{self.router_text()}"
            return requests.get(f"{url}/readyz", timeout=1).status_code == 200
        wait_until("the router to be ready (broker and Redis)", lambda: ready(self.router_url))
        self.edge.start()
        # Ready once linked to its root, its queue declared and bound:
        # publications from then on reach it.
        wait_until("the edge to be linked to its root", lambda: ready(self.edge.base))

    def router_text(self) -> str:
        return (self.workdir / "router.log").read_text(errors="replace")[-4000:]

    def status(self, nid: str) -> dict:
        r = requests.get(f"{self.router_url}/v1/notifications/{nid}",
                         headers={"Authorization": f"Bearer {self.api_key}"}, timeout=TIMEOUT)
        assert r.status_code == 200, f"{r.status_code} {r.text}"
        return r.json()

    def dead_letters(self) -> int:
        with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as conn:
            return conn.channel().queue_declare(self.dead, passive=True).method.message_count

    def stop(self) -> None:
        """Stop both (each must exit 0 on SIGTERM), then remove their names."""
        try:
            self.edge.stop()
        finally:
            if self.router.poll() is None:
                self.router.send_signal(signal.SIGTERM)
            try:
                code = self.router.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.router.kill()
                self.router.wait()
                code = "killed after 15 s"
            self.router_log.close()
            self._cleanup()
        assert code == 0, f"herald-router exited {code} on SIGTERM:\n{self.router_text()}"

    def _cleanup(self) -> None:
        with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as conn:
            ch = conn.channel()
            for q in (self.queue, self.dead, self.presence, f"herald.edge.{self.edge_id}"):
                ch.queue_delete(q)
            for x in (self.exchange, self.dead, self.edges, self.presence):
                ch.exchange_delete(x)
        keys = subprocess.run(["redis-cli", "-u", REDIS_URL, "--scan", "--pattern",
                               f"{self.redis_prefix}*"], capture_output=True, text=True,
                              check=True).stdout.split()
        for i in range(0, len(keys), 500):
            subprocess.run(["redis-cli", "-u", REDIS_URL, "DEL", *keys[i:i + 500]],
                           capture_output=True, check=True)


@pytest.fixture(scope="module")
def distributed(tmp_path_factory):
    d = Distributed(tmp_path_factory.mktemp("distributed"))
    try:
        d.start()
        yield d
    finally:
        d.stop()
