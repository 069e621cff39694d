"""Callbacks across the deployment: both routers keep their callbacks in the
Redis they share, so a call the router making it died in the middle of, or a
retry waiting for its time when its router died, is made by the other router
with the same `webhook-id` (a receiver drops repeats by it), and a Redis
killed and restarted while a retry waits loses nothing.

The receiver is a stock `http.server` on 127.0.0.1, which the routers may
call because router.toml sets `[callbacks] allow_private_networks`. It notes
which router made each request: the router holding the connection's client
end, looked up while the request is open. Topics are registered on each
router directly (`PUT /v1/topics/{name}`): a registration takes effect at
once in the router that took it, but only at the next maintenance round
(`schedule.maintenance_every_ms`, 5 s) in the other, and either router may
accept the publication and claim it when due. The notifications are
callback-only (`browsers: false`): the field report's "call my service when
due".
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from standardwebhooks.webhooks import Webhook

from conftest import ROUTER_CONFIG
from herald_dist import RECOVERY, TIMEOUT, unique, wait_until

SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
# Each request's timeout. A recheck and a call must fit in a claim's lease
# (less a pile's claim-ahead and a margin): router.toml's lease of 10 s
# allows up to 3.25 s. A router killed mid-call is killed well within it.
TIMEOUT_MS = 3000
# The delay before a retry: long enough to kill something while it waits.
RETRY_MS = 4000
# The routers' schedule.full_refill_every_ms (the default): how late a router
# may find an entry another router scheduled within its horizon.
FULL_REFILL_S = 10.0


@dataclass
class Request:
    headers: dict  # names in lower case
    body: bytes
    at: float  # time.monotonic() when it arrived
    wall_ms: float  # the same, as epoch ms (comparable with the routers' times)
    router: str | None  # the router that made it


class Receiver:
    """Records every POST with the router that made it and answers from
    `script` (then 200). With `hold_first`, the first request gets no answer
    until `release` is set: its router is killed meanwhile."""

    def __init__(self, dep, script: list[int] | None = None, hold_first: bool = False):
        self.requests: queue.Queue[Request] = queue.Queue()
        self.script = list(script or [])
        self.hold_first = hold_first
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._seen = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                at, wall = time.monotonic(), time.time() * 1000
                router = dep.connection_owner(self.client_address[1],
                                              self.server.server_address[1])
                with receiver._lock:
                    n = receiver._seen
                    receiver._seen += 1
                    status = receiver.script.pop(0) if receiver.script else 200
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.requests.put(Request(headers, body, at, wall, router))
                if receiver.hold_first and n == 0:
                    receiver.release.wait(RECOVERY)
                    return  # no answer: the connection is dropped
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def next(self, timeout: float = TIMEOUT) -> Request:
        try:
            return self.requests.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no callback arrived within {timeout:.0f} s")

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def routers_call_loopback(dep):
    """Every test here needs routers that may call 127.0.0.1 (a deployment
    started with router.toml)."""
    for r in dep.routers:
        if not dep.router_config(r).get("callbacks", {}).get("allow_private_networks"):
            pytest.fail(f"{r} may not call 127.0.0.1: start the deployment with "
                        f"deploy/up --router-config {ROUTER_CONFIG}", pytrace=False)


@pytest.fixture
def lease_s(dep) -> float:
    """The routers' `schedule.lease_ms`, in seconds."""
    return max(dep.router_config(r).get("schedule", {}).get("lease_ms", 30_000)
               for r in dep.routers) / 1000


@pytest.fixture
def topic(dep):
    """A topic name of the test's own, unregistered after it."""
    name = unique("cb")
    yield name
    r = requests.delete(f"{dep.proxy_url}/v1/topics/{name}", headers=auth(dep), timeout=TIMEOUT)
    assert r.status_code in (204, 404), f"{r.status_code} {r.text}"


def auth(dep) -> dict:
    return {"Authorization": f"Bearer {dep.api_key}"}


def put_topic(dep, name: str, settings: dict) -> None:
    """Register the topic on every router, so it is in force in each now."""
    for router, addr in dep.routers.items():
        r = requests.put(f"http://{addr}/v1/topics/{name}", json=settings, headers=auth(dep),
                         timeout=TIMEOUT)
        assert r.status_code in (200, 201), f"{router}: {r.status_code} {r.text}"


def callback_only(nid: str, topic: str, payload: dict) -> dict:
    return {"id": nid, "users": [unique("cb-user")], "event": "payment.check", "topic": topic,
            "browsers": False, "payload": payload, "delay_ms": 100}


