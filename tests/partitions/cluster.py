"""A small Herald deployment on the hosts of partnet.py, and its clients.

  root    RabbitMQ node herald-part@localhost, AMQP on <root>:5672, its own
          epmd (on the namespace's loopback), heartbeat 2 s
  redis   redis-server on <redis>:6379 (the routers' delayed store, presence)
  router  herald-router on <router>:9201, AMQP heartbeat 2 s, Redis
          timeouts of about a second
  edge1,2 herald-gateway in edge mode on <edgeK>:9101, one root link
          (Herald's own `wire` client, heartbeat 2 s), the queue expiring
          6 s after the edge is gone, STOMP heart-beats of 1 s

The timeouts are short so that each cut is noticed within seconds; the
figures they give scale with them (docs/partitions.md).

The processes are started as deploy/up starts them (deploy/lib.sh's
RabbitMQ environment, the same flags), each in its host's namespace.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pika.exceptions
import requests
import stomp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))

from herald_dist import (  # noqa: E402
    Client, Event, _Listener, rabbit_bin, unique, wait_until)
from partnet import Net  # noqa: E402

# Negotiated on every AMQP connection (the broker proposes it too).
AMQP_HEARTBEAT_S = 2
# edge.queue_expires_secs of the edges here.
QUEUE_EXPIRES_S = 6
# STOMP heart-beats, both ways, of the browsers here (ms).
STOMP_HEARTBEAT_MS = 1000
# The router's Redis timeouts (ms).
REDIS_RESPONSE_TIMEOUT_MS = 1000
REDIS_OPERATION_TIMEOUT_MS = 2000
# The router's wait for the broker's confirms of an HTTP publish (ms).
PUBLISH_TIMEOUT_MS = 3000
# How long anything may take to come back after a heal: a link's reconnect
# backoff (at most 1 s here), a broker's or a router's recovery.
RECOVERY = 30.0
TIMEOUT = 10.0
NODE = "herald-part@localhost"
# Straight to the namespaces' addresses: no proxy from the environment.
HTTP = requests.Session()
HTTP.trust_env = False


def gateway_toml() -> str:
    return f"""
[session]
heartbeat_send_ms = {STOMP_HEARTBEAT_MS}
heartbeat_receive_ms = {STOMP_HEARTBEAT_MS}

[mailbox]
ttl_secs = 120

[edge]
queue_expires_secs = {QUEUE_EXPIRES_S}
reconnect_initial_ms = 200
reconnect_max_ms = 1000
connect_timeout_ms = 2000
"""


def router_toml() -> str:
    return f"""
[amqp]
reconnect_initial_ms = 200
reconnect_max_ms = 1000
connect_timeout_ms = 2000
publish_timeout_ms = {PUBLISH_TIMEOUT_MS}

