"""Fixtures for the independent-client tests.

The gateway under test is the real `herald-gateway` binary (path from
HERALD_GATEWAY_BIN, default target/debug/herald-gateway under
CARGO_TARGET_DIR or the repository), started on a free 127.0.0.1 port with a
known HS256 secret and API key. The client is stomp.py's WSConnection, which
knows nothing about Herald: if it works here, a stock STOMP client works.

Every wait is an event or a queue with a deadline; nothing sleeps to
synchronise.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
import requests
import stomp

REPO = Path(__file__).resolve().parents[2]
SECRET = "herald-test-secret-0123456789abcdef-0123456789abcdef-0123456789ab"
API_KEY = "test-api-key"
DESTINATION = "/user/notifications"

# How long any single expected event may take. Generous for a loaded 2-core
# CI machine; a passing test never waits this long.
TIMEOUT = 10.0
# How long to listen for something that must NOT arrive, after a later
# message has already proven ordering (see `assert_silent`).
QUIET = 0.3
# sysexits EX_UNAVAILABLE: the gateway could not bind its port.
EX_UNAVAILABLE = 69


def gateway_bin() -> Path:
    env = os.environ.get("HERALD_GATEWAY_BIN")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "herald-gateway"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token(
    sub: str,
    client: str | None = None,
    site: str | None = None,
    exp_in: int = 3600,
    secret: str = SECRET,
    algorithm: str = "HS256",
) -> str:
    claims: dict = {"sub": sub, "exp": int(time.time()) + exp_in}
    if client is not None:
        claims["client"] = client
    if site is not None:
        claims["site"] = site
    return jwt.encode(claims, secret, algorithm=algorithm)


class Gateway:
    """One herald-gateway process."""

    def __init__(self, workdir: Path, config_toml: str | None = None):
        self.workdir = workdir
        self.config_toml = config_toml
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path = workdir / "gateway.log"
        self.clients: list[Client] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = gateway_bin()
        if not binary.is_file():
            pytest.fail(f"{binary} does not exist: build it (cargo build -p herald-gateway) "
                        "or set HERALD_GATEWAY_BIN")
        args = [str(binary), "--jwt-secret", SECRET, "--api-key", API_KEY,
                "--data-dir", str(self.workdir / "data")]
        if self.config_toml is not None:
            path = self.workdir / "gateway.toml"
            path.write_text(self.config_toml)
            args += ["--config", str(path)]
        # The test decides every setting: no HERALD_* from the caller's shell.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        env.setdefault("RUST_LOG", "info")
        for _attempt in range(5):
            self.port = free_port()
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                args + ["--listen", f"127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
            log.close()
            if self._wait_healthy():
                return
            code = self.proc.poll()
            if code == EX_UNAVAILABLE:
                continue  # another process took the port in between: retry
            self.kill()
            self.proc = None
            pytest.fail(f"gateway did not become healthy (exit {code}):\n{self.log()}")
        self.proc = None
        pytest.fail(f"gateway could not bind a port:\n{self.log()}")

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                r = requests.get(f"{self.base}/healthz", timeout=1)
                if r.status_code == 200:
                    return True
            except (requests.ConnectionError, requests.Timeout):
                # Not listening yet, or slow to answer on a loaded machine: the
                # deadline, not one probe, decides.
                pass
            time.sleep(0.02)  # polling interval, bounded by the deadline
        return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"gateway did not exit within {timeout}s of SIGTERM:\n{self.log()}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def publish(self, body, expect: int = 202) -> dict:
        r = requests.post(f"{self.base}/v1/notifications", json=body,
                          headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT)
        assert r.status_code == expect, f"{r.status_code} {r.text}"
        return r.json()

    def publish_one(self, **fields) -> str:
        ids = self.publish(fields)["ids"]
        assert len(ids) == 1
        return ids[0]

    def metrics(self) -> str:
        return requests.get(f"{self.base}/metrics", timeout=TIMEOUT).text

    def client(self, **kwargs) -> "Client":
        """A new stomp.py client; closed before the gateway stops."""
        c = Client(self.port, **kwargs)
        self.clients.append(c)
        return c

    def stop(self) -> None:
        """Close the clients still open, SIGTERM, and require exit code 0."""
        if self.proc is None:
            return  # never started; start() already failed the test
        for c in self.clients:
            c.close(wait=False)
        code = self.terminate()
        assert code == 0, f"gateway exited {code} on SIGTERM:\n{self.log()}"


@dataclass
class Event:
    kind: str  # connected | message | receipt | error | disconnected
    headers: dict
    body: str


class _Listener(stomp.ConnectionListener):
    def __init__(self, events: "queue.Queue[Event]"):
        self.events = events

    def on_connected(self, frame):
        self.events.put(Event("connected", dict(frame.headers), frame.body))

    def on_message(self, frame):
        self.events.put(Event("message", dict(frame.headers), frame.body))

    def on_receipt(self, frame):
        self.events.put(Event("receipt", dict(frame.headers), frame.body))

    def on_error(self, frame):
        self.events.put(Event("error", dict(frame.headers), frame.body))

    def on_disconnected(self):
        self.events.put(Event("disconnected", {}, ""))


class Client:
    """A stomp.py WebSocket connection and the queue of what it received."""

    def __init__(self, port: int, ws_path: str = "/ws"):
        self.conn = stomp.WSConnection(
            [("127.0.0.1", port)], ws_path=ws_path,
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            reconnect_attempts_max=1, timeout=TIMEOUT)
        self.events: queue.Queue[Event] = queue.Queue()
        self.conn.set_listener("herald-test", _Listener(self.events))
        self._receipts = 0

    def next(self, timeout: float = TIMEOUT) -> Event:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"nothing received within {timeout}s") from None

    def expect(self, kind: str, timeout: float = TIMEOUT) -> Event:
        e = self.next(timeout)
        assert e.kind == kind, f"expected {kind}, got {e}"
        return e

    def open(self, passcode: str | None = None, headers: dict | None = None) -> None:
        """Open the WebSocket and send CONNECT, without waiting."""
        self.conn.connect(passcode=passcode, headers=headers or {}, wait=False)

    def connect(self, passcode: str | None = None, headers: dict | None = None) -> Event:
        """CONNECT and wait for CONNECTED."""
        self.open(passcode, headers)
        return self.expect("connected")

    def subscribe(self, destination: str = DESTINATION, sub_id: str = "sub-0",
                  headers: dict | None = None, wait_receipt: bool = True) -> None:
        self._receipts += 1
        receipt = f"r-{self._receipts}"
        h = dict(headers or {})
        h["receipt"] = receipt
        self.conn.subscribe(destination, id=sub_id, ack="auto", headers=h)
        if wait_receipt:
            r = self.expect("receipt")
            assert r.headers["receipt-id"] == receipt

    def message(self, timeout: float = TIMEOUT) -> Event:
        return self.expect("message", timeout)

    def assert_silent(self, timeout: float = QUIET) -> None:
        """Nothing more is queued (call after ordering has been proven)."""
        try:
            e = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected {e}")

    def close(self, wait: bool = True) -> None:
        """Send DISCONNECT (with a receipt); with `wait`, until the socket closes."""
        if not self.conn.is_connected():
            self.conn.transport.stop()
            return
        self.conn.disconnect()
        if wait:
            deadline = time.monotonic() + TIMEOUT
            while True:
                e = self.next(max(0.0, deadline - time.monotonic()))
                if e.kind == "disconnected":
                    return


def subscribed(gw: Gateway, user: str, client: str | None = None, site: str | None = None,
               headers: dict | None = None) -> Client:
    c = gw.client()
    c.connect(token(user, client=client, site=site))
    c.subscribe(headers=headers)
    return c


@pytest.fixture
def make_gateway(tmp_path_factory):
    """Start gateways (optionally with a TOML config). At teardown each one's
    clients are closed, then SIGTERM, and it must exit 0."""
    started: list[Gateway] = []

    def make(config_toml: str | None = None) -> Gateway:
        gw = Gateway(tmp_path_factory.mktemp("gateway"), config_toml)
        started.append(gw)
        gw.start()
        return gw

    yield make
    for gw in started:
        gw.stop()


@pytest.fixture
def gateway(make_gateway) -> Gateway:
    return make_gateway()
