"""Helpers of the distributed end-to-end tests (fixtures are in conftest.py).

The deployment under test is the one `deploy/up` starts on loopback: two
RabbitMQ nodes as independent roots, a herald-router per root, three
herald-gateway edges consuming from both roots, HAProxy hashing browsers
by the `uid` query parameter, and Varnish in front of the routers.
`Deployment` reads what deploy/up wrote in its state directory
(deployment.env, secrets/, run/*.pid; layout in deploy/lib.sh) and drives
it: publish with pika, connect stomp.py through HAProxy (or to an edge
directly), read Varnish's counters, find which
edge a session landed on, read delayed notifications' status from the
routers, take dead letters, stop and start root nodes, kill edges, routers
and Redis, tell which router holds a connection (which one makes a
callback), read the routers' TOML.

Every wait polls a condition or a queue with a deadline; nothing sleeps to
synchronise.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
import tomllib
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import jwt
import pika
import pika.exceptions
import requests
import stomp

REPO = Path(__file__).resolve().parents[2]
DESTINATION = "/user/notifications"

# How long any single expected event may take on a loaded 2-core machine.
TIMEOUT = 10.0
# Longer, for what waits on a RabbitMQ node or a link's reconnect backoff
# (edge and router links back off up to 10 s, with jitter).
RECOVERY = 45.0
# How long to listen for something that must NOT arrive, after a later
# message has already proven ordering.
QUIET = 0.3
# Polling interval of `wait_until` (bounded by each wait's deadline).
POLL = 0.05


def wait_until(what: str, predicate: Callable[[], object], timeout: float = TIMEOUT,
               interval: float = POLL):
    """Poll `predicate` until it returns something truthy (returned), or fail
    after `timeout` seconds saying `what` did not happen (and the last
    exception the predicate raised, if any)."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported if the deadline passes
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)  # polling interval, bounded by the deadline


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def parse_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as a shell would read them (deploy/up writes values
    with printf %q or single quotes); comments and blank lines skipped."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        words = shlex.split(value) if value else [""]
        out[key] = words[0] if words else ""
    return out


def rabbit_bin(name: str) -> str:
    """RabbitMQ's own script (as deploy/lib.sh's rabbit_bin)."""
    p = Path("/usr/lib/rabbitmq/bin") / name
    return str(p) if os.access(p, os.X_OK) else name


# ---------------------------------------------------------------------------
# STOMP over WebSocket through HAProxy (stomp.py).

@dataclass
class Event:
    kind: str  # connected | message | receipt | error | disconnected
    headers: dict
    body: str
    # Wall clock (epoch seconds) when the listener got it: comparable with
    # the routers' due times (epoch ms), on the same machine.
    at: float = field(default_factory=time.time)


class _Listener(stomp.ConnectionListener):
    def __init__(self, sink: Callable[[Event], None]):
        self.sink = sink

    def on_connected(self, frame):
        self.sink(Event("connected", dict(frame.headers), frame.body))

    def on_message(self, frame):
        self.sink(Event("message", dict(frame.headers), frame.body))

    def on_receipt(self, frame):
        self.sink(Event("receipt", dict(frame.headers), frame.body))

    def on_error(self, frame):
        self.sink(Event("error", dict(frame.headers), frame.body))

    def on_disconnected(self):
        self.sink(Event("disconnected", {}, ""))


