"""Presence events, distributed: with `[presence] events_topic` (router.toml),
a user's first session anywhere and last session everywhere each make one
signed callback, although every presence report reaches both roots and is
recorded by a router of each (the routers' Redis script decides the
transition once). A user on two edges goes offline only when the last of
them reports them gone.

Sessions are opened on chosen edges directly, as in test_presence.py.
Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import json

import pytest
import requests

from herald_dist import TIMEOUT, unique, wait_until
from test_callbacks import SECRET, Receiver, auth, put_topic, verify
from test_presence import user

TOPIC = "presence-events"


@pytest.fixture
def receiver(dep):
    """The events topic, calling a receiver of the test's own; unregistered
    after it."""
    for r in dep.routers:
        if dep.router_config(r).get("presence", {}).get("events_topic") != TOPIC:
            pytest.fail(f"{r} publishes no presence events: start the deployment with "
                        "deploy/up --router-config tests/distributed/router.toml", pytrace=False)
    rec = Receiver(dep)
    put_topic(dep, TOPIC, {"callback_url": rec.url, "signing_secrets": [SECRET],
                           "timeout_ms": 3000})
    yield rec
    requests.delete(f"{dep.proxy_url}/v1/topics/{TOPIC}", headers=auth(dep), timeout=TIMEOUT)
    rec.close()


class Events:
    """The events received for the users of one run, in arrival order."""

    def __init__(self, receiver: Receiver, run: str):
        self.receiver, self.run, self.seen = receiver, run, []

    def until(self, what: str, want) -> list[dict]:
        def probe():
            while not self.receiver.requests.empty():
                req = self.receiver.requests.get_nowait()
                payload = verify(req)  # signed with the topic's secret
                assert payload == json.loads(req.body)
                assert req.headers["herald-topic"] == TOPIC
                if payload["user"].startswith(self.run):
                    self.seen.append(payload)
            return want(self.seen)
        wait_until(what, probe)
        return self.seen

    def of(self, uid: str) -> list[str]:
        return [e["event"] for e in self.seen if e["user"] == uid]


def test_one_callback_per_transition_and_offline_only_when_the_last_edge_goes(dep, receiver):
    run = unique("pev")
    e1, e2 = list(dep.edges)[:2]
    alice, sentinel = f"{run}-alice", f"{run}-zed"
    events = Events(receiver, run)

    a1 = dep.direct_client(e1, alice, f"{run}-co")
    got = events.until("alice's online", lambda s: events.of(alice) == ["online"])
    first = got[0]
    assert (first["user"], first["client"], first["edge"]) == (alice, f"{run}-co", e1)

    # A second edge: she is online already; both edges report her.
    a2 = dep.direct_client(e2, alice, f"{run}-co")
    wait_until("alice on two edges", lambda: len(user(dep, alice)["edges"]) == 2)
    # Leaving the first edge leaves her online on the second.
    a1.close()
    wait_until("alice on one edge", lambda: len(user(dep, alice)["edges"]) == 1)
    a2.close()
    events.until("alice's offline", lambda s: "offline" in events.of(alice))

    # A later user's whole cycle on the same edges: by the time its offline
    # arrives, every report about alice has been recorded by both roots'
    # routers, so any second callback for her would have been stored.
    z = dep.direct_client(e1, sentinel)
    events.until("the sentinel's online", lambda s: events.of(sentinel) == ["online"])
    z.close()
    events.until("the sentinel's offline", lambda s: events.of(sentinel) == ["online", "offline"])
    assert events.of(alice) == ["online", "offline"], events.seen
    offline = next(e for e in events.seen if e["user"] == alice and e["event"] == "offline")
    assert offline["edge"] == e2, "the last edge took her offline"
    assert offline["at_ms"] >= first["at_ms"]
