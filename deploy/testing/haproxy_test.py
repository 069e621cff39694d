#!/usr/bin/env python3
"""Drive the generated HAProxy configuration against fake edges and routers.

Run through deploy/test-haproxy.sh. Needs haproxy and Python 3 (standard
library only). Starts, on loopback ports picked at random:
  - 3 fake edges and 2 fake routers: tiny HTTP servers (this file, run as
    `haproxy_test.py serve NAME PORT`) that answer /healthz (liveness) with
    200, /readyz (readiness) with 200 or, once told so by a POST to
    /_test/ready with body 0, with 503 as an edge with no root link does,
    and everything else with JSON naming themselves, the source address
    the request came from and the client a PROXY v2 header named (HAProxy's
    send-proxy-v2; connections without one are served too, as the edges
    serve HAProxy's health checks); they also speak just enough WebSocket upgrade and
    chunked streaming to exercise HAProxy's tunnel and no-delay paths;
  - haproxy with a configuration from haproxy/generate (3 source addresses).
Then checks hashing, stickiness, spreading, failover, per-transport counts.
Every wait polls for an event with a deadline; nothing sleeps to synchronise.
Exits 1 if a check fails, 2 if the harness itself fails; always cleans up.
"""

import argparse
import base64
import csv
import hashlib
import http.client
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GENERATE = os.path.join(ROOT, "haproxy", "generate")
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
HOST = "127.0.0.1"


# ---------------------------------------------------------------------------
# The fake edge / router (a child process).

PROXY_V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
# The client a connection's PROXY v2 header named, per handler thread.
CONN = threading.local()


def read_proxy_v2(sock):
    """The client address of a PROXY v2 header at the start of sock (consumed),
    None without one (nothing consumed). Enough of the protocol for HAProxy's
    send-proxy-v2 over IPv4; the gateway's own parser is herald_protocol::proxy."""
    head = sock.recv(16, socket.MSG_PEEK | socket.MSG_WAITALL)
    if len(head) < 16 or not head.startswith(PROXY_V2_SIGNATURE):
        return None
    length = int.from_bytes(head[14:16], "big")
    header = b""
    while len(header) < 16 + length:
        chunk = sock.recv(16 + length - len(header))
        if not chunk:
            return None
        header += chunk
    if header[12] == 0x21 and header[13] == 0x11:
        return socket.inet_ntoa(header[16:20])
    return "local"