class Client:
    """One stomp.py WebSocket session through HAProxy (`/ws?uid=<uid>`) and
    the queue of what it received. `edge` is where the session landed."""

    def __init__(self, dep: "Deployment", uid: str, token: str,
                 tap: Callable[[Event], bool] | None = None):
        """`tap`, if given, sees every event first; those it returns True
        for are not queued."""
        self.dep = dep
        self.uid = uid
        self.token = token
        self.edge: str | None = None
        host, port = dep.proxy
        self.conn = stomp.WSConnection(
            [(host, port)], ws_path=f"/ws?uid={uid}",
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            reconnect_attempts_max=1, timeout=TIMEOUT, heartbeats=(0, 0))
        self.events: queue.Queue[Event] = queue.Queue()
        self._tap = tap
        self.conn.set_listener("herald-dist", _Listener(self._sink))
        self._receipts = 0
        self.connected: Event | None = None

    def _sink(self, e: Event) -> None:
        if self._tap is None or not self._tap(e):
            self.events.put(e)

    # -- receiving -----------------------------------------------------------
    def next(self, timeout: float = TIMEOUT) -> Event:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.uid}: nothing received within {timeout}s") from None

    def expect(self, kind: str, timeout: float = TIMEOUT) -> Event:
        e = self.next(timeout)
        assert e.kind == kind, f"{self.uid}: expected {kind}, got {e}"
        return e

    def message(self, timeout: float = TIMEOUT) -> Event:
        return self.expect("message", timeout)

    def messages(self, n: int, timeout: float = TIMEOUT) -> list[Event]:
        return [self.message(timeout) for _ in range(n)]

    def assert_silent(self, timeout: float = QUIET) -> None:
        """Nothing more is queued (call after ordering has been proven)."""
        try:
            e = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError(f"{self.uid}: unexpected {e}")

    def read_timeout(self, seconds: float | None) -> None:
        """Set the connected socket's read timeout (None: wait forever).
        websocket-client applies it to every read, and stomp.py drops the
        connection when one times out; a read already waiting keeps the
        timeout it started with, so set it before a request whose answer
        ends that read (SUBSCRIBE and its RECEIPT)."""
        self.conn.transport.socket.settimeout(seconds)

    # -- sending -------------------------------------------------------------
    def connect(self, headers: dict | None = None) -> Event:
        self.conn.connect(passcode=self.token, headers=headers or {}, wait=False)
        self.connected = self.expect("connected")
        return self.connected

    def subscribe(self, headers: dict | None = None) -> None:
        self._receipts += 1
        receipt = f"r-{self._receipts}"
        h = dict(headers or {})
        h["receipt"] = receipt
        self.conn.subscribe(DESTINATION, id="sub-0", ack="auto", headers=h)
        r = self.expect("receipt")
        assert r.headers["receipt-id"] == receipt

    def close(self, wait: bool = True) -> None:
        if not self.conn.is_connected():
            self.conn.transport.stop()
            return
        try:
            self.conn.disconnect()
        except Exception:  # noqa: BLE001 - the socket may be gone already
            self.conn.transport.stop()
            return
        if wait:
            deadline = time.monotonic() + TIMEOUT
            while True:
                e = self.next(max(0.0, deadline - time.monotonic()))
                if e.kind == "disconnected":
                    return


# ---------------------------------------------------------------------------
# SockJS xhr-streaming (hand-rolled: the protocol is simple and a test must
# see exactly which requests are made).

class XhrStreamingSession:
    """One SockJS session over xhr-streaming: a long POST .../xhr_streaming
    read line by line in a thread, frames sent with POST .../xhr_send; every
    request carries `?uid=`."""

    def __init__(self, dep: "Deployment", uid: str):
        self.dep = dep
        self.uid = uid
        self.server_id = f"{uuid.uuid4().int % 1000:03d}"
        self.session_id = uuid.uuid4().hex
        self.base = f"/sockjs/{self.server_id}/{self.session_id}"
        self.frames: queue.Queue = queue.Queue()  # ("o"|"h"|"a"|"c"|"eof", data)
        self._conn: http.client.HTTPConnection | None = None
        self._thread: threading.Thread | None = None
        self.stream_status: int | None = None

    def _url(self, transport: str) -> str:
        return f"{self.base}/{transport}?uid={self.uid}"

    def open(self, first: bool = True) -> None:
        """Open the receiving request: the session's first (answered with
        the open frame `o`) or a later one (after the previous response
        ended at the streaming limit)."""
        host, port = self.dep.proxy
        if self._conn is not None:
            self._conn.close()
        self._conn = http.client.HTTPConnection(host, port, timeout=RECOVERY)
        self._conn.request("POST", self._url("xhr_streaming"), body=b"",
                           headers={"Origin": "http://herald.test"})
        resp = self._conn.getresponse()
        self.stream_status = resp.status
        assert resp.status == 200, f"xhr_streaming: {resp.status} {resp.read()[:200]!r}"
        self._thread = threading.Thread(target=self._read, args=(resp,), daemon=True)
        self._thread.start()
        if first:
            kind, _ = self.next_frame()
            assert kind == "o", f"expected the open frame, got {kind}"

    def _read(self, resp) -> None:
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.rstrip(b"\n")
                if not line or set(line) == {ord("h")} and len(line) > 1:
                    continue  # the 2 KiB prelude
                kind = chr(line[0])
                if kind == "a":
                    for frame in json.loads(line[1:]):
                        self.frames.put(("a", frame))
                elif kind == "c":
                    self.frames.put(("c", json.loads(line[1:])))
                else:
                    self.frames.put((kind, None))
        except Exception as e:  # noqa: BLE001 - reported through the queue
            self.frames.put(("eof", repr(e)))
            return
        self.frames.put(("eof", None))

    def next_frame(self, timeout: float = TIMEOUT, skip_heartbeats: bool = True):
        deadline = time.monotonic() + timeout
        while True:
            try:
                kind, data = self.frames.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"sockjs {self.uid}: nothing within {timeout}s") from None
            if kind == "h" and skip_heartbeats:
                continue
            return kind, data

    def stomp_frame(self, timeout: float = TIMEOUT) -> tuple[str, dict, str]:
        """The next STOMP frame: (command, headers, body)."""
        kind, data = self.next_frame(timeout)
        assert kind == "a", f"sockjs {self.uid}: expected a message frame, got {kind} {data!r}"
        return parse_stomp(data)

    def send(self, *stomp_frames: str) -> int:
        host, port = self.dep.proxy
        conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
        try:
            conn.request("POST", self._url("xhr_send"), body=json.dumps(list(stomp_frames)),
                         headers={"Content-Type": "text/plain", "Origin": "http://herald.test"})
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    def close(self, wait: bool = False) -> None:
        if self._conn is not None:
            try:
                self.send(stomp_encode("DISCONNECT", {}))
            except Exception:  # noqa: BLE001
                pass
            self._conn.close()


