"""The gateway behind a real HAProxy (Debian's): the browser's address from
the PROXY protocol, and TLS terminated by HAProxy.

HAProxy's configuration is haproxy/generate's, with the gateway as its one
edge and its router (a standalone gateway serves the publish API too),
`send-proxy-v2` on the edge lines (the generator's default) and
`--tls-cert` with a certificate made here by openssl (self-signed for
127.0.0.1, in the test's temporary directory, never kept). The gateway runs
with `[proxy] protocol = true` trusting 127.0.0.1 (HAProxy's address), and
browsers connect from 127.0.0.2 and 127.0.0.3. Python clients verify the
certificate against the generated one.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import requests

from conftest import API_KEY, REPO, TIMEOUT, Gateway, token

HOST = "127.0.0.1"
GATEWAY_CONFIG = """\
log_format = "json"
[proxy]
protocol = true
trusted = ["127.0.0.1/32"]
[connection_rate]
per_sec = 0.01
burst = 3
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def haproxy_bin() -> str:
    path = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.access(path, os.X_OK):
        pytest.fail("haproxy not found: apt-get install haproxy (scripts/test.sh installs it)")
    return path


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """(the certificate, the PEM HAProxy loads: certificate then key)."""
    key, cert, pem = directory / "tls.key", directory / "tls.crt", directory / "herald.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=herald-test",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    pem.write_text(cert.read_text() + key.read_text())
    return cert, pem