def serve(name, port):
    # /readyz answers 200 while this is True (POST /_test/ready: 1 or 0).
    ready = {"now": True}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def reply(self, status, obj, headers=()):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Herald-Edge", name)
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def describe(self):
            u = urllib.parse.urlsplit(self.path)
            return {"edge": name, "src": self.client_address[0], "client": CONN.client,
                    "method": self.command, "path": u.path,
                    "query": urllib.parse.parse_qs(u.query),
                    "proto": self.headers.get("X-Forwarded-Proto")}

        def websocket(self):
            key = self.headers.get("Sec-WebSocket-Key", "")
            accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            # After 101 HAProxy is a byte tunnel: echo raw bytes, prefixed.
            sock = self.connection
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                sock.sendall(name.encode() + b":" + data)
            self.close_connection = True

        def stream(self, chunks, gap):
            # Chunked response, one small chunk per "message", each carrying
            # the time it was written: the client measures how long HAProxy
            # took to pass it on.
            self.send_response(200)
            self.send_header("Content-Type", "application/javascript")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("X-Herald-Edge", name)
            self.end_headers()
            self.wfile.flush()
            for i in range(chunks):
                line = json.dumps({"edge": name, "i": i, "t": time.time()}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(gap)  # the edge's pace, not synchronisation
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def do_GET(self):
            u = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(u.query)
            if u.path == "/healthz":
                return self.reply(200, {"status": "ok", "edge": name})
            if u.path == "/readyz":
                if ready["now"]:
                    return self.reply(200, {"status": "ready", "edge": name})
                return self.reply(503, {"status": "unavailable", "reasons": ["no root link"]})
            if self.headers.get("Upgrade", "").lower() == "websocket":
                return self.websocket()
            if "chunks" in q:
                return self.stream(int(q["chunks"][0]), int(q.get("gap_ms", ["50"])[0]) / 1000)
            return self.reply(200, self.describe())

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            if self.path == "/_test/ready":
                ready["now"] = body.strip() == b"1"
                return self.reply(200, {"ready": ready["now"]})
            status = 202 if self.path.startswith("/v1/notifications") else 200
            return self.reply(status, self.describe())

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 128

        def finish_request(self, request, client_address):
            # In the connection's own thread (ThreadingMixIn).
            CONN.client = read_proxy_v2(request)
            super().finish_request(request, client_address)

    srv = Server((HOST, port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    srv.serve_forever()


# ---------------------------------------------------------------------------
# The harness.

class Failed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(what, predicate, timeout):
    """Poll predicate() until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, http.client.HTTPException, ValueError) as e:
            last_exc = e
        if time.monotonic() > deadline:
            raise Failed(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_exc})" if last_exc else ""))
        time.sleep(delay)  # polling interval, bounded by the deadline
        delay = min(delay * 2, 0.2)


def request(port, path, method="GET", body=None, headers=None, timeout=5, source=None):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, dict(resp.getheaders()), data
    finally:
        conn.close()


class Harness:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="herald-haproxy-test.")
        self.procs = {}
        self.failures = []
        self.passed = 0
        self.edge_ports = {f"edge{i}": free_port() for i in (1, 2, 3)}
        self.router_ports = {f"router{i}": free_port() for i in (1, 2)}
        self.proxy_port = free_port()
        self.stats_port = free_port()
        self.cfg = os.path.join(self.tmp, "haproxy.cfg")

    # -- processes ------------------------------------------------------------
    def start_fake(self, name, port):
        log = open(os.path.join(self.tmp, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "serve", name, str(port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(f"{name} /healthz", lambda: request(port, "/healthz", timeout=1)[0] == 200, 10)

    def stop(self, name):
        p = self.procs.pop(name, None)
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cleanup(self):
        for name in list(self.procs):
            self.stop(name)
        if self.args.keep:
            print(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def generate(self, cfg=None, proxy_port=None, stats_port=None, extra=()):
        edges = ",".join(f"{HOST}:{p}" for p in self.edge_ports.values())
        routers = ",".join(f"{HOST}:{p}" for p in self.router_ports.values())
        # Every request of these tests comes from 127.0.0.1 (thousands of
        # them within seconds): the per-address connection limit is off
        # here, and test_src_conn_rate runs a second HAProxy with it on.
        cmd = [sys.executable, GENERATE, "--edges", edges, "--routers", routers,
               "--bind", f"{HOST}:{proxy_port or self.proxy_port}",
               "--stats", f"{HOST}:{stats_port or self.stats_port}",
               "--sources", str(self.args.sources), "--check-inter", "200ms",
               "--maxconn", "2000", "-o", cfg or self.cfg, "--check",
               *(extra or ["--src-conn-rate", "0"])]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise Failed(f"haproxy/generate failed:\n{res.stdout}{res.stderr}")

    def start_haproxy(self):
        log = open(os.path.join(self.tmp, "haproxy.log"), "ab")
        self.procs["haproxy"] = subprocess.Popen(
            [self.args.haproxy, "-db", "-f", self.cfg],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until("haproxy /healthz", lambda: self.proxy_health() == 200, 10)
        wait_until("every edge and router UP in the stats",
                   lambda: all(self.server_status("edges", e) == "UP" for e in self.edge_ports)
                   and all(self.server_status("be_publish", r) == "UP" for r in self.router_ports),
                   10)

    def haproxy_log_tail(self):
        try:
            with open(os.path.join(self.tmp, "haproxy.log"), "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    # -- observations ---------------------------------------------------------
    def proxy_health(self):
        return request(self.proxy_port, "/healthz", timeout=2)[0]

    def stats(self, port=None):
        status, _, body = request(port or self.stats_port, "/;csv", timeout=2)
        if status != 200:
            raise ValueError(f"stats page answered {status}")
        text = body.decode().lstrip("# ")
        return list(csv.DictReader(io.StringIO(text)))

    def server_status(self, backend, server):
        for row in self.stats():
            if row["pxname"] == backend and row["svname"] == server:
                return row["status"].split()[0]
        return None

    def stot(self, backend):
        for row in self.stats():
            if row["pxname"] == backend and row["svname"] == "BACKEND":
                return int(row["stot"] or 0)
        raise ValueError(f"no backend {backend} in the stats")

    def edge_of(self, path):
        status, headers, body = request(self.proxy_port, path)
        if status != 200:
            raise Failed(f"GET {path} answered {status}: {body[:200]!r}")
        return json.loads(body)["edge"]

    def placement(self, uids, path="/ws?uid={}"):
        return {u: self.edge_of(path.format(urllib.parse.quote(u))) for u in uids}

    # -- checks ---------------------------------------------------------------
    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {what}")
        else:
            self.failures.append(what)
            print(f"FAIL {what}" + (f": {detail}" if detail else ""))

    def transport_paths(self):
        # (backend, path template) for every browser request kind; {} is the uid.
        return [
            ("be_ws", "/ws?uid={}&token=t"),
            ("be_sockjs_websocket", "/sockjs/123/sess-{}/websocket?uid={}"),
            ("be_xhr_streaming", "/sockjs/123/sess-{}/xhr_streaming?uid={}"),
            ("be_xhr_polling", "/sockjs/123/sess-{}/xhr?uid={}"),
            ("be_xhr_send", "/sockjs/123/sess-{}/xhr_send?uid={}"),
            ("be_eventsource", "/sockjs/123/sess-{}/eventsource?uid={}"),
            ("be_sockjs_other", "/sockjs/info?t=1&uid={}"),
            ("be_edge_other", "/js/herald.js?uid={}"),
        ]

    def test_generator_shapes(self):
        # Other shapes of configuration, each through haproxy -c -f: one edge
        # without extra sources, 21 edges x 8 explicit source addresses,
        # syslog logging with privileges dropped, no logging; and the
        # generator's own refusals.
        many = ",".join(f"edge{i}=10.0.1.{i}:8080" for i in range(1, 22))
        shapes = {
            "1 edge, 1 source": ["--edges", "127.0.0.1:9101", "--routers", "127.0.0.1:9201",
                                 "--log", "none"],
            "21 edges x 8 source addresses": [
                "--edges", many, "--routers", "10.0.0.11:8090,10.0.0.12:8090",
                "--source-addrs", ",".join(f"10.0.0.{i}" for i in range(5, 13)),
                "--bind", "0.0.0.0:80", "--stats", "10.0.0.5:8404", "--maxconn", "5000"],
            "syslog, user and chroot": ["--edges", "127.0.0.1:9101,127.0.0.1:9102",
                                        "--routers", "127.0.0.1:9201", "--log", "/dev/log",
                                        "--user", "haproxy", "--chroot", "/var/lib/haproxy"],
        }
        for what, extra in shapes.items():
            out = os.path.join(self.tmp, "shape.cfg")
            res = subprocess.run([sys.executable, GENERATE, *extra, "-o", out],
                                 capture_output=True, text=True)
            chk = subprocess.run([self.args.haproxy, "-c", "-f", out], capture_output=True,
                                 text=True) if res.returncode == 0 else None
            ok = chk is not None and chk.returncode == 0 and "[WARNING]" not in chk.stdout + chk.stderr
            self.check(f"haproxy -c -f accepts the generated config ({what})", ok,
                       res.stderr if chk is None else chk.stdout + chk.stderr)
        bad = {
            "an address without a port": ["--edges", "127.0.0.1", "--routers", "127.0.0.1:1"],
            "the same edge twice": ["--edges", "127.0.0.1:1,127.0.0.1:1", "--routers", "127.0.0.1:2"],
            "a malformed timeout": ["--edges", "127.0.0.1:1", "--routers", "127.0.0.1:2",
                                    "--timeout-tunnel", "one hour"],
            "--http-bind without --tls-cert": ["--edges", "127.0.0.1:1", "--routers", "127.0.0.1:2",
                                               "--http-bind", "127.0.0.1:3"],
            "a --tls-cert that is no file": ["--edges", "127.0.0.1:1", "--routers", "127.0.0.1:2",
                                             "--tls-cert", "/nonexistent/herald.pem"],
        }
        for what, extra in bad.items():
            res = subprocess.run([sys.executable, GENERATE, *extra], capture_output=True, text=True)
            self.check(f"haproxy/generate refuses {what} (exit 2, a message)",
                       res.returncode == 2 and res.stderr.startswith("haproxy/generate:"),
                       f"exit {res.returncode}: {res.stderr.strip()}")

    def test_sticky_and_counted(self):
        uids = [f"user-{i}" for i in range(40)] + ["alice", "bob@example.com", "ünï"]
        before = {be: self.stot(be) for be, _ in self.transport_paths()}
        sent = {be: 0 for be in before}
        mismatches = []
        for u in uids:
            q = urllib.parse.quote(u)
            seen = set()
            for be, tmpl in self.transport_paths():
                path = tmpl.replace("{}", q)
                method, body = ("POST", b'["x"]') if be == "be_xhr_send" else ("GET", None)
                for _ in range(2):  # repeated requests too
                    status, _, data = request(self.proxy_port, path, method=method, body=body)
                    if status != 200:
                        raise Failed(f"{method} {path} answered {status}")
                    seen.add(json.loads(data)["edge"])
                    sent[be] += 1
            if len(seen) != 1:
                mismatches.append((u, sorted(seen)))
        self.check(f"every request of a user (8 kinds x 2, {len(uids)} users) lands on one edge",
                   not mismatches, f"split users: {mismatches[:5]}")
        after = {be: self.stot(be) for be in before}
        wrong = {be: (after[be] - before[be], sent[be]) for be in before
                 if after[be] - before[be] != sent[be]}
        self.check("each request kind is counted on its own backend in the stats",
                   not wrong, f"backend: (counted, sent) {wrong}")

    def test_spread(self):
        uids = [f"spread-{i}" for i in range(600)]
        placed = self.placement(uids)
        counts = {e: sum(1 for v in placed.values() if v == e) for e in self.edge_ports}
        print(f"     600 users over the edges: {counts}")
        self.check("different users spread over every edge (each >= 20%)",
                   all(c >= 0.20 * len(uids) for c in counts.values()), str(counts))
        return placed

    def test_sources(self):
        if self.args.sources < 2:
            return
        srcs = set()
        for i in range(200):
            status, _, body = request(self.proxy_port, f"/ws?uid=src-{i}")
            srcs.add(json.loads(body)["src"])
        want = {f"127.0.0.{i}" for i in range(1, self.args.sources + 1)}
        self.check(f"edges see connections from every source address {sorted(want)}",
                   srcs == want, f"seen {sorted(srcs)}")

    def test_proxy_protocol(self):
        # The edges get the browser's address in a PROXY v2 header (the
        # edges' [proxy] protocol = true reads it); the routers and the
        # health checks get none.
        with open(self.cfg) as f:
            text = f.read()
        lines = [l.strip() for l in text.splitlines() if l.strip().startswith("server ")]
        edge_lines = [l for l in lines if "track edges/" in l]
        plain = [l for l in lines if "track edges/" not in l]
        self.check("every edge server line sends PROXY v2; check and router lines do not",
                   edge_lines and all("send-proxy-v2" in l for l in edge_lines)
                   and plain and not any("send-proxy" in l for l in plain), "\n".join(lines[:6]))
        seen = {}
        for src in ("127.0.0.2", "127.0.0.3"):
            for path in ("/ws?uid=pp", "/sockjs/000/ppsess/xhr_streaming?uid=pp", "/js/herald.js?uid=pp"):
                status, _, body = request(self.proxy_port, path, source=src)
                seen[(src, path)] = (status, json.loads(body).get("client") if status == 200 else None)
        self.check("edges learn each browser's own address (127.0.0.2, 127.0.0.3) from the PROXY header",
                   all(st == 200 and client == src for (src, _), (st, client) in seen.items()),
                   str(seen))
        status, _, body = request(self.proxy_port, "/v1/notifications", method="POST", body=b"{}",
                                  headers={"Content-Type": "application/json"}, source="127.0.0.2")
        self.check("routers get no PROXY header (they read X-Forwarded-For)",
                   status == 202 and json.loads(body)["client"] is None, body[:200])

    def test_tls(self):
        # A third HAProxy terminating TLS with a certificate made here by
        # openssl (self-signed, for 127.0.0.1; never kept), with a plain
        # port that redirects to it.
        openssl = shutil.which("openssl")
        if not openssl:
            raise Failed("openssl not found (apt-get install openssl)")
        key, cert, pem = (os.path.join(self.tmp, n) for n in ("tls.key", "tls.crt", "tls.pem"))
        res = subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                              "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=herald-test",
                              "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise Failed(f"openssl req failed: {res.stderr}")
        with open(pem, "w") as out:
            for part in (cert, key):
                with open(part) as f:
                    out.write(f.read())
        port, plain, stats = free_port(), free_port(), free_port()
        cfg = os.path.join(self.tmp, "haproxy-tls.cfg")
        self.generate(cfg, port, stats, ["--src-conn-rate", "0", "--tls-cert", pem,
                                         "--http-bind", f"{HOST}:{plain}"])
        with open(cfg) as f:
            text = f.read()
        self.check("with --tls-cert the bind line terminates TLS; --http-bind adds a plain one",
                   f"bind {HOST}:{port} ssl crt {pem} alpn http/1.1" in text
                   and f"bind {HOST}:{plain}\n" in text and "option http-no-delay" in text)
        log = open(os.path.join(self.tmp, "haproxy-tls.log"), "ab")
        self.procs["haproxy-tls"] = subprocess.Popen(
            [self.args.haproxy, "-db", "-f", cfg],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ctx = ssl.create_default_context(cafile=cert)

        def https(path, **kw):
            conn = http.client.HTTPSConnection(HOST, port, timeout=5, context=ctx)
            try:
                conn.request(kw.get("method", "GET"), path, body=kw.get("body"),
                             headers=kw.get("headers", {}))
                resp = conn.getresponse()
                return resp.status, dict(resp.getheaders()), resp.read()
            finally:
                conn.close()

        wait_until("the TLS haproxy /healthz over https", lambda: https("/healthz")[0] == 200, 10)
        wait_until("every edge UP in the TLS haproxy", lambda: all(
            row["status"].startswith("UP") for row in self.stats(stats)
            if row["pxname"] == "edges" and row["svname"] in self.edge_ports), 10)
        status, _, body = https("/sockjs/info?uid=tls")
        info = json.loads(body) if status == 200 else {}
        self.check("https:// through HAProxy (verified against the generated certificate) reaches"
                   " the user's edge, which learns the scheme (X-Forwarded-Proto: https)",
                   status == 200 and info.get("edge") == self.edge_of("/sockjs/info?uid=tls")
                   and info.get("proto") == "https", f"{status} {body[:200]!r}")
        status, headers, _ = request(plain, "/ws?uid=tls&token=t", headers={"Host": f"{HOST}:{plain}"})
        location = {k.lower(): v for k, v in headers.items()}.get("location")
        self.check("plain HTTP on --http-bind is a 308 redirect to the https:// port",
                   status == 308 and location == f"https://{HOST}:{port}/ws?uid=tls&token=t",
                   f"{status} {location}")
        raw = socket.create_connection((HOST, port), timeout=5)
        s = ctx.wrap_socket(raw, server_hostname=HOST)
        try:
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall((f"GET /ws?uid=tls&token=t HTTP/1.1\r\nHost: herald\r\n"
                       f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            s.sendall(b"ping")
            got = s.recv(4096)
        finally:
            s.close()
        expect = self.edge_of("/ws?uid=tls")
        self.check("a wss:// upgrade through the TLS frontend becomes a tunnel to the user's edge",
                   head.startswith(b"HTTP/1.1 101") and got == expect.encode() + b":ping",
                   f"{head[:40]!r} {got!r}")
        try:
            https_untrusted = http.client.HTTPSConnection(HOST, port, timeout=5,
                                                          context=ssl.create_default_context())
            https_untrusted.request("GET", "/healthz")
            https_untrusted.getresponse()
            verified = True
        except ssl.SSLCertVerificationError:
            verified = False
        self.check("a client that does not trust the generated certificate refuses it",
                   not verified)
        self.stop("haproxy-tls")

    def test_sockjs_session_without_query_noise(self):
        # A SockJS session: info, then the receiver and sends, with the
        # client's cache-busting parameters around uid. One edge for all.
        u = "carol"
        paths = [f"/sockjs/info?t=1700000000000&uid={u}",
                 f"/sockjs/042/abcdefgh/xhr_streaming?uid={u}&t=1",
                 f"/sockjs/042/abcdefgh/xhr_send?t=2&uid={u}",
                 f"/sockjs/042/abcdefgh/xhr?uid={u}",
                 f"/sockjs/042/abcdefgh/eventsource?uid={u}"]
        edges = set()
        for p in paths:
            method, body = ("POST", b'["CONNECT"]') if "xhr_send" in p else ("GET", None)
            status, _, data = request(self.proxy_port, p, method=method, body=body)
            edges.add(json.loads(data)["edge"])
        self.check("a SockJS session's requests (info, receiver, sends) share one edge",
                   len(edges) == 1, str(edges))

    def test_no_uid_falls_back_to_source(self):
        edges = {self.edge_of("/sockjs/000/nouid/xhr") for _ in range(10)}
        self.check("requests without uid hash on the source address (one edge)",
                   len(edges) == 1, str(edges))

    def test_api_routes(self):
        seen = []
        for _ in range(6):
            status, _, body = request(self.proxy_port, "/v1/notifications", method="POST",
                                      body=b'{"users":["a"]}',
                                      headers={"Content-Type": "application/json"})
            seen.append((status, json.loads(body)["edge"]))
        routers = [r for _, r in seen]
        self.check("POST /v1/notifications reaches the routers, round robin",
                   all(s == 202 for s, _ in seen) and set(routers) == set(self.router_ports)
                   and all(routers[i] != routers[i + 1] for i in range(len(routers) - 1)),
                   str(seen))
        status, _, body = request(self.proxy_port, "/v1/stats")
        self.check("GET /v1/stats is answered by an edge",
                   status == 200 and json.loads(body)["edge"] in self.edge_ports, body[:100])
        for path in ("/metrics", "/metrics/", "/metrics?uid=alice"):
            status, _, body = request(self.proxy_port, path)
            answer = json.loads(body) if body.startswith(b"{") else {}
            self.check(f"GET {path} on the public side is 404 from HAProxy, never an edge's",
                       status == 404 and answer.get("error", {}).get("code") == "not_found"
                       and "edge" not in answer, body[:100])

    def test_websocket_tunnel(self):
        s = socket.create_connection((HOST, self.proxy_port), timeout=5)
        try:
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall((f"GET /ws?uid=alice&token=t HTTP/1.1\r\nHost: herald\r\n"
                       f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                       f"Sec-WebSocket-Protocol: v12.stomp\r\n\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            status_line = head.split(b"\r\n", 1)[0]
            expect = self.edge_of("/ws?uid=alice")
            lat = []
            ok = status_line.startswith(b"HTTP/1.1 101")
            for i in range(5):
                t0 = time.monotonic()
                s.sendall(b"ping%d" % i)
                got = s.recv(4096)
                lat.append(time.monotonic() - t0)
                ok = ok and got == expect.encode() + b":ping%d" % i
            self.check("a WebSocket upgrade through HAProxy becomes a tunnel to the user's edge",
                       ok, f"{status_line!r}")
            print(f"     WebSocket round trips: {', '.join(f'{x*1000:.1f}' for x in lat)} ms")
            self.check("WebSocket tunnel passes small messages without delay (< 100 ms each)",
                       max(lat) < 0.1, f"{lat}")
        finally:
            s.close()

    def test_streaming_no_delay(self):
        # An xhr_streaming / eventsource response carrying small chunks 50 ms
        # apart: each must come through promptly (option http-no-delay).
        for kind in ("xhr_streaming", "eventsource"):
            conn = http.client.HTTPConnection(HOST, self.proxy_port, timeout=5)
            try:
                conn.request("GET", f"/sockjs/1/s/{kind}?uid=dave&chunks=8&gap_ms=50")
                resp = conn.getresponse()
                lat = []
                while True:
                    line = resp.readline()
                    if not line:
                        break
                    lat.append(time.time() - json.loads(line)["t"])
            finally:
                conn.close()
            print(f"     {kind} chunk delays: {', '.join(f'{x*1000:.1f}' for x in lat)} ms")
            self.check(f"{kind}: every chunk passes HAProxy within 100 ms",
                       len(lat) == 8 and max(lat) < 0.1, f"{lat}")

    def test_failover(self, placed):
        victim = "edge2"
        moved = [u for u, e in placed.items() if e == victim]
        stayed = {u: e for u, e in placed.items() if e != victim}
        self.stop(victim)
        wait_until(f"HAProxy marks {victim} DOWN",
                   lambda: self.server_status("edges", victim) == "DOWN", 10)
        now = self.placement(placed)
        kept = [u for u in stayed if now[u] == stayed[u]]
        self.check(f"stopping {victim}: users of the other edges stay put",
                   len(kept) == len(stayed), f"{len(stayed) - len(kept)} of {len(stayed)} moved")
        self.check(f"stopping {victim}: its {len(moved)} users move to the others",
                   all(now[u] != victim for u in moved))
        spread = {e: sum(1 for u in moved if now[u] == e) for e in self.edge_ports if e != victim}
        print(f"     {victim}'s users went to {spread}")
        self.check("HAProxy /healthz stays 200 while some edges are up", self.proxy_health() == 200)

        self.start_fake(victim, self.edge_ports[victim])
        wait_until(f"HAProxy marks {victim} UP again",
                   lambda: self.server_status("edges", victim) == "UP", 10)
        back = self.placement(placed)
        self.check(f"{victim} back: every user is where it was before",
                   back == placed, f"{sum(1 for u in placed if back[u] != placed[u])} differ")

    def test_unready_edge(self, placed):
        # An edge alive but not ready (no root link: /healthz 200, /readyz
        # 503) is taken out like a stopped one, and put back once ready.
        with open(self.cfg) as f:
            checks = [l.strip() for l in f if "httpchk" in l]
        self.check("edges and routers are checked on /readyz",
                   checks == ["option httpchk GET /readyz"] * 2, f"{checks}")
        victim = "edge3"
        port = self.edge_ports[victim]
        moved = [u for u, e in placed.items() if e == victim]
        stayed = {u: e for u, e in placed.items() if e != victim}
        request(port, "/_test/ready", method="POST", body=b"0")
        wait_until(f"HAProxy marks the unready {victim} DOWN",
                   lambda: self.server_status("edges", victim) == "DOWN", 10)
        self.check(f"the unready {victim} is still alive (/healthz 200)",
                   request(port, "/healthz")[0] == 200)
        now = self.placement(placed)
        self.check(f"unready {victim}: its {len(moved)} users go to the others, the rest stay",
                   all(now[u] != victim for u in moved)
                   and all(now[u] == e for u, e in stayed.items()))
        request(port, "/_test/ready", method="POST", body=b"1")
        wait_until(f"HAProxy marks {victim} UP once ready",
                   lambda: self.server_status("edges", victim) == "UP", 10)
        self.check(f"{victim} ready again: every user is where it was before",
                   self.placement(placed) == placed)

    def test_stats_page(self):
        status, _, body = request(self.stats_port, "/")
        html = body.decode(errors="replace")
        names = [be for be, _ in self.transport_paths()] + ["edges", "be_publish", "be_stats_api"]
        missing = [n for n in names if n not in html]
        self.check("the stats page lists the per-transport backends", status == 200 and not missing,
                   f"missing {missing}")
        status, _, body = request(self.stats_port, "/metrics")
        self.check("Prometheus /metrics on the stats address has per-backend sessions",
                   status == 200 and b'haproxy_backend_current_sessions{proxy="be_xhr_streaming"}' in body)

    def test_src_conn_rate(self):
        # A second HAProxy before the same edges and routers, generated with
        # a limit of 5 new connections per 10 s per source address.
        port, stats = free_port(), free_port()
        cfg = os.path.join(self.tmp, "haproxy-limited.cfg")
        self.generate(cfg, port, stats, ["--src-conn-rate", "5", "--src-rate-period", "10s"])
        with open(cfg) as f:
            text = f.read()
        self.check("the generated config tracks sources in a stick table and denies with 429",
                   "stick-table type ipv6" in text and "tcp-request connection track-sc0 src" in text
                   and "http-request deny status 429" in text and "sc_conn_rate(0) gt 5" in text)
        log = open(os.path.join(self.tmp, "haproxy-limited.log"), "ab")
        self.procs["haproxy-limited"] = subprocess.Popen(
            [self.args.haproxy, "-db", "-f", cfg],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        # Its own /healthz (answered before the limit applies, but counted)
        # says when its checks have found an edge.
        wait_until("the limited haproxy /healthz",
                   lambda: request(port, "/healthz", timeout=2)[0] == 200, 10)
        wait_until("every edge UP in the limited haproxy", lambda: all(
            row["status"].startswith("UP") for row in self.stats(stats)
            if row["pxname"] == "edges" and row["svname"] in self.edge_ports), 10)
        # New connections from 127.0.0.1: at most 5 get through (fewer:
        # the /healthz polls above counted too), then every one is 429.
        answers = [request(port, "/ws?uid=rate") for _ in range(12)]
        statuses = [a[0] for a in answers]
        print(f"     12 new connections from one address: {statuses}")
        first = statuses.index(429) if 429 in statuses else len(statuses)
        self.check("new connections over the per-address rate get 429, and only those",
                   first <= 5 and all(s == 200 for s in statuses[:first])
                   and all(s == 429 for s in statuses[first:]), str(statuses))
        if 429 in statuses:
            _, headers, body = answers[first]
            headers = {k.lower(): v for k, v in headers.items()}
            self.check("a 429 says Retry-After (the window) and why",
                       headers.get("retry-after") == "10"
                       and body == b"too many new connections from this address: retry after 10 s",
                       f"{headers} {body!r}")
        s = socket.create_connection((HOST, port), timeout=5)
        try:
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall((f"GET /ws?uid=rate HTTP/1.1\r\nHost: herald\r\nUpgrade: websocket\r\n"
                       f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                       f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
            line = s.recv(4096).split(b"\r\n", 1)[0]
        finally:
            s.close()
        self.check("a WebSocket upgrade over the rate is refused with 429",
                   line.startswith(b"HTTP/1.1 429"), repr(line))
        status, _, _ = request(port, "/v1/notifications", method="POST", body=b"{}",
                               headers={"Content-Type": "application/json"})
        self.check("the publish API (/v1/) is exempt from the per-address limit",
                   status == 202, str(status))
        status, _, _ = request(port, "/ws?uid=rate", source="127.0.0.2")
        self.check("another source address is not limited", status == 200, str(status))
        denied = next(int(r["dreq"] or 0) for r in self.stats(stats)
                      if r["pxname"] == "herald" and r["svname"] == "FRONTEND")
        refused = statuses.count(429) + 1
        self.check("HAProxy counts the refusals as denied requests of frontend herald",
                   denied == refused, f"dreq {denied}, refused {refused}")
        self.stop("haproxy-limited")

    def test_all_down(self):
        for e in self.edge_ports:
            self.stop(e)
        wait_until("every edge DOWN", lambda: all(
            self.server_status("edges", e) == "DOWN" for e in self.edge_ports), 10)
        self.check("HAProxy /healthz answers 503 once no edge is up", self.proxy_health() == 503)
        status, _, _ = request(self.proxy_port, "/ws?uid=alice")
        self.check("browsers get 503 when no edge is up", status == 503, str(status))

    def run(self):
        for name, port in {**self.edge_ports, **self.router_ports}.items():
            self.start_fake(name, port)
        self.test_generator_shapes()
        self.generate()
        print(f"generated {self.cfg} (validated with haproxy -c)")
        self.start_haproxy()
        print(f"haproxy up on {HOST}:{self.proxy_port}, stats on {HOST}:{self.stats_port}")
        self.test_sticky_and_counted()
        self.test_sockjs_session_without_query_noise()
        self.test_no_uid_falls_back_to_source()
        self.test_sources()
        self.test_proxy_protocol()
        self.test_api_routes()
        self.test_websocket_tunnel()
        self.test_streaming_no_delay()
        self.test_stats_page()
        self.test_src_conn_rate()
        self.test_tls()
        placed = self.test_spread()
        self.test_failover(placed)
        self.test_unready_edge(placed)
        self.test_all_down()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--haproxy", default=shutil.which("haproxy") or "/usr/sbin/haproxy")
    p.add_argument("--sources", type=int, default=3, help="source addresses per edge (default 3)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, config)")
    args = p.parse_args()
    h = Harness(args)
    # SIGTERM/SIGHUP (SIGINT already does): unwind through the cleanup below.
    def interrupted(*_):
        raise KeyboardInterrupt()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    try:
        h.run()
    except Failed as e:
        print(f"FAIL {e}")
        tail = h.haproxy_log_tail()
        if tail:
            print("---- haproxy log (tail) ----\n" + tail)
        h.failures.append(str(e))
    except KeyboardInterrupt:
        print("interrupted")
        h.cleanup()
        return 130
    finally:
        if h.procs or os.path.exists(h.tmp):
            h.cleanup()
    print(f"\n{h.passed} passed, {len(h.failures)} failed")
    return 1 if h.failures else 0


if __name__ == "__main__":
    sys.exit(main())