def stomp_encode(command: str, headers: dict, body: str = "") -> str:
    head = "".join(f"{k}:{v}\n" for k, v in headers.items())
    return f"{command}\n{head}\n{body}\x00"


def parse_stomp(frame: str) -> tuple[str, dict, str]:
    head, _, body = frame.partition("\n\n")
    lines = head.split("\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k, v)
    return lines[0], headers, body[:-1] if body.endswith("\x00") else body


# ---------------------------------------------------------------------------
# The deployment.

@dataclass
class Root:
    name: str  # root1
    node: str  # herald-root1@localhost
    url: str  # amqp://guest:guest@127.0.0.1:5681/%2f


@dataclass
class Deployment:
    state: Path
    up_args: list[str]
    env: dict[str, str]
    jwt_secret: str
    api_key: str
    roots: dict[str, Root] = field(default_factory=dict)
    edges: dict[str, str] = field(default_factory=dict)  # edge1 -> 127.0.0.1:9101
    routers: dict[str, str] = field(default_factory=dict)
    proxy: tuple[str, int] = ("127.0.0.1", 8000)
    stats: str = "127.0.0.1:8404"
    _placement_lock: threading.Lock = field(default_factory=threading.Lock)
    # Sessions opened by the current test (closed after it).
    sessions: list = field(default_factory=list)
    # The routers' routing.mode (HERALD_DIST_ROUTING).
    routing: str = "fanout"

    @classmethod
    def from_state(cls, state: Path, up_args: list[str]) -> "Deployment":
        env = parse_env_file(state / "deployment.env")
        secrets = state / "secrets"
        dep = cls(state=state, up_args=up_args, env=env,
                  jwt_secret=(secrets / "jwt-secret").read_text().splitlines()[0],
                  api_key=(secrets / "api-key").read_text().splitlines()[0])
        for r in env["ROOTS"].split():
            dep.roots[r] = Root(r, env[f"NODE_{r}"], env[f"AMQP_URL_{r}"])
        for e in env["EDGES"].split():
            dep.edges[e] = env[f"ADDR_{e}"]
        for r in env["ROUTERS"].split():
            dep.routers[r] = env[f"ADDR_{r}"]
        host, _, port = env["PROXY"].rpartition(":")
        dep.proxy = (host, int(port))
        dep.stats = env["STATS"]
        return dep

    # -- identities ----------------------------------------------------------
    def token(self, sub: str, client: str | None = None, site: str | None = None) -> str:
        claims: dict = {"sub": sub, "exp": int(time.time()) + 3600}
        if client is not None:
            claims["client"] = client
        if site is not None:
            claims["site"] = site
        return jwt.encode(claims, self.jwt_secret, algorithm="HS256")

    # -- HTTP ----------------------------------------------------------------
    @property
    def proxy_url(self) -> str:
        return f"http://{self.proxy[0]}:{self.proxy[1]}"

    @property
    def varnish_url(self) -> str:
        """Varnish in front of the routers (deploy/up's VARNISH)."""
        return f"http://{self.env['VARNISH']}"

    def varnish_counter(self, name: str) -> int:
        """A varnishstat counter (`MAIN.backend_req`) of deploy/up's varnishd."""
        stat = "/usr/bin/varnishstat" if os.access("/usr/bin/varnishstat", os.X_OK) \
            else "varnishstat"
        res = subprocess.run([stat, "-n", self.env["VARNISH_WORKDIR"], "-1", "-f", name],
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert res.returncode == 0, f"varnishstat: {res.stdout}{res.stderr}"
        for line in res.stdout.splitlines():
            fields = line.split()
            if fields and fields[0] == name:
                return int(fields[1])
        raise AssertionError(f"no counter {name} in varnishstat:\n{res.stdout}")

    def publish_http(self, body, expect: int = 202) -> dict:
        """POST /v1/notifications through HAProxy (round robin over the routers)."""
        r = requests.post(f"{self.proxy_url}/v1/notifications", json=body,
                          headers={"Authorization": f"Bearer {self.api_key}"}, timeout=TIMEOUT)
        assert r.status_code == expect, f"{r.status_code} {r.text}"
        return r.json()

    def status(self, nid: str, router: str | None = None) -> dict | None:
        """GET /v1/notifications/{id} through HAProxy (a router, round robin;
        they share Redis), or from `router` itself: a delayed notification's
        status, None if unknown."""
        base = f"http://{self.routers[router]}" if router else self.proxy_url
        r = requests.get(f"{base}/v1/notifications/{nid}",
                         headers={"Authorization": f"Bearer {self.api_key}"}, timeout=TIMEOUT)
        if r.status_code == 404:
            return None
        assert r.status_code == 200, f"{r.status_code} {r.text}"
        return r.json()

    def wait_state(self, nid: str, *states: str, timeout: float = TIMEOUT,
                   router: str | None = None) -> dict:
        """Poll the status of `nid` (through HAProxy, or from `router`: while
        the other is down, before HAProxy has noticed) until its state is
        one of `states`; return that status."""
        last: list = [None]

        def reached():
            s = last[0] = self.status(nid, router)
            return s if s is not None and s["state"] in states else None

        try:
            return wait_until(f"{nid} to be {' or '.join(states)}", reached, timeout)
        except AssertionError as e:
            raise AssertionError(f"{e}; its last status: {last[0]}") from None

    def router_config(self, router: str) -> dict:
        """The TOML `router` runs with (deploy/up --router-config copies it
        to routers/<router>/router.toml); {} when it runs with the
        defaults."""
        path = self.state / "routers" / router / "router.toml"
        if not path.is_file():
            return {}
        return tomllib.loads(path.read_text())

    def router_ready(self, router: str) -> bool:
        """Whether `router`'s /readyz answers 200 (its broker and Redis)."""
        try:
            return requests.get(f"http://{self.routers[router]}/readyz",
                                timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def connection_owner(self, port: int, peer_port: int) -> str | None:
        """Which router holds the TCP connection from 127.0.0.1:`port` to
        127.0.0.1:`peer_port` (the client end of a request a test's server
        is handling), by the socket's inode in /proc/net/tcp and the
        routers' open descriptors; None if no live router does."""
        want = f"0100007F:{port:04X} 0100007F:{peer_port:04X}"
        inodes = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            cols = line.split()
            if f"{cols[1]} {cols[2]}" == want:
                inodes.add(f"socket:[{cols[9]}]")
        for name in self.routers:
            try:
                fds = Path(f"/proc/{self.pid(name)}/fd")
                for fd in fds.iterdir():
                    try:
                        if os.readlink(fd) in inodes:
                            return name
                    except OSError:
                        continue  # closed meanwhile
            except (OSError, ValueError, AssertionError):
                continue  # not running (killed by the test)
        return None

    def redis(self, *args: str) -> str:
        """redis-cli against the routers' Redis (REDIS_ADDR); its output."""
        host, _, port = self.env["REDIS_ADDR"].rpartition(":")
        cli = "/usr/bin/redis-cli" if os.access("/usr/bin/redis-cli", os.X_OK) else "redis-cli"
        res = subprocess.run([cli, "-h", host, "-p", port, *args], capture_output=True,
                             text=True, timeout=TIMEOUT)
        assert res.returncode == 0, f"redis-cli {' '.join(args)}: {res.stdout}{res.stderr}"
        return res.stdout

    def router_metric(self, name: str) -> float:
        """Sum of metric `name` over every router."""
        return sum(self.metric(a, name) for a in self.routers.values())

    def edge_stats(self, edge: str) -> dict:
        """The edge's own GET /v1/stats (not through HAProxy, not cached)."""
        return requests.get(f"http://{self.edges[edge]}/v1/stats", timeout=TIMEOUT).json()

    def metric(self, addr: str, name: str) -> float:
        """Sum of every sample of metric `name` on http://addr/metrics."""
        text = requests.get(f"http://{addr}/metrics", timeout=TIMEOUT).text
        total = 0.0
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$")
        for line in text.splitlines():
            m = pattern.match(line)
            if m:
                total += float(m.group(2))
        return total

    def sessions_opened(self) -> dict[str, float]:
        """Every edge's herald_sessions_opened_total (all transports): a
        counter, so a new session shows as +1 on exactly one edge whatever
        else closes meanwhile."""
        return {e: self.metric(a, "herald_sessions_opened_total")
                for e, a in self.edges.items() if self.edge_alive(e)}

    def edge_alive(self, edge: str) -> bool:
        try:
            return requests.get(f"http://{self.edges[edge]}/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def haproxy_servers(self) -> dict[tuple[str, str], str]:
        """(backend, server) -> status, from HAProxy's stats CSV."""
        text = requests.get(f"http://{self.stats}/;csv", timeout=TIMEOUT).text
        out = {}
        header = None
        for row in text.splitlines():
            cols = row.split(",")
            if row.startswith("# "):
                header = [c.strip("# ") for c in cols]
                continue
            if header and len(cols) > 17 and cols[1] not in ("FRONTEND", "BACKEND"):
                out[(cols[0], cols[1])] = cols[header.index("status")]
        return out

    # -- placement -----------------------------------------------------------
    def placed(self, action: Callable[[], object], what: str, exclude: tuple = ()) -> str:
        """Run `action` (which opens exactly one session through HAProxy) and
        return the edge that session landed on."""
        with self._placement_lock:
            before = self.sessions_opened()
            action()

            def landed():
                now = self.sessions_opened()
                grown = [e for e in now if now[e] > before.get(e, 0)]
                if len(grown) > 1:
                    raise AssertionError(f"{what}: sessions opened on several edges: {grown}")
                return grown[0] if grown else None

            return wait_until(f"{what} to show up in an edge's herald_sessions_opened_total",
                              landed)

    def client(self, uid: str, client: str | None = None, site: str | None = None,
               subscribe: bool = True, headers: dict | None = None,
               sub_headers: dict | None = None,
               tap: Callable[[Event], bool] | None = None) -> Client:
        """A stomp.py session through HAProxy as user `uid` (`?uid=uid`,
        passcode = a JWT with sub=uid), connected (and subscribed), with
        `.edge` set to the edge it landed on."""
        c = Client(self, uid, self.token(uid, client=client, site=site), tap=tap)
        self.sessions.append(c)
        c.edge = self.placed(lambda: c.connect(headers), f"the session of {uid}")
        if subscribe:
            c.subscribe(sub_headers)
        return c

    def direct_client(self, edge: str, uid: str, client: str | None = None,
                      headers: dict | None = None) -> Client:
        """A subscribed stomp.py session on `edge` itself (not through
        HAProxy, which hashes a user to one edge). Such sessions may sit
        idle longer than TIMEOUT, so it asks for the server's heart-beats
        and, once CONNECTED says how often they come (the larger of the two
        sides: the edges' `heartbeat_send_ms`, 10 s), gives the socket's
        read timeout (TIMEOUT until then; websocket-client applies it to
        every read) two and a half intervals: a read timeout equal to the
        interval cut idle sessions whenever a heart-beat came a moment
        late."""
        c = Client(self, uid, self.token(uid, client=client))
        host, _, port = self.edges[edge].rpartition(":")
        c.conn = stomp.WSConnection(
            [(host, int(port))], ws_path="/ws",
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            reconnect_attempts_max=1, timeout=TIMEOUT, heartbeats=(0, 1000))
        c.conn.set_listener("herald-dist", _Listener(c._sink))
        c.edge = edge
        self.sessions.append(c)
        connected = c.connect(headers)
        sx = int(connected.headers.get("heart-beat", "0,0").split(",")[0])
        if sx:
            c.read_timeout(max(TIMEOUT, 2.5 * sx / 1000))
        c.subscribe()
        return c

    def clients_on_distinct_edges(self, prefix: str, specs: list[dict],
                                  max_tries: int = 40) -> list[Client]:
        """One subscribed client per spec (keyword arguments of `client`
        besides uid), the first min(len(specs), edges) on pairwise different
        edges: candidate user ids are tried until HAProxy puts one on an edge
        not used yet (candidates that land elsewhere are closed).

        A spec with a client company, site or headers is placed by a bare
        session first (its uid alone, not subscribed), then opened as
        specified under that uid, which HAProxy hashes to the same edge: a
        closed candidate of that client company would leave its edge holding
        the company for the mailbox TTL, and targeted routers would rightly
        send that company's notifications there too."""
        out: list[Client] = []
        for k, spec in enumerate(specs):
            for attempt in range(max_tries):
                uid = f"{prefix}{k}-{attempt}-{uuid.uuid4().hex[:6]}"
                used = {o.edge for o in out}
                if k < len(self.edges) and spec:
                    probe = self.client(uid, subscribe=False)
                    probe.close()
                    if probe.edge in used:
                        continue
                    c = self.client(uid, **spec)
                    assert c.edge == probe.edge, f"{uid}: {probe.edge}, then {c.edge}"
                    out.append(c)
                    break
                c = self.client(uid, **spec)
                if k >= len(self.edges) or c.edge not in used:
                    out.append(c)
                    break
                c.close()
            else:
                raise AssertionError(f"no user id landed on a new edge in {max_tries} tries")
        self.routers_know(out)
        return out

    def clients_per_edge(self, prefix: str, per_edge: int, max_tries: int = 80,
                         **spec) -> dict[str, list[Client]]:
        """`per_edge` subscribed clients on every edge (edge -> clients)."""
        out: dict[str, list[Client]] = {e: [] for e in self.edges}
        for attempt in range(max_tries):
            if all(len(v) == per_edge for v in out.values()):
                self.routers_know([c for cs in out.values() for c in cs])
                return out
            c = self.client(f"{prefix}-{attempt}-{uuid.uuid4().hex[:6]}", **spec)
            if len(out[c.edge]) < per_edge:
                out[c.edge].append(c)
            else:
                c.close()
        raise AssertionError(f"could not place {per_edge} users on every edge in {max_tries} "
                             f"tries: {({e: len(v) for e, v in out.items()})}")

    def routers_know(self, clients: list) -> None:
        """Targeted routing: wait until every router has applied the
        presence reports of these sessions, so what is published next
        reaches them directly, in order. (Before that, a notification
        published while the report is on its way reaches the session through
        the routers' catch-up, possibly after later ones: docs/architecture.md,
        targeted routing.) A probe through each root to each user alone, which
        each of their sessions receives and which is taken off its queue:
        whether it went there directly or by the catch-up, its router had
        the report by then. (One probe to users on every edge would go to
        every edge whatever the router knows, and prove nothing.) Nothing in
        fanout mode."""
        if self.routing != "targeted" or not clients:
            return
        probes: dict[str, set[str]] = {}
        for root in self.roots:
            with self.amqp(root) as conn:
                ch = confirmed_channel(conn)
                for uid in sorted({c.uid for c in clients}):
                    mid = unique("probe")
                    amqp_publish(ch, "{}", {"users": [uid], "event": "herald.test.probe"},
                                 message_id=mid)
                    probes.setdefault(uid, set()).add(mid)
        for c in clients:
            want = probes[c.uid]
            got = {c.message().headers["message-id"] for _ in want}
            assert got == want, f"{c.uid} on {c.edge}: {got} instead of the probes {want}"

    def close_sessions(self) -> None:
        for s in self.sessions:
            try:
                s.close(wait=False)
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
        self.sessions.clear()

    # -- AMQP ----------------------------------------------------------------
    def amqp(self, root: str, **params) -> pika.BlockingConnection:
        p = pika.URLParameters(self.roots[root].url)
        p.connection_attempts = 1
        p.socket_timeout = 5
        p.blocked_connection_timeout = 10
        p.client_properties = {"connection_name": f"herald-dist-test {root}"}
        for k, v in params.items():
            setattr(p, k, v)
        return pika.BlockingConnection(p)

    def consumer_counts(self, root: str) -> dict[str, int]:
        """Consumers of the publications queue and of every edge's queue on `root`."""
        conn = self.amqp(root)
        try:
            out = {}
            for q in ["herald.publications"] + [f"herald.edge.{e}" for e in self.edges]:
                ch = conn.channel()
                try:
                    out[q] = ch.queue_declare(q, passive=True).method.consumer_count
                    ch.close()
                except pika.exceptions.ChannelClosedByBroker:
                    out[q] = 0  # 404: not declared (yet)
            return out
        finally:
            conn.close()

    def pipeline_ready(self) -> bool:
        """Every root has its router consuming and every live edge consuming."""
        for r in self.roots:
            counts = self.consumer_counts(r)
            if counts["herald.publications"] < 1:
                return False
            if any(counts[f"herald.edge.{e}"] != 1 for e in self.edges):
                return False
        return True

    def wait_ready(self, timeout: float = RECOVERY) -> None:
        """The whole deployment is serving: every edge healthy and UP in
        HAProxy, every router UP, every root link consuming."""
        wait_until("every edge healthy", lambda: all(self.edge_alive(e) for e in self.edges),
                   timeout)

        def all_up():
            servers = self.haproxy_servers()
            want = [("edges", e) for e in self.edges] + [("be_publish", r) for r in self.routers]
            return all(servers.get(k, "").startswith("UP") for k in want)

        wait_until("every edge and router UP in HAProxy", all_up, timeout)
        wait_until("every router and edge consuming on every root", self.pipeline_ready, timeout)
        if self.routing == "targeted":
            # Otherwise a test right after start-up (or a restart) would run
            # while the routers still send everything to every edge.
            wait_until("every router to route by edge, trusting every edge",
                       self.routing_views_trusted, timeout)

    def routing_edges(self, router: str) -> dict[str, float]:
        """herald_routing_edges by state (trusted, stale, incomplete) on one router."""
        text = requests.get(f"http://{self.routers[router]}/metrics", timeout=TIMEOUT).text
        return {m.group(1): float(m.group(2)) for m in
                re.finditer(r'^herald_routing_edges\{state="(\w+)"\} (\S+)$', text, re.M)}

    def routing_views_trusted(self, routers=None) -> bool:
        """Every router (or those named) routes by edge (past its warm-up)
        and trusts its view of every edge (a whole snapshot, or every report
        of each)."""
        want = float(len(self.edges))
        return all(self.routing_edges(r).get("trusted") == want
                   and self.metric(self.routers[r], "herald_routing_view_ready") == 1
                   for r in (routers or self.routers))

    # -- operating the processes ---------------------------------------------
    def rabbitmqctl(self, root: str, *args: str, timeout: float = 60) -> str:
        env = dict(os.environ, HOME=str(self.state / "rabbitmq" / "home"))
        res = subprocess.run([rabbit_bin("rabbitmqctl"), "-n", self.roots[root].node, *args],
                             env=env, capture_output=True, text=True, timeout=timeout)
        assert res.returncode == 0, (f"rabbitmqctl {' '.join(args)} on {root}: "
                                     f"{res.returncode}\n{res.stdout}{res.stderr}")
        return res.stdout

    def amqp_refused(self, root: str) -> bool:
        try:
            self.amqp(root).close()
            return False
        except pika.exceptions.AMQPError:
            return True

    def pid(self, name: str) -> int:
        """The pid deploy/up recorded for process `name`, checked to be ours
        (it carries deploy/up's tag; see deploy/lib.sh)."""
        pid = int((self.state / "run" / f"{name}.pid").read_text().split()[0])
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        tag = f"HERALD_DEPLOY_TAG={self.state}#{name}".encode()
        assert tag in environ, f"pid {pid} is not the {name} deploy/up started"
        return pid

    def kill(self, name: str) -> None:
        """SIGKILL a process deploy/up started, and wait until it is gone."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGKILL)

        def gone():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except FileNotFoundError:
                return True
            return stat.rpartition(")")[2].split()[0] == "Z"

        wait_until(f"{name} (pid {pid}) to die", gone)

    def up_again(self) -> str:
        """Run deploy/up again: it starts only what is not running."""
        res = subprocess.run([str(REPO / "deploy" / "up"), *self.up_args],
                             capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, f"deploy/up (again) failed:\n{res.stdout}{res.stderr}"
        return res.stdout

    def log(self, name: str, tail: int = 4000) -> str:
        try:
            return (self.state / "logs" / f"{name}.log").read_text(errors="replace")[-tail:]
        except OSError:
            return ""


# ---------------------------------------------------------------------------
# Publishing with pika.

def amqp_publish(channel, body: bytes | str, headers: dict | None, message_id: str | None = None,
                 content_type: str = "application/json", exchange: str = "herald",
                 routing_key: str = "test", kind: str | None = None) -> None:
    """Publish to the `herald` exchange; with confirms on, returns once the
    broker confirmed (pika raises otherwise). `kind` is the `type` property
    (`herald.cancel`)."""
    if isinstance(body, str):
        body = body.encode()
    props = pika.BasicProperties(message_id=message_id, content_type=content_type,
                                 headers=headers, delivery_mode=2, type=kind)
    channel.basic_publish(exchange=exchange, routing_key=routing_key, body=body,
                          properties=props)


def confirmed_channel(conn: pika.BlockingConnection):
    ch = conn.channel()
    ch.confirm_delivery()
    return ch


def text(value) -> str:
    """An AMQP header value as text (pika gives long strings as bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def dead_letters(dep: Deployment, root: str, wanted: set[str]) -> dict:
    """Take the dead letters with these message ids from queue herald.dead on
    `root` (waiting for them): id -> (method, properties, body). Any other
    dead letter is left in the queue."""
    found = {}
    with dep.amqp(root) as conn:
        ch = conn.channel()

        def take():
            while True:
                method, props, body = ch.basic_get("herald.dead", auto_ack=False)
                if method is None:
                    return wanted <= found.keys()
                if props.message_id in wanted:
                    found[props.message_id] = (method, props, body)
                    ch.basic_ack(method.delivery_tag)
                # Others stay unacked: back in the queue when the channel closes.

        wait_until(f"dead letters {sorted(wanted - found.keys())} in herald.dead on {root}",
                   take, TIMEOUT)
    return found


def ids_of(events: list[Event]) -> list[str]:
    return [e.headers["message-id"] for e in events]


def duplicates(ids) -> dict[str, int]:
    return {k: n for k, n in Counter(ids).items() if n > 1}


# ---------------------------------------------------------------------------
def offline_ms(last_heard: float) -> str:
    """The `offline-ms` of a resuming CONNECT: milliseconds since
    `last_heard` (wall clock, as `Event.at`), when the old session last
    sent a frame."""
    return str(int((time.time() - last_heard) * 1000))


# A subscriber that survives reconnects, resuming from its last sequence.

class ResumingSubscriber:
    """A user's stream through HAProxy that records every MESSAGE and, if
    its session drops, reconnects (same uid) with `last-seq` + `epoch` +
    `offline-ms` (how long ago the old session last sent a frame), as
    Herald's browser client does."""

    def __init__(self, dep: Deployment, uid: str):
        self.dep = dep
        self.uid = uid
        self.cond = threading.Condition()
        self.messages: list[Event] = []
        self.gaps: list[Event] = []
        self.reconnects: list[dict] = []  # the resume headers of each reconnect
        self.last_seq: str | None = None
        self.epoch: str | None = None
        self._dropped = threading.Event()
        self._stopping = threading.Event()
        self.client = dep.client(uid, tap=self._tap)
        self.edge = self.client.edge
        self.epoch = self.client.connected.headers["epoch"]
        self.last_seq = self.client.connected.headers["seq"]
        self.last_heard = self.client.connected.at
        self._thread = threading.Thread(target=self._reconnect_loop, daemon=True)
        self._thread.start()

    def _tap(self, e: Event) -> bool:
        if e.kind == "message":
            with self.cond:
                if e.headers.get("event") == "herald.gap":
                    self.gaps.append(e)
                else:
                    self.messages.append(e)
                self.last_seq = e.headers["seq"]
                self.epoch = e.headers["epoch"]
                self.last_heard = e.at
                self.cond.notify_all()
            return True
        if e.kind == "disconnected" and not self._stopping.is_set():
            self._dropped.set()
        return False

    def _reconnect_loop(self) -> None:
        while not self._stopping.is_set():
            if not self._dropped.wait(timeout=0.2):
                continue
            self._dropped.clear()
            deadline = time.monotonic() + RECOVERY
            while not self._stopping.is_set() and time.monotonic() < deadline:
                with self.cond:
                    resume = {"last-seq": self.last_seq, "epoch": self.epoch,
                              "offline-ms": offline_ms(self.last_heard)}
                try:
                    c = self.dep.client(self.uid, headers=resume, tap=self._tap)
                except Exception:  # noqa: BLE001 - retried until the deadline
                    self._stopping.wait(0.2)  # retry interval, bounded by the deadline
                    continue
                self.client = c
                self.reconnects.append(resume)
                break

    def ids(self) -> list[str]:
        with self.cond:
            return [m.headers["message-id"] for m in self.messages]

    def count(self) -> int:
        with self.cond:
            return len(self.messages)

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        with self.cond:
            if not self.cond.wait_for(predicate, timeout=timeout):
                raise AssertionError(f"{self.uid}: timed out after {timeout}s waiting for {what}")

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=TIMEOUT)
        self.client.close(wait=False)