def verify(req: Request) -> dict:
    """The payload, if the signature verifies (standardwebhooks, PyPI)."""
    wanted = {k: v for k, v in req.headers.items() if k.startswith("webhook-")}
    return Webhook(SECRET).verify(req.body, wanted)


def attempts(status: dict) -> list[tuple[int, int | None]]:
    return [(a["attempt"], a["status"]) for a in status["attempt_log"]]


def delivered(dep, nid: str, router: str | None = None, timeout: float = TIMEOUT) -> dict:
    """The status of `nid` once it is delivered, read again after the state
    showed: `GET /v1/notifications/{id}` reads the state and the attempt log
    with two store calls, so the answer that first says `delivered` may
    carry the log from before the write that delivered it (a known bug,
    docs/callbacks.md). Nothing writes a delivered notification again."""
    dep.wait_state(nid, "delivered", router=router, timeout=timeout)
    status = dep.status(nid, router)
    assert status is not None and status["state"] == "delivered", status
    return status


def other_router(dep, router: str) -> str:
    return next(r for r in dep.routers if r != router)


def restore(dep, name: str) -> None:
    """Start what the test killed again (deploy/up starts only that)."""
    out = dep.up_again()
    assert f"started {name}" in out, out


def test_a_router_killed_mid_call_leaves_the_call_to_the_other_router(dep, lease_s, topic):
    receiver = Receiver(dep, hold_first=True)
    killed = None
    try:
        put_topic(dep, topic, {"callback_url": receiver.url, "signing_secrets": [SECRET],
                               "timeout_ms": TIMEOUT_MS})
        nid = unique("mid-call")
        dep.publish_http(callback_only(nid, topic, {"order": 1}))

        first = receiver.next()
        assert first.router in dep.routers, "the call came from no router of the deployment"
        killed = first.router
        dep.kill(killed)  # SIGKILL while the call waits for its answer
        assert time.monotonic() - first.at < TIMEOUT_MS / 1000, \
            "the router was killed after its call could have timed out"
        receiver.release.set()

        # The entry stays firing under the dead router's claim until its
        # lease ends; then the other router claims it and calls again.
        survivor = other_router(dep, killed)
        again = receiver.next(lease_s + TIMEOUT)
        assert again.router == survivor, f"the repeat came from {again.router}"
        assert again.headers["webhook-id"] == first.headers["webhook-id"], \
            "a receiver can drop the repeat"
        assert again.body == first.body
        assert verify(again) == {"order": 1}
        # The call that died used no attempt of the retry policy.
        assert first.headers["herald-attempt"] == again.headers["herald-attempt"] == "1"
        # Not while the first call could still have been answered: a call
        # starts only if its timeout fits in its claim's lease.
        assert again.at - first.at >= TIMEOUT_MS / 1000, \
            f"called again {again.at - first.at:.2f} s after the first call"

        status = delivered(dep, nid, router=survivor)
        assert attempts(status) == [(1, 200)], status
        assert receiver.requests.empty(), "called a third time"

        restore(dep, killed)
        killed = None
    finally:
        receiver.close()
        if killed:
            dep.up_again()
    dep.wait_ready(RECOVERY)


def test_a_router_killed_while_a_retry_waits_leaves_the_retry_to_the_other_router(dep, topic):
    receiver = Receiver(dep, script=[503])
    killed = None
    try:
        put_topic(dep, topic, {"callback_url": receiver.url, "signing_secrets": [SECRET],
                               "timeout_ms": TIMEOUT_MS, "retry": {"delays_ms": [RETRY_MS]}})
        nid = unique("retry")
        dep.publish_http(callback_only(nid, topic, {"order": 2}))

        first = receiver.next()
        assert first.router in dep.routers, "the call came from no router of the deployment"
        waiting = dep.wait_state(nid, "retry_wait")
        due_ms = waiting["next_attempt_at_ms"]
        # The router that made the first call also keeps the retry in its
        # own window (due soon): the other must find it in Redis.
        killed = first.router
        dep.kill(killed)
        assert time.time() * 1000 < due_ms, "the router was killed after the retry was due"

        # The other router finds the retry in Redis at its next read of the
        # whole horizon (schedule.full_refill_every_ms, 10 s) at the latest:
        # the retry's time was within what it had read already.
        survivor = other_router(dep, killed)
        again = receiver.next(RETRY_MS / 1000 + FULL_REFILL_S + TIMEOUT)
        assert again.router == survivor, f"the retry came from {again.router}"
        assert again.wall_ms >= due_ms, f"the retry came {due_ms - again.wall_ms:.0f} ms early"
        assert again.headers["webhook-id"] == first.headers["webhook-id"]
        assert verify(again) == {"order": 2}
        assert (first.headers["herald-attempt"], again.headers["herald-attempt"]) == ("1", "2")

        status = delivered(dep, nid, router=survivor)
        assert attempts(status) == [(1, 503), (2, 200)], status
        assert receiver.requests.empty(), "called a third time"

        restore(dep, killed)
        killed = None
    finally:
        receiver.close()
        if killed:
            dep.up_again()
    dep.wait_ready(RECOVERY)