[redis]
connect_timeout_ms = 1000
response_timeout_ms = {REDIS_RESPONSE_TIMEOUT_MS}
operation_timeout_ms = {REDIS_OPERATION_TIMEOUT_MS}
"""


@dataclass
class Cluster:
    net: Net
    state: Path
    bins: Path
    jwt_secret: str = field(default_factory=lambda: secrets.token_hex(32))
    api_key: str = field(default_factory=lambda: "part-" + secrets.token_hex(16))
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    sessions: list = field(default_factory=list)

    # -- addresses -------------------------------------------------------------
    def amqp_url(self, heartbeat: bool = True) -> str:
        hb = f"?heartbeat={AMQP_HEARTBEAT_S}" if heartbeat else ""
        return f"amqp://guest:guest@{self.net.addr('root')}:5672/%2f{hb}"

    def http(self, host: str) -> str:
        port = 9201 if host == "router" else 9101
        return f"http://{self.net.addr(host)}:{port}"

    # -- starting ----------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HERALD_", "RABBITMQ_"))}
        env["RUST_LOG"] = "info,herald_amqp=debug"
        return env

    def rabbit_env(self) -> dict[str, str]:
        d = self.state / "rabbitmq"
        env = self.base_env()
        env.update(HOME=str(d / "home"), RABBITMQ_NODENAME=NODE,
                   RABBITMQ_MNESIA_BASE=str(d / "mnesia"), RABBITMQ_LOG_BASE=str(d / "log"),
                   RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
                   RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
                   RABBITMQ_CONF_ENV_FILE=str(d / "rabbitmq-env.conf"),
                   RABBITMQ_PID_FILE=str(d / "beam.pid"),
                   # The namespace's own epmd, on its own loopback.
                   ERL_EPMD_ADDRESS="127.0.0.1",
                   RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
        return env

    def start_root(self) -> None:
        d = self.state / "rabbitmq"
        for sub in ("home", "mnesia", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "rabbitmq.conf").write_text(
            "listeners.tcp.default = 5672\n"
            # The clients come from the namespaces' private addresses.
            "loopback_users.guest = false\n"
            f"heartbeat = {AMQP_HEARTBEAT_S}\n"
            "log.console = false\nlog.file.level = info\n")
        (d / "enabled_plugins").write_text("[].\n")
        (d / "rabbitmq-env.conf").write_text("# empty: every RABBITMQ_* is set by the tests\n")
        self.procs["root"] = self.net.spawn("root", [rabbit_bin("rabbitmq-server")],
                                            self.state / "root.log", self.rabbit_env())

    def rabbitmqctl(self, *args: str, timeout: float = 60) -> str:
        res = self.net.run("root", [rabbit_bin("rabbitmqctl"), "-n", NODE, *args],
                           self.rabbit_env(), timeout)
        if res.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)}: {res.stdout}{res.stderr}")
        return res.stdout

    def start_redis(self) -> None:
        d = self.state / "redis"
        d.mkdir(parents=True, exist_ok=True)
        self.procs["redis"] = self.net.spawn(
            "redis", ["redis-server", "--bind", self.net.addr("redis"), "--port", "6379",
                      "--protected-mode", "no", "--dir", str(d), "--appendonly", "yes",
                      "--appendfsync", "everysec", "--save", ""],
            self.state / "redis.log", self.base_env())

    def start_router(self) -> None:
        d = self.state / "router"
        d.mkdir(parents=True, exist_ok=True)
        (d / "router.toml").write_text(router_toml())
        env = self.base_env()
        env["HERALD_ROUTER_API_KEYS"] = self.api_key
        self.procs["router"] = self.net.spawn(
            "router", [str(self.bins / "herald-router"), "--listen",
                       f"{self.net.addr('router')}:9201", "--amqp-url", self.amqp_url(),
                       "--redis-url", f"redis://{self.net.addr('redis')}:6379/0",
                       "--config", str(d / "router.toml")],
            self.state / "router.log", env)

    def start_edge(self, name: str) -> None:
        d = self.state / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "gateway.toml").write_text(gateway_toml())
        env = self.base_env()
        env.update(HERALD_JWT_SECRET=self.jwt_secret, HERALD_API_KEYS=self.api_key)
        self.procs[name] = self.net.spawn(
            name, [str(self.bins / "herald-gateway"), "--listen", f"{self.net.addr(name)}:9101",
                   "--edge-id", name, "--data-dir", str(d), "--config", str(d / "gateway.toml"),
                   "--root", self.amqp_url()],
            self.state / f"{name}.log", env)

    def alive(self, name: str) -> None:
        p = self.procs[name]
        if p.poll() is not None:
            raise AssertionError(f"{name} exited with {p.returncode}:\n{self.log(name)[-3000:]}")

    def log(self, name: str) -> str:
        try:
            return (self.state / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def ready(self, host: str) -> bool:
        try:
            return HTTP.get(f"{self.http(host)}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def readiness(self, host: str) -> str:
        try:
            r = HTTP.get(f"{self.http(host)}/readyz", timeout=2)
        except requests.RequestException as e:
            return f"unreachable ({type(e).__name__})"
        return f"{r.status_code} {r.text.strip()}"

    def start(self) -> None:
        self.start_root()
        self.start_redis()

        def root_up():
            self.alive("root")
            self.rabbitmqctl("await_startup", "--timeout", "5", timeout=20)
            return True
        wait_until("the RabbitMQ root to start", root_up, timeout=90, interval=0.5)
        wait_until("Redis to answer", lambda: self.redis_ping(), timeout=TIMEOUT)
        self.start_router()
        wait_until("the router to be ready", lambda: self.alive("router") or self.ready("router"),
                   timeout=60)
        for e in ("edge1", "edge2"):
            self.start_edge(e)
        for e in ("edge1", "edge2"):
            wait_until(f"{e} to be ready", lambda e=e: self.alive(e) or self.ready(e), timeout=60)
        wait_until("the router and both edges to consume on the root",
                   lambda: self.consumers("herald.edge.edge1") == 1
                   and self.consumers("herald.edge.edge2") == 1, timeout=TIMEOUT)

    def wait_whole(self, timeout: float = RECOVERY) -> None:
        """Every process alive, the router and both edges ready, each edge
        and the router consuming on the root (after a heal)."""
        def whole():
            for name in self.procs:
                self.alive(name)
            return (all(self.ready(h) for h in ("router", "edge1", "edge2"))
                    and self.consumers("herald.edge.edge1") == 1
                    and self.consumers("herald.edge.edge2") == 1
                    and self.consumers("herald.publications") >= 1)
        wait_until("the deployment to be whole", whole, timeout=timeout, interval=0.2)

    def redis_ping(self) -> bool:
        res = subprocess.run(["redis-cli", "-h", self.net.addr("redis"), "-p", "6379", "ping"],
                             capture_output=True, text=True, timeout=5)
        return res.stdout.strip() == "PONG"

    # -- AMQP ----------------------------------------------------------------------
    def amqp(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(
            self.amqp_url(heartbeat=False) + "?connection_attempts=1&socket_timeout=5"
            "&blocked_connection_timeout=10"))

    def queue_state(self, queue: str) -> tuple[int, int] | None:
        """(messages, consumers) of a queue on the root, None if it does not
        exist (a passive declare)."""
        with self.amqp() as conn:
            ch = conn.channel()
            try:
                ok = ch.queue_declare(queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker as e:
                if e.reply_code == 404:
                    return None
                raise
            return ok.method.message_count, ok.method.consumer_count

    def edge_queue_bound(self, edge: str) -> bool:
        """Whether the root still has `edge`'s queue, asked without touching
        it (a passive declare would renew its `x-expires` lease): a
        mandatory probe to the targeted exchange with the edge's id comes
        back unroutable once the queue is gone. A probe that is routed
        stays in that queue (only asked while the edge is cut off, so it
        expires with the queue)."""
        with self.amqp() as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            try:
                ch.basic_publish("herald.edges.targeted", edge, b"{}",
                                 pika.BasicProperties(message_id=unique("probe")),
                                 mandatory=True)
            except pika.exceptions.UnroutableError:
                return False
            return True

    def consumers(self, queue: str) -> int:
        s = self.queue_state(queue)
        return -1 if s is None else s[1]

    def publish_amqp(self, users: list[str], event: str, mid: str) -> None:
        """Publish to the `herald` exchange with publisher confirms: returns
        once the root confirmed (accepted), raises otherwise."""
        with self.amqp() as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("herald", "test", json.dumps({"mid": mid}).encode(),
                             pika.BasicProperties(message_id=mid, delivery_mode=2,
                                                  content_type="application/json",
                                                  headers={"users": users, "event": event}))

    # -- HTTP ------------------------------------------------------------------------
    def publish_http(self, body: dict, timeout: float = TIMEOUT) -> requests.Response:
        return HTTP.post(f"{self.http('router')}/v1/notifications", json=body,
                             headers={"Authorization": f"Bearer {self.api_key}"},
                             timeout=timeout)

    def status(self, nid: str) -> dict | None:
        r = HTTP.get(f"{self.http('router')}/v1/notifications/{nid}",
                         headers={"Authorization": f"Bearer {self.api_key}"}, timeout=TIMEOUT)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def metric(self, host: str, name: str) -> float:
        text = HTTP.get(f"{self.http(host)}/metrics", timeout=2).text
        total = 0.0
        found = False
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
                found = True
        if not found:
            raise AssertionError(f"no metric {name} on {host}")
        return total

    # -- browsers --------------------------------------------------------------------
    def token(self, sub: str) -> str:
        import jwt
        return jwt.encode({"sub": sub, "exp": int(time.time()) + 3600}, self.jwt_secret,
                          algorithm="HS256")

    def browser(self, edge: str, uid: str, resume: dict | None = None) -> "Browser":
        b = Browser(self, edge, uid)
        b.open(resume)
        self.sessions.append(b)
        return b

    def close_sessions(self) -> None:
        for b in self.sessions:
            b.close()
        self.sessions.clear()


class Browser:
    """A browser's STOMP session over WebSocket on one edge, heart-beats of
    STOMP_HEARTBEAT_MS both ways (as Herald's browser client asks), its
    events queued with their time; `resume()` opens a new session resuming
    from the last sequence and epoch it saw, as the browser client does."""

    def __init__(self, cluster: Cluster, edge: str, uid: str):
        self.cluster = cluster
        self.edge = edge
        self.uid = uid
        self.epoch: str | None = None
        self.last_seq: str | None = None
        self.messages: list[Event] = []
        self.gaps: list[Event] = []
        self.client: Client | None = None

    def open(self, resume: dict | None = None) -> Event:
        cl = self.cluster
        c = Client(self, self.uid, cl.token(self.uid))
        c.conn = stomp.WSConnection(
            [(cl.net.addr(self.edge), 9101)], ws_path="/ws",
            header={"Sec-WebSocket-Protocol": "v12.stomp"},
            reconnect_attempts_max=1, timeout=TIMEOUT,
            heartbeats=(STOMP_HEARTBEAT_MS, STOMP_HEARTBEAT_MS))
        c.conn.set_listener("part", _Listener(c._sink))
        c.edge = self.edge
        self.client = c
        connected = c.connect(resume)
        c.subscribe(resume)
        self.epoch = connected.headers.get("epoch", self.epoch)
        if self.last_seq is None:
            self.last_seq = connected.headers.get("seq")
        return connected

    # `Client` reads these from its "deployment".
    @property
    def proxy(self):
        return (self.cluster.net.addr(self.edge), 9101)

    def resume(self) -> Event:
        return self.open({"last-seq": self.last_seq, "epoch": self.epoch})

    def next(self, timeout: float = TIMEOUT) -> Event:
        e = self.client.next(timeout)
        if e.kind == "message":
            self.last_seq = e.headers["seq"]
            self.epoch = e.headers["epoch"]
            (self.gaps if e.headers.get("event") == "herald.gap" else self.messages).append(e)
        return e

    def ids(self) -> list[str]:
        return [m.headers["message-id"] for m in self.messages]

    def drain(self, wanted: set[str], timeout: float) -> list[Event]:
        """Read until every id in `wanted` arrived (or fail after `timeout`);
        everything else read on the way is returned."""
        other = []
        deadline = time.monotonic() + timeout
        while not wanted <= set(self.ids()):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(wanted - set(self.ids()))
                raise AssertionError(f"{self.uid} on {self.edge}: {len(missing)} of {len(wanted)}"
                                     f" never arrived within {timeout}s: {missing[:5]}")
            e = self.next(left)
            if e.kind != "message":
                other.append(e)
        return other

    def quiet(self, seconds: float = 0.5) -> list[Event]:
        """What else arrives within `seconds` (after ordering was proven)."""
        out = []
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            try:
                out.append(self.next(left))
            except AssertionError:
                return out

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close(wait=False)
            except Exception:  # noqa: BLE001 - the socket may be gone already
                pass


def ids(prefix: str, n: int) -> list[str]:
    run = unique(prefix)
    return [f"{run}-{i}" for i in range(n)]
