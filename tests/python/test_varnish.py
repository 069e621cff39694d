"""Varnish in front of Herald: deploy/varnish/herald.vcl with the real varnishd.

A real `herald-gateway` (standalone: it serves /v1/stats) behind a real
`varnishd` (Debian's package) running deploy/varnish/herald.vcl and a
herald-backends.vcl from deploy/varnish/generate-backends, both on random
127.0.0.1 ports. Checks: the VCL compiles (`varnishd -C`); the second
request is a hit (the VCL's X-Cache header, the object's id in X-Varnish,
and Varnish's count of backend requests) with the 15 s TTL and 6 h grace
the VCL sets; gzip on request, decoding to the same JSON; requests with
other credentials (or none) never get another's object; everything else
passes (a POST is never stored); grace: with the gateway stopped and the
probe saying so, the last answer is served long past its TTL; with nothing
cached, the fixed 503 JSON body. The console's page and assets, validators
and answers that must not be stored are checked against a scripted router
(below). The grace test runs a second varnishd with
the VCL's durations shortened through its environment
(HERALD_VARNISH_STATS_*), so it waits seconds, on Varnish's own clock and
health state, instead of minutes.

Every wait polls a condition with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from conftest import API_KEY, REPO, TIMEOUT, Gateway, free_port

VCL = REPO / "deploy" / "varnish" / "herald.vcl"
GENERATE = REPO / "deploy" / "varnish" / "generate-backends"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# The probe needs 3 failures 2 s apart to call a backend sick: allow for a
# loaded machine.
SICK_TIMEOUT = 20.0


def tool(name: str) -> str:
    """A Varnish program: $VARNISHD for varnishd, else PATH or /usr/sbin, /usr/bin."""
    if name == "varnishd" and os.environ.get("VARNISHD"):
        return os.environ["VARNISHD"]
    found = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)
    if not found:
        pytest.fail(f"{name} not found: apt-get install varnish (scripts/test.sh does)")
    return found


def backends_vcl(directory: Path, *routers: str) -> None:
    subprocess.run([str(GENERATE), *routers, "-o", str(directory / "herald-backends.vcl")],
                   check=True)


class Varnish:
    """One varnishd (-F: in the foreground, our child) in front of `backend`."""

    def __init__(self, workdir: Path, backend: str, env: dict | None = None):
        self.workdir = workdir
        self.backend = backend
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.name = workdir / "n"  # varnishd -n: its shared memory and compiled VCL
        self.log_path = workdir / "varnishd.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        backends_vcl(self.workdir, f"gateway={self.backend}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        env.update(self.env)
        for _attempt in range(5):
            self.port = free_port()
            args = [tool("varnishd"), "-F", "-j", "none", "-n", str(self.name),
                    "-a", f"127.0.0.1:{self.port}", "-T", "127.0.0.1:0",
                    "-s", "malloc,32m", "-p", f"vcl_path={self.workdir}", "-f", str(VCL)]
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env)
            log.close()
            if self._wait_serving():
                return
            if self.proc.poll() is not None and "Address already in use" in self.log():
                continue
            self.kill()
            pytest.fail(f"varnishd did not serve /healthz:\n{self.log()}")
        pytest.fail(f"varnishd could not bind a port:\n{self.log()}")

    def _wait_serving(self) -> bool:
        # /healthz is passed to the gateway: 200 means varnishd runs our VCL
        # and its director has a healthy backend.
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if requests.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return True
            except (requests.ConnectionError, requests.Timeout):
                # Not serving yet, or slow on a loaded machine: the deadline decides.
                pass
            time.sleep(0.05)  # polling interval, bounded by the deadline
        return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def adm(self, *command: str) -> str:
        r = subprocess.run([tool("varnishadm"), "-n", str(self.name), *command],
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, f"varnishadm {' '.join(command)}: {r.stdout}{r.stderr}"
        return r.stdout

    def counter(self, name: str) -> int:
        r = subprocess.run([tool("varnishstat"), "-n", str(self.name), "-1", "-f", name],
                           capture_output=True, text=True, timeout=TIMEOUT, check=True)
        for line in r.stdout.splitlines():
            fields = line.split()
            if fields and fields[0] == name:
                return int(fields[1])
        raise AssertionError(f"no counter {name} in varnishstat:\n{r.stdout}")

    def backend_health(self) -> str:
        """'healthy' or 'sick': the probe's verdict on the gateway."""
        for line in self.adm("backend.list").splitlines():
            if ".gateway" in line:
                for word in ("healthy", "sick"):
                    if re.search(rf"\b{word}\b", line, re.I):
                        return word
        raise AssertionError(f"no gateway backend in backend.list:\n{self.adm('backend.list')}")

    def forget(self) -> None:
        """Ban every object, so each test starts from an empty cache."""
        self.adm("ban", "req.url", "~", ".")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"varnishd did not exit within {TIMEOUT}s of SIGTERM:\n{self.log()}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def get(self, path: str = "/v1/stats", headers: dict | None = None,
            **kwargs) -> requests.Response:
        return requests.get(f"{self.base}{path}", headers=headers, timeout=TIMEOUT, **kwargs)