def test_redis_killed_and_restarted_while_a_retry_waits_loses_nothing(dep, topic):
    receiver = Receiver(dep, script=[503])
    down = False
    try:
        put_topic(dep, topic, {"callback_url": receiver.url, "signing_secrets": [SECRET],
                               "timeout_ms": TIMEOUT_MS, "retry": {"delays_ms": [RETRY_MS]}})
        nid = unique("redis")
        dep.publish_http(callback_only(nid, topic, {"order": 3}))

        first = receiver.next()
        waiting = dep.wait_state(nid, "retry_wait")
        due_ms = waiting["next_attempt_at_ms"]
        # Redis (AOF, fsync every second) has written what it acknowledged
        # to its file once its AOF buffer is empty: a SIGKILL of the process
        # then loses none of it (docs/redis-store.md).
        wait_until("Redis to write its AOF buffer",
                   lambda: "aof_buffer_length:0" in dep.redis("info", "persistence"))
        dep.kill("redis")
        down = True
        # A retry is claimed at most claim_ahead_ms (0.5 s) before it is due.
        assert time.time() * 1000 < due_ms - 1000, \
            "Redis was killed after the retry could have been claimed"

        # Both routers see Redis gone (/readyz pings it) and the retry falls
        # due meanwhile: no router can claim it.
        wait_until("both routers to report Redis unreachable",
                   lambda: not any(dep.router_ready(r) for r in dep.routers))
        wait_until("the retry to fall due", lambda: time.time() * 1000 >= due_ms + 500,
                   timeout=RETRY_MS / 1000 + TIMEOUT)
        assert receiver.requests.empty(), "called while Redis was down"

        restarted_ms = time.time() * 1000
        restore(dep, "redis")  # on the AOF under the state dir
        down = False
        again = receiver.next(RECOVERY)
        assert again.wall_ms >= restarted_ms
        assert again.headers["webhook-id"] == first.headers["webhook-id"]
        assert json.loads(again.body) == {"order": 3}
        assert (first.headers["herald-attempt"], again.headers["herald-attempt"]) == ("1", "2")

        status = delivered(dep, nid, timeout=RECOVERY)
        assert attempts(status) == [(1, 503), (2, 200)], status
        assert receiver.requests.empty(), "called a third time"
    finally:
        receiver.close()
        if down:
            dep.up_again()
    dep.wait_ready(RECOVERY)


def test_a_topic_registered_through_one_router_calls_back_for_the_other_at_once(dep, topic):
    """A backend registers a topic and publishes under it right away; through
    HAProxy the two requests may reach different routers (here each is sent
    to one router directly, so they do). The router that takes the
    publication does not know the topic yet and reads the topics again
    before it decides (Delayed::know_topics)."""
    receiver = Receiver(dep)
    try:
        r = requests.put(f"http://{dep.routers['router1']}/v1/topics/{topic}",
                         json={"callback_url": receiver.url, "timeout_ms": TIMEOUT_MS},
                         headers=auth(dep), timeout=TIMEOUT)
        assert r.status_code == 201, f"{r.status_code} {r.text}"
        nid = unique("at-once")
        r = requests.post(f"http://{dep.routers['router2']}/v1/notifications",
                          json={"id": nid, "users": [unique("cb-user")], "event": "payment.check",
                                "topic": topic, "payload": {"order": 4}},
                          headers=auth(dep), timeout=TIMEOUT)
        assert r.status_code == 202, f"{r.status_code} {r.text}"
        # A notification that calls back is stored (due now) before the 202.
        assert dep.status(nid, router="router2") is not None, \
            "router2 sent it to the browsers only: its topic's callback will never be made"
        call = receiver.next()
        assert call.headers["herald-notification-id"] == nid
        dep.wait_state(nid, "delivered")
    finally:
        receiver.close()