class Proxy:
    """One HAProxy from haproxy/generate before one gateway."""

    def __init__(self, workdir: Path, gateway: Gateway):
        self.workdir = workdir
        self.cert, pem = make_certificate(workdir)
        self.port, self.stats = free_port(), free_port()
        cfg = workdir / "haproxy.cfg"
        edge = f"{HOST}:{gateway.port}"
        subprocess.run([str(REPO / "haproxy" / "generate"), "--edges", edge, "--routers", edge,
                        "--bind", f"{HOST}:{self.port}", "--stats", f"{HOST}:{self.stats}",
                        "--tls-cert", str(pem), "--src-conn-rate", "0", "--check-inter", "200ms",
                        "--maxconn", "1000", "-o", str(cfg), "--check"],
                       check=True, capture_output=True)
        self.log = open(workdir / "haproxy.log", "ab")
        self.proc = subprocess.Popen([haproxy_bin(), "-db", "-f", str(cfg)], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.ctx = ssl.create_default_context(cafile=str(self.cert))
        deadline = time.monotonic() + TIMEOUT
        while True:  # /healthz is 200 once HAProxy's check found the edge up
            try:
                if self.get("/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert self.proc.poll() is None, f"haproxy exited {self.proc.returncode}"
            assert time.monotonic() < deadline, "haproxy did not see the gateway up"
            time.sleep(0.05)  # polling interval, bounded by the deadline

    def get(self, path: str, source: str | None = None) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPSConnection(HOST, self.port, timeout=TIMEOUT, context=self.ctx,
                                           source_address=(source, 0) if source else None)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(TIMEOUT)
        self.log.close()


@pytest.fixture
def proxied(make_gateway, tmp_path_factory, monkeypatch):
    # Session and rate-limit lines are the gateway's debug lines.
    monkeypatch.setenv("RUST_LOG", "info,herald_gateway=debug")
    gw = make_gateway(GATEWAY_CONFIG)
    proxy = Proxy(tmp_path_factory.mktemp("haproxy"), gw)
    yield gw, proxy
    proxy.stop()


def log_lines(gw: Gateway) -> list[dict]:
    lines = []
    for line in gw.log_path.read_text(errors="replace").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
    return lines


def wait_for_log(gw: Gateway, what: str, match) -> dict:
    deadline = time.monotonic() + TIMEOUT
    while True:
        for entry in log_lines(gw):
            if match(entry):
                return entry
        assert time.monotonic() < deadline, f"no log line {what}:\n{gw.log()}"
        time.sleep(0.05)  # polling interval, bounded by the deadline


def refused(gw: Gateway, reason: str) -> float:
    m = re.search(rf'^herald_connections_refused_total\{{reason="{reason}"\}} (\S+)$', gw.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


def stomp_over_wss(proxy: Proxy, source: str, user: str) -> str:
    """A STOMP session over wss:// from `source` (a raw WebSocket: Python's
    clients cannot pick their source address): CONNECT, CONNECTED, close.
    Returns the CONNECTED frame."""
    raw = socket.create_connection((HOST, proxy.port), timeout=TIMEOUT, source_address=(source, 0))
    s = proxy.ctx.wrap_socket(raw, server_hostname=HOST)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET /ws?uid={user} HTTP/1.1\r\nHost: {HOST}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"Sec-WebSocket-Protocol: v12.stomp\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            assert chunk, f"closed during the handshake: {buf!r}"
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        frame = (f"CONNECT\naccept-version:1.2\nhost:herald\npasscode:{token(user)}\n\n\0").encode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(frame))
        length = len(frame)
        header = bytes([0x81, 0x80 | 126]) + length.to_bytes(2, "big") if length > 125 \
            else bytes([0x81, 0x80 | length])
        s.sendall(header + mask + masked)
        while b"\0" not in buf:
            chunk = s.recv(4096)
            assert chunk, f"closed before CONNECTED: {buf!r}"
            buf += chunk
        # One unmasked text frame with a short length (< 126 bytes).
        text = buf[2:] if buf[1] < 126 else buf[4:]
        return text.split(b"\0", 1)[0].decode()
    finally:
        s.close()


def test_sessions_are_logged_with_the_browsers_address(proxied):
    gw, proxy = proxied
    for source, user in (("127.0.0.2", "alice"), ("127.0.0.3", "bob")):
        connected = stomp_over_wss(proxy, source, user)
        assert connected.startswith("CONNECTED\n"), connected
        # The session's span and its own line carry the browser's address,
        # not HAProxy's 127.0.0.1.
        entry = wait_for_log(gw, f"'session open' for {user}", lambda e, u=user: (
            e.get("fields", {}).get("message") == "session open"
            and e.get("fields", {}).get("user") == u))
        assert entry["fields"]["client"].startswith(f"{source}:"), entry
        assert entry["span"]["client"].startswith(f"{source}:"), entry


def test_the_connection_rate_applies_per_browser_address(proxied):
    gw, proxy = proxied
    before = refused(gw, "rate_limited")
    # Burst 3 per address: the fourth new connection from 127.0.0.2 is 429,
    # while 127.0.0.3, behind the same HAProxy, is not limited.
    statuses = [proxy.get("/sockjs/info?uid=a", source="127.0.0.2")[0] for _ in range(4)]
    assert statuses == [200, 200, 200, 429], statuses
    status, headers, body = proxy.get("/sockjs/info?uid=a", source="127.0.0.2")
    assert status == 429 and int(headers.get("retry-after", "0")) > 0, (status, headers)
    assert body.startswith(b"too many new connections from this address")
    assert [proxy.get("/sockjs/info?uid=b", source="127.0.0.3")[0] for _ in range(3)] == [200] * 3
    # Only those two: HAProxy's own health checks (127.0.0.1, no PROXY
    # header, a trusted peer's direct connections) are never limited.
    assert refused(gw, "rate_limited") == before + 2
    wait_for_log(gw, "of the refusal naming 127.0.0.2", lambda e: (
        e.get("fields", {}).get("message", "").startswith("connection over the per-address rate")
        and e.get("fields", {}).get("client", "").startswith("127.0.0.2:")))


def test_a_stomp_client_over_wss_and_the_api_over_https(proxied):
    import stomp

    gw, proxy = proxied
    conn = stomp.WSConnection([(HOST, proxy.port)], ws_path="/ws?uid=carol",
                              header={"Sec-WebSocket-Protocol": "v12.stomp"},
                              reconnect_attempts_max=1, timeout=TIMEOUT)
    # wss://, verified against the generated certificate (stomp.py hands
    # ca_certs to websocket-client, which requires a valid chain).
    conn.set_ssl(for_hosts=[(HOST, proxy.port)], ca_certs=str(proxy.cert))
    got = []
    receipts = []

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):
            got.append(frame.body)

        def on_receipt(self, frame):
            receipts.append(frame.headers.get("receipt-id"))

    conn.set_listener("t", Listener())
    conn.connect(passcode=token("carol"), wait=True)
    try:
        conn.subscribe("/user/notifications", id="s", ack="auto", headers={"receipt": "r1"})
        deadline = time.monotonic() + TIMEOUT
        while "r1" not in receipts:
            assert time.monotonic() < deadline, "no RECEIPT"
            time.sleep(0.02)  # polling interval, bounded by the deadline
        r = requests.post(f"https://{HOST}:{proxy.port}/v1/notifications", verify=str(proxy.cert),
                          headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT,
                          json={"users": ["carol"], "event": "t.tls", "payload": {"over": "https"}})
        assert r.status_code == 202, r.text
        while not got:
            assert time.monotonic() < deadline, "no MESSAGE"
            time.sleep(0.02)  # polling interval, bounded by the deadline
        assert json.loads(got[0]) == {"over": "https"}
    finally:
        conn.disconnect()
    # A client that does not trust the certificate is refused by TLS.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"https://{HOST}:{proxy.port}/healthz", timeout=TIMEOUT)


def test_proxy_headers_from_others_or_malformed_are_refused(make_gateway):
    gw = make_gateway(GATEWAY_CONFIG)

    def send(source: str, data: bytes) -> bytes:
        s = socket.create_connection((HOST, gw.port), timeout=TIMEOUT, source_address=(source, 0))
        try:
            s.sendall(data)
            out = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    return out
                out += chunk
        except ConnectionResetError:
            return out
        finally:
            s.close()

    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    forged = b"PROXY TCP4 192.0.2.1 127.0.0.1 1234 80\r\n" + request
    # Only HAProxy (127.0.0.1) may say who the client is.
    assert send("127.0.0.2", forged) == b""
    assert refused(gw, "proxy_untrusted") == 1
    assert send("127.0.0.1", forged).startswith(b"HTTP/1.1 200")
    assert send("127.0.0.1", b"PROXY TCP4 192.0.2.1 127.0.0.1 99999 80\r\n" + request) == b""
    assert refused(gw, "proxy_malformed") == 1
    # No header at all: a direct connection, from anyone.
    assert send("127.0.0.2", request).startswith(b"HTTP/1.1 200")
    wait_for_log(gw, "of the untrusted refusal", lambda e: (
        e.get("fields", {}).get("message") == "connection refused: PROXY header"
        and e.get("fields", {}).get("peer", "").startswith("127.0.0.2:")))