def object_id(r: requests.Response) -> str:
    """The id of the object a hit served (X-Varnish is 'REQUEST OBJECT' on a
    hit: the object's id is its backend fetch's; just 'REQUEST' otherwise)."""
    ids = r.headers["X-Varnish"].split()
    assert len(ids) == 2, f"not a hit: X-Varnish {r.headers['X-Varnish']}"
    return ids[1]


def served_from(r: requests.Response) -> str | None:
    """The object's id on a hit, None on a miss or pass."""
    ids = r.headers["X-Varnish"].split()
    return ids[1] if len(ids) == 2 else None


def wait_for(what: str, check, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout}s")
        time.sleep(0.1)  # polling interval, bounded by the deadline


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A gateway and varnishd with herald.vcl as shipped (15 s TTL)."""
    gw = Gateway(tmp_path_factory.mktemp("gateway"))
    gw.start()
    v = Varnish(tmp_path_factory.mktemp("varnish"), f"127.0.0.1:{gw.port}")
    try:
        v.start()
        yield gw, v
    finally:
        v.stop()
        gw.stop()


@pytest.fixture
def varnish(stack) -> Varnish:
    _, v = stack
    v.forget()
    return v


def test_vcl_compiles(tmp_path):
    backends_vcl(tmp_path, "router1=127.0.0.1:9201", "router2=127.0.0.1:9202")
    r = subprocess.run([tool("varnishd"), "-C", "-j", "none", "-n", str(tmp_path / "n"),
                        "-p", f"vcl_path={tmp_path}", "-f", str(VCL)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    # The compiled C names both backends and the director.
    assert "router1" in r.stderr + r.stdout and "round_robin" in r.stderr + r.stdout


def test_generate_backends_refuses_bad_input(tmp_path):
    for bad in (["1router=127.0.0.1:9201"], ["127.0.0.1"], ["a=127.0.0.1:1", "a=127.0.0.1:2"],
                ["127.0.0.1:1", "127.0.0.1:1"], ['x=127.0.0.1";:1']):
        r = subprocess.run([str(GENERATE), *bad], capture_output=True, text=True)
        assert r.returncode == 2, (bad, r.stdout)
        assert r.stderr.startswith("generate-backends: "), r.stderr


def test_second_request_is_a_hit(varnish):
    before = varnish.counter("MAIN.backend_req")
    first = varnish.get(headers=AUTH)
    assert first.status_code == 200, first.text
    assert first.headers["X-Cache"] == "MISS"
    second = varnish.get(headers=AUTH)
    assert second.status_code == 200
    assert second.headers["X-Cache"] == "HIT"
    third = varnish.get(headers=AUTH)
    assert third.headers["X-Cache"] == "HIT"
    # One object, the first request's answer, and only that request reached
    # the gateway.
    assert object_id(third) == object_id(second)
    assert second.content == first.content
    assert varnish.counter("MAIN.backend_req") - before == 1
    # The VCL's TTL and grace, whatever the gateway's Cache-Control said:
    # Varnish logged "TTL VCL <ttl> <grace> <keep> ...".
    log = subprocess.run([tool("varnishlog"), "-n", str(varnish.name), "-d", "-g", "raw",
                          "-i", "TTL"], capture_output=True, text=True, timeout=TIMEOUT).stdout
    assert re.search(r"TTL\s+(b\s+)?VCL 15 21600 60 ", log), log[-2000:]
    # The query is sorted into the key: the same query in another order hits.
    a = varnish.get("/v1/stats?topics_limit=5&topics_after=a", headers=AUTH)
    b = varnish.get("/v1/stats?topics_after=a&topics_limit=5", headers=AUTH)
    assert a.status_code == 200, a.text
    assert a.headers["X-Cache"] == "MISS" and b.headers["X-Cache"] == "HIT"
    # Parameters the API does not read are not part of the key: a
    # cache-buster neither splits the cache nor reaches the gateway.
    before = varnish.counter("MAIN.backend_req")
    for url in ("/v1/stats?_=1732000000", "/v1/stats?x=1&y=2&", "/v1/stats?"):
        busted = varnish.get(url, headers=AUTH)
        assert busted.headers["X-Cache"] == "HIT", (url, dict(busted.headers))
        assert object_id(busted) == object_id(third), url
    kept = varnish.get("/v1/stats?_=1&topics_after=a&x=&topics_limit=5", headers=AUTH)
    assert kept.headers["X-Cache"] == "HIT" and object_id(kept) == object_id(b)
    assert varnish.counter("MAIN.backend_req") == before


def test_gzip_when_asked(varnish):
    assert varnish.get(headers=AUTH).headers["X-Cache"] == "MISS"
    plain = varnish.get(headers={**AUTH, "Accept-Encoding": "identity"})
    assert plain.status_code == 200
    assert "Content-Encoding" not in plain.headers
    zipped = varnish.get(headers={**AUTH, "Accept-Encoding": "gzip"}, stream=True)
    raw = zipped.raw.read(decode_content=False)
    assert zipped.status_code == 200
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in zipped.headers.get("Vary", "")
    # One object, stored gzipped, gunzipped for the client that did not ask.
    assert object_id(zipped) == object_id(plain)
    assert gzip.decompress(raw) == plain.content
    assert json.loads(gzip.decompress(raw)) == plain.json()
    direct = requests.get(f"http://{varnish.backend}/v1/stats", headers=AUTH, timeout=TIMEOUT)
    assert set(plain.json()) == set(direct.json())


def test_credentials_are_part_of_the_key(varnish):
    assert varnish.get(headers=AUTH).status_code == 200
    owner = object_id(varnish.get(headers=AUTH))
    others = [
        {"Authorization": "Bearer someone-elses-key"},
        {"X-Api-Key": API_KEY},  # the same key in the other header: its own object
        {"X-Api-Key": "someone-elses-key"},
        {"Authorization": f"Bearer {API_KEY}", "X-Api-Key": "extra"},
        {},  # no credentials at all
        {"Cookie": "session=whatever"},  # cookies are removed, never keyed
    ]
    for headers in others:
        for _ in range(2):
            r = varnish.get(headers=headers)
            assert served_from(r) != owner, (headers, r.headers)
            # A refused key (401 once the endpoint needs one) is never
            # stored: each try goes to the gateway.
            if r.status_code != 200:
                assert r.headers["X-Cache"] == "MISS", (headers, r.headers)


def test_everything_else_passes(varnish):
    before = varnish.counter("MAIN.backend_req")
    body = {"users": ["alice"], "event": "varnish.test", "payload": {"n": 1}}
    for _ in range(2):
        r = requests.post(f"{varnish.base}/v1/notifications", json=body, headers=AUTH,
                          timeout=TIMEOUT)
        assert r.status_code == 202, r.text
        assert r.headers["X-Cache"] == "PASS"
    for path in ("/metrics", "/healthz", "/readyz", "/v1/openapi.json"):
        for _ in range(2):
            r = varnish.get(path, headers=AUTH)
            assert r.headers["X-Cache"] == "PASS", (path, r.headers)
    assert varnish.counter("MAIN.backend_req") - before == 2 + 4 * 2
    # A WebSocket upgrade is refused with a JSON error: browsers go to HAProxy.
    r = varnish.get("/ws", headers={"Upgrade": "websocket", "Connection": "Upgrade"})
    assert r.status_code == 501
    assert r.json()["error"]["code"] == "websocket_not_here"
    # A client cannot forge the cache verdict.
    r = varnish.get("/metrics", headers={"X-Herald-Cache": "HIT"})
    assert r.headers["X-Cache"] == "PASS"


def test_grace_serves_the_last_answer_while_the_backend_is_down(tmp_path_factory):
    gw = Gateway(tmp_path_factory.mktemp("gateway"))
    gw.start()
    # TTL 1 s, stale for 3 s more while healthy (room for a slow poll to
    # land in that window), for 6 h while sick.
    v = Varnish(tmp_path_factory.mktemp("varnish"), f"127.0.0.1:{gw.port}",
                env={"HERALD_VARNISH_STATS_TTL": "1s", "HERALD_VARNISH_STATS_GRACE": "3s"})
    try:
        v.start()
        first = v.get(headers=AUTH)
        assert first.status_code == 200 and first.headers["X-Cache"] == "MISS"
        oid = object_id(v.get(headers=AUTH))
        # Healthy: past the TTL the stale copy is served once while a
        # background fetch replaces it; then a new object is served.
        stale = wait_for("stale hit", lambda: (r := v.get(headers=AUTH)).headers["X-Cache"]
                         == "HIT-STALE" and r)
        assert object_id(stale) == oid
        fresh = wait_for("refreshed object", lambda: served_from(r := v.get(headers=AUTH))
                         not in (None, oid) and r)
        # (A new answer: the same fields, its figures may have moved.)
        assert fresh.status_code == 200 and set(fresh.json()) == set(first.json())
        last = fresh.content

        gw.stop()
        gw.proc = None
        # Once the probe has seen it gone (no HTTP request meanwhile: a miss
        # now would be a fetch from a dead backend, not what is tested) ...
        wait_for("the probe calling the gateway sick", lambda: v.backend_health() == "sick",
                 SICK_TIMEOUT)
        # ... the object is served, by the 6 h grace of a sick backend, until
        # it is older than TTL + healthy grace (4 s) and beyond.
        def stale_answer():
            r = v.get(headers=AUTH)
            assert r.status_code == 200, r.text
            assert r.headers["X-Cache"] == "HIT-STALE", r.headers
            assert r.content == last
            return int(r.headers["Age"]) > 5

        wait_for("a stale answer older than TTL + healthy grace", stale_answer)
        for _ in range(3):
            assert stale_answer()
        # Nothing cached and no backend: the fixed 503 body, never stored.
        for path in ("/v1/stats?topics_limit=5", "/v1/notifications/nothing-here"):
            r = v.get(path, headers=AUTH)
            assert r.status_code == 503, (path, r.text)
            assert r.json() == {"error": {
                "code": "backend_unavailable",
                "message": "no Herald router is answering; retry in a few seconds"}}
            assert r.headers["Retry-After"] == "5"
            assert r.headers["Cache-Control"] == "no-store"
    finally:
        v.stop()
        if gw.proc is not None:
            gw.stop()


def test_conditional_requests(varnish):
    """The backend's validators are kept: a client's If-None-Match or
    If-Modified-Since is answered 304 from the cache."""
    r = varnish.get(headers=AUTH)
    assert r.status_code == 200
    etag, modified = r.headers.get("ETag"), r.headers.get("Last-Modified")
    if etag is None and modified is None:
        # The gateway on main sends neither yet (issue 18's stats work adds
        # both): then there is nothing to validate against.
        assert varnish.get(headers={**AUTH, "If-None-Match": '"x"'}).status_code == 200
        return
    if etag:
        r2 = varnish.get(headers={**AUTH, "If-None-Match": etag})
        assert r2.status_code == 304 and r2.headers["X-Cache"] == "HIT"
    if modified:
        r2 = varnish.get(headers={**AUTH, "If-Modified-Since": modified})
        assert r2.status_code == 304 and r2.headers["X-Cache"] == "HIT"


# -- the VCL's other rules, against a scripted router ---------------------------------
# What the gateway on main does not serve yet (the console's page and assets,
# validators on /v1/stats) or cannot be made to do on purpose (a Set-Cookie,
# a 500): a small HTTP server stands in for the router, as deploy/testing's
# fake edges do for HAProxy's tests. Varnish is the real one.

class ScriptedRouter:
    """Answers by path; records every request it gets (path, headers)."""

    ETAG = '"stats-v1"'
    MODIFIED = "Wed, 25 Nov 2026 13:00:00 GMT"

    def __init__(self):
        seen = self.seen = []
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if self.path != "/healthz":
                    seen.append((self.path, dict(self.headers)))
                status, headers, body = router.answer(self.path, self.headers)
                self.send_response(status)
                for k, val in headers.items():
                    self.send_header(k, val)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str, headers) -> tuple[int, dict, bytes]:
        js = {"Content-Type": "application/json"}
        if path == "/healthz":
            return 200, js, b'{"status":"ok"}'
        if path == "/console":
            return 200, {"Content-Type": "text/html"}, b"<!doctype html><title>Herald</title>"
        if path == "/console/assets/app.1a2b3c.js":
            return 200, {"Content-Type": "application/javascript"}, b"console.log('herald');\n" * 50
        if path == "/v1/stats?topics_after=validators":
            inm = (headers.get("If-None-Match") or "").replace("W/", "")
            if inm == self.ETAG:
                return 304, {"ETag": self.ETAG, "Last-Modified": self.MODIFIED}, b""
            return 200, {**js, "ETag": self.ETAG, "Last-Modified": self.MODIFIED,
                         "Cache-Control": "public, max-age=15"}, b'{"sessions":{"total":0}}' * 20
        if path == "/v1/stats?topics_after=cookie":
            return 200, {**js, "Set-Cookie": "session=abc"}, b'{"for":"one browser"}'
        if path == "/v1/stats?topics_after=private":
            return 200, {**js, "Cache-Control": "private"}, b'{"for":"one caller"}'
        if path == "/v1/stats?topics_after=error":
            return 500, js, b'{"error":{"code":"internal"}}'
        return 404, js, b'{"error":{"code":"not_found"}}'

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.seen if p == path)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    router = ScriptedRouter()
    v = Varnish(tmp_path_factory.mktemp("varnish"), router.addr,
                env={"HERALD_VARNISH_STATS_TTL": "1s", "HERALD_VARNISH_STATS_GRACE": "3s"})
    try:
        v.start()
        yield router, v
    finally:
        v.stop()
        router.stop()


def ttl_logged(v: Varnish, url: str) -> str:
    """The TTL records of the backend fetches of `url` (varnishlog)."""
    return subprocess.run(
        [tool("varnishlog"), "-n", str(v.name), "-d", "-g", "request",
         "-q", f'BereqURL eq "{url}"', "-i", "TTL"],
        capture_output=True, text=True, timeout=TIMEOUT).stdout


def test_console_assets_for_days_and_the_page_for_seconds(scripted):
    router, v = scripted
    asset = "/console/assets/app.1a2b3c.js"
    for path, ttl, cache_control in ((asset, "604800 86400", "public, max-age=604800, immutable"),
                                     ("/console", "10 60", "no-cache")):
        first = v.get(path, headers={"Cookie": "x=1", "Accept-Encoding": "gzip"})
        second = v.get(path)
        assert (first.status_code, first.headers["X-Cache"]) == (200, "MISS"), path
        assert (second.status_code, second.headers["X-Cache"]) == (200, "HIT"), path
        assert second.headers["Cache-Control"] == cache_control
        assert first.headers["Content-Encoding"] == "gzip" and first.content == second.content
        assert router.count(path) == 1
        assert "Cookie" not in router.seen[-1][1], "cookies reach the router"
        assert re.search(rf"TTL\s+VCL {ttl} 0 ", ttl_logged(v, path)), ttl_logged(v, path)
    # A 404 under /console/assets/ is not stored.
    for _ in range(2):
        r = v.get("/console/assets/missing.js")
        assert (r.status_code, r.headers["X-Cache"]) == (404, "MISS")


def test_what_is_never_stored(scripted):
    router, v = scripted
    for variant in ("cookie", "private", "error"):
        path = f"/v1/stats?topics_after={variant}"
        for _ in range(2):
            r = v.get(path, headers=AUTH)
            assert r.headers["X-Cache"] == "MISS", (variant, r.headers)
        assert router.count(path) == 2, variant


def test_validators_conditional_requests_and_revalidation(scripted):
    router, v = scripted
    path = "/v1/stats?topics_after=validators"
    first = v.get(path, headers={**AUTH, "Accept-Encoding": "gzip"})
    assert first.status_code == 200
    etag = first.headers["ETag"]
    # Stored gzipped, so Varnish weakened the ETag, as it must.
    assert etag == f"W/{ScriptedRouter.ETAG}"
    # A client's validators are answered from the cache.
    r = v.get(path, headers={**AUTH, "If-None-Match": etag})
    assert (r.status_code, r.headers["X-Cache"]) == (304, "HIT")
    r = v.get(path, headers={**AUTH, "If-Modified-Since": ScriptedRouter.MODIFIED})
    assert (r.status_code, r.headers["X-Cache"]) == (304, "HIT")
    assert router.count(path) == 1
    # Past the TTL (1 s here) a refresh asks the router conditionally, and
    # its 304 renews the object: same body, a new object.
    oid = object_id(v.get(path, headers=AUTH))
    wait_for("a conditional refresh",
             lambda: v.get(path, headers=AUTH).status_code == 200 and router.count(path) >= 2)
    conditional = [h for p, h in router.seen if p == path][1]
    assert conditional.get("If-None-Match", "").replace("W/", "") == ScriptedRouter.ETAG
    renewed = wait_for("the renewed object", lambda: served_from(r := v.get(path, headers=AUTH))
                       not in (None, oid) and r)
    assert renewed.content == first.content
