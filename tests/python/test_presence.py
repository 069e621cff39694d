"""Presence for backends, standalone: GET /v1/presence/users/{uid} and the
counts per client company, answered from the gateway's own mailboxes while
real clients connect and leave: stomp.py over WebSocket, and a hand-rolled
SockJS xhr-streaming session.

Online means a session exists: after the last session closes the user is
offline at once, although their mailbox waits out its TTL for a reconnect.
Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import uuid
from datetime import datetime

import requests

from conftest import API_KEY, TIMEOUT, subscribed, token

ADMIN = {"Authorization": f"Bearer {API_KEY}"}


def get(gw, path: str, headers: dict | None = None, **params) -> requests.Response:
    return requests.get(f"{gw.base}{path}", params=params or None,
                        headers=ADMIN if headers is None else headers, timeout=TIMEOUT)


def presence(gw, uid: str, **params) -> dict:
    r = get(gw, f"/v1/presence/users/{uid}", **params)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "private, no-store"
    return r.json()


def until(probe, done, what: str):
    """Call `probe` until `done(answer)`, within the deadline."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        answer = probe()
        if done(answer):
            return answer
        assert time.monotonic() < deadline, f"{what}: last answer {answer}"
        time.sleep(0.05)  # polling interval, bounded by the deadline


def metric(gw, name: str) -> float:
    for line in gw.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name}")


class XhrStreaming:
    """One SockJS xhr-streaming session on the gateway: the receiving POST
    read in a thread, STOMP frames sent with xhr_send."""

    def __init__(self, gw):
        self.gw = gw
        self.base = f"/sockjs/000/{uuid.uuid4().hex}"
        self.frames: queue.Queue = queue.Queue()
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=TIMEOUT)
        self.conn.request("POST", f"{self.base}/xhr_streaming", body=b"")
        resp = self.conn.getresponse()
        assert resp.status == 200
        threading.Thread(target=self._read, args=(resp,), daemon=True).start()
        assert self.next() == ("o", None)

    def _read(self, resp) -> None:
        try:
            while line := resp.readline():
                line = line.rstrip(b"\n")
                if not line or (len(line) > 1 and set(line) == {ord("h")}):
                    continue  # the prelude
                kind = chr(line[0])
                if kind == "a":
                    for frame in json.loads(line[1:]):
                        self.frames.put(("a", frame))
                elif kind != "h":
                    self.frames.put((kind, None))
        except Exception:  # noqa: BLE001 - the socket closed under the reader
            pass
        self.frames.put(("eof", None))

    def next(self):
        try:
            return self.frames.get(timeout=TIMEOUT)
        except queue.Empty:
            raise AssertionError("sockjs: nothing within the deadline") from None

    def send(self, frame: str) -> None:
        c = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=TIMEOUT)
        c.request("POST", f"{self.base}/xhr_send", body=json.dumps([frame]),
                  headers={"Content-Type": "text/plain"})
        assert c.getresponse().status == 204
        c.close()

    def connect(self, passcode: str) -> None:
        self.send(f"CONNECT\naccept-version:1.2\nhost:herald\npasscode:{passcode}\n\n\x00")
        kind, frame = self.next()
        assert kind == "a" and frame.startswith("CONNECTED"), (kind, frame)

    def close(self) -> None:
        self.send("DISCONNECT\n\n\x00")
        self.conn.close()


def test_a_user_is_online_with_sessions_by_transport_while_connected(gateway):
    assert presence(gateway, "alice") == {
        "user": "alice", "online": False, "since": None, "since_ms": None,
        "sessions": {"total": 0, "by_transport": {}}, "edges": []}
    before = int(time.time() * 1000)
    ws = subscribed(gateway, "alice", client="acme")
    sockjs = XhrStreaming(gateway)
    sockjs.connect(token("alice", client="acme"))
    p = presence(gateway, "alice")
    assert p["online"] is True
    assert p["sessions"] == {"total": 2, "by_transport": {"websocket": 1, "xhr_streaming": 1}}
    assert before <= p["since_ms"] <= int(time.time() * 1000)
    assert datetime.fromisoformat(p["since"].replace("Z", "+00:00")).timestamp() * 1000 \
        == p["since_ms"]
    assert p["edges"] == [{"edge": "standalone", "sessions": 2,
                           "since": p["since"], "since_ms": p["since_ms"]}]
    company = get(gateway, "/v1/presence/clients/acme").json()
    assert company == {"client": "acme", "users": 1, "sessions": 2}
    # One session leaves: still online, one session, the same since.
    sockjs.close()
    p2 = until(lambda: presence(gateway, "alice"),
               lambda a: a["sessions"]["total"] == 1, "the SockJS session gone")
    assert p2["online"] and p2["sessions"]["by_transport"] == {"websocket": 1}
    assert p2["since_ms"] == p["since_ms"]
    ws.close()


