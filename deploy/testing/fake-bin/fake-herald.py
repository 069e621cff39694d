#!/usr/bin/env python3
"""Stand-in for herald-router and herald-gateway (via the symlinks beside it),
for deploy/test-deploy.sh: checks the flags deploy/up passes (the router,
like the real one, also that its Redis answers), then answers /healthz, /readyz
(and everything else) with 200 until SIGTERM. The gateway stand-in also wants
the edge configuration deploy/up writes ([proxy] protocol = true, as HAProxy
sends the edges a PROXY v2 header) and consumes that header on connections
that carry one."""
import json
import os
import signal
import socket
import sys
from urllib.parse import urlsplit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

name = os.path.basename(sys.argv[0])
if "--help" in sys.argv:
    if name == "herald-router":
        print("--config --listen --amqp-url --api-key [env: HERALD_ROUTER_API_KEYS] --redis-url")
    else:
        print("--listen --edge-id --root --data-dir [env: HERALD_JWT_SECRET] [env: HERALD_API_KEYS]")
    sys.exit(0)

args = sys.argv[1:]


def flag(f):
    return args[args.index(f) + 1] if f in args else None


def redis_answers(url):
    """PING the Redis of a redis://host:port/db URL."""
    u = urlsplit(url)
    try:
        with socket.create_connection((u.hostname, u.port or 6379), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


problems = []
if name == "herald-router":
    if not flag("--amqp-url"):
        problems.append("no --amqp-url")
    redis = flag("--redis-url")
    if not redis or not redis.startswith("redis://"):
        problems.append("no --redis-url redis://...")
    elif not redis_answers(redis):
        problems.append(f"Redis at {redis} does not answer")
    if not os.environ.get("HERALD_ROUTER_API_KEYS"):
        problems.append("no HERALD_ROUTER_API_KEYS")
    config = flag("--config")
    if config is not None and not os.path.isfile(config):
        problems.append(f"--config {config} is not a file")
else:
    if args.count("--root") != 2 or not flag("--edge-id"):
        problems.append("edge mode needs --edge-id and two --root")
    if len(os.environ.get("HERALD_JWT_SECRET", "")) < 32:
        problems.append("no HERALD_JWT_SECRET of 32+ bytes")
    config = flag("--config")
    if config is None or not os.path.isfile(config):
        problems.append("no --config FILE (the edge's gateway.toml)")
    else:
        with open(config) as f:
            text = f.read()
        if "[proxy]" not in text or "protocol = true" not in text or "127.0.0.1/32" not in text:
            problems.append(f"{config}: no [proxy] protocol = true trusting 127.0.0.1/32")
if problems:
    print(f"{name}: configuration error: {problems}", file=sys.stderr)
    sys.exit(78)

host, port = flag("--listen").rsplit(":", 1)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok", "who": name, "listen": flag("--listen")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *a):
        pass


PROXY_V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def finish_request(self, request, client_address):
        # A PROXY v2 header (HAProxy's send-proxy-v2) before the request:
        # consume it; connections without one (health checks) are served as is.
        head = request.recv(16, socket.MSG_PEEK | socket.MSG_WAITALL)
        if len(head) == 16 and head.startswith(PROXY_V2_SIGNATURE):
            want = 16 + int.from_bytes(head[14:16], "big")
            got = 0
            while got < want:
                chunk = request.recv(want - got)
                if not chunk:
                    return
                got += len(chunk)
        super().finish_request(request, client_address)


signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
print(f"{name} listening on {host}:{port}", flush=True)
Server((host, int(port)), Handler).serve_forever()
