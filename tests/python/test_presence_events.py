"""Presence events, standalone: with `[presence] events_topic`, a user's
first session and last session each make a signed callback of that topic
to a local receiver, checked by the `standardwebhooks` package. A second
session of a user already online makes no second `online`, and closing one
of two sessions makes no `offline`.

Every wait is on a condition with a deadline; nothing sleeps to
synchronise.
"""

from __future__ import annotations

import json
import time

from conftest import TIMEOUT, subscribed
from test_callbacks import OLD, OTHER, put_topic, receiver, verify  # noqa: F401 (fixture)

import pytest
from standardwebhooks.webhooks import WebhookVerificationError

CONFIG = """
[callbacks]
allow_private_networks = true

[presence]
events_topic = "presence"
"""


def events_total(gw, event: str, outcome: str) -> float:
    want = f'herald_presence_events_total{{event="{event}",outcome="{outcome}"}}'
    for line in gw.metrics().splitlines():
        if line.startswith(want + " "):
            return float(line.split()[1])
    return 0.0


def until(probe, what: str):
    deadline = time.monotonic() + TIMEOUT
    while True:
        answer = probe()
        if answer:
            return answer
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling interval, bounded by the deadline


def event_of(call) -> dict:
    path, headers, body = call
    assert path == "/hook"
    assert headers["herald-topic"] == "presence"
    payload = verify(OLD, headers, body)
    with pytest.raises(WebhookVerificationError):
        verify(OTHER, headers, body)
    assert payload == json.loads(body)
    return payload


def test_first_and_last_session_each_make_one_signed_callback(make_gateway, receiver):
    gw = make_gateway(CONFIG)
    put_topic(gw, "presence", {"callback_url": receiver.url, "signing_secrets": [OLD]})

    first = subscribed(gw, "alice", client="acme", site="s1")
    online = event_of(receiver.next())
    assert online["event"] == "online"
    assert (online["user"], online["site"], online["client"], online["edge"]) == (
        "alice", "s1", "acme", "standalone")
    assert abs(online["at_ms"] - time.time() * 1000) < 60_000

    # A second session: alice is online already.
    second = subscribed(gw, "alice", client="acme", site="s1")
    first.close()
    # One of two closed: still online. The last one closes: offline.
    second.close()
    offline = event_of(receiver.next())
    assert offline["event"] == "offline"
    assert (offline["user"], offline["site"], offline["client"]) == ("alice", "s1", "acme")
    assert offline["at_ms"] >= online["at_ms"]

    # Exactly one of each was published (the second session and the first
    # close were decided before the last close, in order).
    assert events_total(gw, "online", "published") == 1
    assert events_total(gw, "offline", "published") == 1
    assert receiver.requests.empty(), "no other callback"

    # Back again: a new online.
    again = subscribed(gw, "alice", client="acme", site="s1")
    assert event_of(receiver.next())["event"] == "online"
    again.close()
    assert event_of(receiver.next())["event"] == "offline"
    until(lambda: events_total(gw, "offline", "published") == 2, "two offline events counted")


def test_a_topic_without_a_callback_stores_nothing_and_says_so(make_gateway):
    gw = make_gateway(CONFIG)
    c = subscribed(gw, "bob")
    until(lambda: events_total(gw, "online", "no_callback") == 1,
          "the online of a topic without callback_url is counted as no_callback")
    c.close()
    until(lambda: events_total(gw, "offline", "no_callback") == 1, "and its offline")
    assert events_total(gw, "online", "published") == 0
