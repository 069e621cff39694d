#!/usr/bin/env python3
"""Stand-in for herald-router and herald-gateway (via the symlinks beside it),
for deploy/test-deploy.sh: checks the flags deploy/up passes (the router,
like the real one, also that its Redis answers), then answers /healthz, /readyz
(and everything else) with 200 until SIGTERM."""
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


signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
print(f"{name} listening on {host}:{port}", flush=True)
ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
