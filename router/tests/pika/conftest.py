"""Fixtures for the pika tests.

The router under test is the real `herald-router` binary (path from
HERALD_ROUTER_BIN, default target/debug/herald-router under CARGO_TARGET_DIR
or the repository), started on a free 127.0.0.1 port against the RabbitMQ
at HERALD_TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/%2f),
with exchange and queue names of its own (a random suffix), deleted at the
end. The backend is pika, which knows nothing about Herald.

Run: python -m venv .venv && .venv/bin/pip install -r router/tests/pika/requirements.txt
     cargo build -p herald-router && .venv/bin/python -m pytest router/tests/pika
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest

REPO = Path(__file__).resolve().parents[3]
AMQP_URL = os.environ.get("HERALD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
TIMEOUT = 10.0


def router_bin() -> Path:
    env = os.environ.get("HERALD_ROUTER_BIN")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "herald-router"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Names:
    exchange: str
    queue: str
    dead_exchange: str
    dead_queue: str
    edges_exchange: str
    edge_queue: str


class Router:
    """One herald-router process, and a pika connection playing backend and edge."""

    def __init__(self, workdir: Path):
        s = f".pika-{secrets.token_hex(6)}"
        self.names = Names(
            exchange=f"herald{s}",
            queue=f"herald.publications{s}",
            dead_exchange=f"herald.dead{s}",
            dead_queue=f"herald.dead{s}",
            edges_exchange=f"herald.edges{s}",
            edge_queue=f"herald.edges{s}.edge",
        )
        self.port = free_port()
        n = self.names
        config = workdir / "router.toml"
        config.write_text(
            f'listen = "127.0.0.1:{self.port}"\napi_keys = ["k"]\n'
            f'[amqp]\nurl = "{AMQP_URL}"\n'
            f'[amqp.topology]\nexchange = "{n.exchange}"\nqueue = "{n.queue}"\n'
            f'dead_exchange = "{n.dead_exchange}"\ndead_queue = "{n.dead_queue}"\n'
            f'edges_exchange = "{n.edges_exchange}"\n'
        )
        self.log = open(workdir / "router.log", "w")
        self.proc = subprocess.Popen(
            [str(router_bin()), "--config", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        self.channel = self.conn.channel()
        self.channel.confirm_delivery()
        # What the router declares (idempotent), so the edge queue can be
        # bound before it is up.
        self.channel.exchange_declare(n.edges_exchange, "fanout", durable=True)
        self.channel.queue_declare(n.edge_queue)
        self.channel.queue_bind(n.edge_queue, n.edges_exchange)
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            assert self.proc.poll() is None, "herald-router exited"
            assert time.monotonic() < deadline, "herald-router never connected"
            time.sleep(0.02)

    def publish(self, body: bytes, properties: pika.BasicProperties, routing_key: str = "test") -> None:
        """Publish as a backend would; raises unless the broker confirms."""
        self.channel.basic_publish(self.names.exchange, routing_key, body, properties)

    def take(self, queue: str, n: int):
        """`n` messages (method, properties, body) from `queue`, within TIMEOUT."""
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < n:
            method, props, body = self.channel.basic_get(queue, auto_ack=True)
            if method is None:
                assert time.monotonic() < deadline, f"{queue}: {len(got)} of {n} messages"
                time.sleep(0.02)
                continue
            got.append((method, props, body))
        return got

    def ready(self, queue: str) -> int:
        return self.channel.queue_declare(queue, passive=True).method.message_count

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=15)
        self.log.close()
        return code

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        n = self.names
        for q in (n.queue, n.dead_queue, n.edge_queue):
            self.channel.queue_delete(q)
        for x in (n.exchange, n.dead_exchange, n.edges_exchange):
            self.channel.exchange_delete(x)
        self.conn.close()


@pytest.fixture
def router(tmp_path):
    r = Router(tmp_path)
    try:
        yield r
    finally:
        r.cleanup()
