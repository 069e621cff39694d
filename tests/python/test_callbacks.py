"""Callbacks against an independent verifier: the `standardwebhooks` package
from PyPI checks every signature Herald sends, with each of a topic's
secrets (rotation) and not with another.

The receiver is a stock `http.server` on 127.0.0.1; the gateway is the real
binary, told it may call private addresses (`[callbacks]
allow_private_networks`, as a deployment that calls its own services does).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from conftest import API_KEY, TIMEOUT

# Two secrets at once: a rotation in progress.
OLD = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEW = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
OTHER = "whsec_3yPgf/O7tSyY9YkOGoWWFYpWnzGkO6mU"

CONFIG = "[callbacks]\nallow_private_networks = true\n"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


class Receiver:
    """An HTTP server that records each request and answers from a script
    (then 200)."""

    def __init__(self):
        self.requests: "queue.Queue[tuple[str, dict, bytes]]" = queue.Queue()
        self.script: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.requests.put((self.path, dict(self.headers.items()), body))
                status = receiver.script.pop(0) if receiver.script else 200
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

    def next(self) -> tuple[str, dict, bytes]:
        try:
            return self.requests.get(timeout=TIMEOUT)
        except queue.Empty:
            pytest.fail("no callback arrived in time")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def put_topic(gw, name: str, settings: dict) -> None:
    r = requests.put(f"{gw.base}/v1/topics/{name}", json=settings, headers=AUTH, timeout=TIMEOUT)
    assert r.status_code in (200, 201), f"{r.status_code} {r.text}"


def until_state(gw, nid: str, state: str) -> dict:
    deadline = time.monotonic() + TIMEOUT
    while True:
        r = requests.get(f"{gw.base}/v1/notifications/{nid}", headers=AUTH, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        status = r.json()
        if status["state"] == state:
            return status
        assert time.monotonic() < deadline, f"{nid} stayed {status}"
        time.sleep(0.02)  # polling interval, bounded by the deadline


def verify(secret: str, headers: dict, body: bytes) -> dict:
    # The package reads the three headers case-insensitively from a dict.
    wanted = {k.lower(): v for k, v in headers.items() if k.lower().startswith("webhook-")}
    return Webhook(secret).verify(body, wanted)


def test_every_call_verifies_with_each_secret_of_a_rotation(make_gateway, receiver):
    gw = make_gateway(CONFIG)
    put_topic(gw, "billing", {
        "callback_url": receiver.url,
        "signing_secrets": [OLD, NEW],
        "retry": {"delays_ms": [200]},
    })
    receiver.script = [500]
    payload = {"order": 42, "note": "pay by friday"}
    gw.publish({"id": "pay.check-7", "users": ["u7"], "event": "payment.check",
                "topic": "billing", "payload": payload, "delay_ms": 100})

    first = receiver.next()
    second = receiver.next()
    for path, headers, body in (first, second):
        assert path == "/hook"
        assert json.loads(body) == payload
        assert verify(OLD, headers, body) == payload
        assert verify(NEW, headers, body) == payload
        with pytest.raises(WebhookVerificationError):
            verify(OTHER, headers, body)
        assert headers["herald-topic"] == "billing"
        assert headers["herald-user"] == "u7"
        assert headers["herald-notification-id"] == "pay.check-7"
    # A receiver drops repeats by webhook-id: the retry carries the same.
    assert first[1]["webhook-id"] == second[1]["webhook-id"]

    status = until_state(gw, "pay.check-7", "delivered")
    log = status["attempt_log"]
    assert [a["status"] for a in log] == [500, 200], log


def test_a_tampered_body_or_an_old_timestamp_does_not_verify(make_gateway, receiver):
    gw = make_gateway(CONFIG)
    put_topic(gw, "reminders", {"callback_url": receiver.url, "signing_secrets": [NEW]})
    gw.publish({"id": "remind-1", "users": ["u8"], "event": "meeting.reminder",
                "topic": "reminders", "payload": {"in": "5 minutes"}, "delay_ms": 50})
    _path, headers, body = receiver.next()
    assert verify(NEW, headers, body) == {"in": "5 minutes"}
    with pytest.raises(WebhookVerificationError):
        verify(NEW, headers, body.replace(b"5", b"6"))
    stale = dict(headers)
    stale["webhook-timestamp"] = str(int(headers["webhook-timestamp"]) - 3600)
    with pytest.raises(WebhookVerificationError):
        verify(NEW, stale, body)
    until_state(gw, "remind-1", "delivered")


class HoldingReceiver(Receiver):
    """A receiver whose first request gets no answer until `release` is
    set: the gateway is killed while its call is on its way."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.held = 0
        base = self.server.RequestHandlerClass
        receiver = self

        class Holding(base):
            def do_POST(self):  # noqa: N802
                if receiver.held == 0:
                    receiver.held += 1
                    body = self.rfile.read(int(self.headers.get("content-length", "0")))
                    receiver.requests.put((self.path, dict(self.headers.items()), body))
                    receiver.release.wait(TIMEOUT)
                    return  # no answer: the connection is dropped
                super().do_POST()

        self.server.RequestHandlerClass = Holding

    def close(self):
        self.release.set()
        super().close()


def test_a_kill_mid_call_repeats_the_call_with_the_same_webhook_id(make_gateway):
    receiver = HoldingReceiver()
    try:
        gw = make_gateway(CONFIG)
        put_topic(gw, "billing", {"callback_url": receiver.url, "signing_secrets": [NEW]})
        gw.publish({"id": "pay.check-9", "users": ["u9"], "event": "payment.check",
                    "topic": "billing", "payload": {"order": 9}, "delay_ms": 50})
        _path, first, body = receiver.next()
        gw.kill()  # SIGKILL while the call waits for its answer
        gw.start()  # the same data directory
        _path, again, body_again = receiver.next()
        assert again["webhook-id"] == first["webhook-id"], "a receiver can drop the repeat"
        assert body_again == body
        assert verify(NEW, again, body_again) == {"order": 9}
        until_state(gw, "pay.check-9", "delivered")
    finally:
        receiver.close()


def test_a_kill_while_a_retry_waits_loses_nothing(make_gateway, receiver):
    gw = make_gateway(CONFIG)
    put_topic(gw, "billing", {"callback_url": receiver.url, "retry": {"delays_ms": [500]}})
    receiver.script = [503]
    gw.publish({"id": "pay.check-10", "users": ["u10"], "event": "payment.check",
                "topic": "billing", "payload": {"order": 10}, "delay_ms": 50})
    _path, first, _body = receiver.next()
    until_state(gw, "pay.check-10", "retry_wait")
    gw.kill()
    gw.start()
    _path, again, _body = receiver.next()
    assert again["webhook-id"] == first["webhook-id"]
    status = until_state(gw, "pay.check-10", "delivered")
    assert [a["status"] for a in status["attempt_log"]] == [503, 200]