def test_after_the_last_session_the_user_is_offline_while_the_mailbox_waits(gateway):
    ws = subscribed(gateway, "bob", client="acme")
    assert presence(gateway, "bob")["online"]
    mailboxes = metric(gateway, "herald_mailboxes")
    ws.close()
    p = until(lambda: presence(gateway, "bob"), lambda a: not a["online"], "bob offline")
    assert p["sessions"]["total"] == 0 and p["edges"] == [] and p["since"] is None
    # The mailbox is still there (its TTL runs), and does not count.
    assert metric(gateway, "herald_mailboxes") == mailboxes
    assert get(gateway, "/v1/presence/clients/acme").json() == \
        {"client": "acme", "users": 0, "sessions": 0}
    # Coming back is online again, since the new session.
    again = subscribed(gateway, "bob", client="acme")
    assert presence(gateway, "bob")["sessions"]["total"] == 1
    again.close()


def test_a_site_counts_only_its_sessions(gateway):
    a = subscribed(gateway, "carol", site="a")
    b = subscribed(gateway, "carol", site="b")
    assert presence(gateway, "carol")["sessions"]["total"] == 2
    assert presence(gateway, "carol", site="a")["sessions"]["total"] == 1
    assert presence(gateway, "carol", site="c")["online"] is False
    a.close()
    b.close()


def test_companies_are_counted_and_paged_in_name_order(gateway):
    clients = [subscribed(gateway, f"u{i}", client=c)
               for i, c in enumerate(["c1", "c1", "c2", "c3"])]
    second = subscribed(gateway, "u0", client="c1")
    first = get(gateway, "/v1/presence/clients", limit=2).json()
    assert first["items"] == [{"client": "c1", "users": 2, "sessions": 3},
                              {"client": "c2", "users": 1, "sessions": 1}]
    assert first["next"] == "c2"
    rest = get(gateway, "/v1/presence/clients", limit=2, after=first["next"]).json()
    assert rest == {"items": [{"client": "c3", "users": 1, "sessions": 1}], "next": None}
    for c in clients + [second]:
        c.close()
    until(lambda: get(gateway, "/v1/presence/clients").json(),
          lambda a: a["items"] == [], "every company gone")


def test_bad_input_is_a_422_naming_the_field_and_counted(gateway):
    def refused(path, field, **params):
        r = get(gateway, path, **params)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field, r.text
    refused("/v1/presence/users/" + "x" * 257, "uid")
    refused("/v1/presence/users/%01", "uid")
    refused("/v1/presence/users/%C0%80", "uid")
    refused("/v1/presence/users/alice", "site", site="")
    refused("/v1/presence/users/alice", "colour", colour="red")
    refused("/v1/presence/clients", "limit", limit=0)
    refused("/v1/presence/clients", "limit", limit=1001)
    refused("/v1/presence/clients", "limit", limit="many")
    refused("/v1/presence/clients", "after", after="")
    refused("/v1/presence/clients/" + "c" * 300, "client")
    assert 'herald_presence_requests_total{endpoint="user",outcome="invalid"} 5' \
        in gateway.metrics()


def test_the_endpoints_need_an_admin_key(make_gateway):
    gw = make_gateway('[[api_key]]\nname = "pub"\nkey = "publish-only-key-0123456789"\n'
                      'ops = ["publish"]\n')
    assert get(gw, "/v1/presence/users/alice", headers={}).status_code == 401
    r = get(gw, "/v1/presence/clients",
            headers={"Authorization": "Bearer publish-only-key-0123456789"})
    assert r.status_code == 403, r.text
    assert get(gw, "/v1/presence/clients").status_code == 200
