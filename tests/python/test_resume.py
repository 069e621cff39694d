"""Resume: CONNECT (or SUBSCRIBE) with last-seq + epoch replays what the
mailbox still buffers; beyond the buffer, a herald.gap MESSAGE says so."""

import json

import pytest

from conftest import subscribed, token

SMALL_BUFFER = """
[mailbox]
buffer_messages = 2
[session]
queue_messages = 2
"""


def first_session(gateway, user="alice"):
    """Connect, receive seq 1, disconnect cleanly; returns the epoch."""
    c = subscribed(gateway, user)
    gateway.publish_one(users=[user], event="e", payload={"n": 1})
    m = c.message()
    assert m.headers["seq"] == "1"
    c.close()
    return m.headers["epoch"]


def test_resume_on_connect_replays_missed_messages_in_order(gateway):
    epoch = first_session(gateway)
    missed = [gateway.publish_one(users=["alice"], event="e", payload={"n": n}) for n in (2, 3)]
    c = gateway.client()
    connected = c.connect(token("alice"), headers={"last-seq": "1", "epoch": epoch})
    assert connected.headers["epoch"] == epoch
    assert connected.headers["seq"] == "3"
    c.subscribe()
    got = [c.message() for _ in missed]
    assert [m.headers["message-id"] for m in got] == missed
    assert [m.headers["seq"] for m in got] == ["2", "3"]
    assert [json.loads(m.body)["n"] for m in got] == [2, 3]
    # Live messages continue after the replay.
    live = gateway.publish_one(users=["alice"], event="e", payload={"n": 4})
    m = c.message()
    assert (m.headers["message-id"], m.headers["seq"]) == (live, "4")
    c.assert_silent()


def test_resume_on_subscribe_replays_missed_messages(gateway):
    epoch = first_session(gateway)
    missed = gateway.publish_one(users=["alice"], event="e", payload={"n": 2})
    c = gateway.client()
    c.connect(token("alice"))
    c.subscribe(headers={"last-seq": "1", "epoch": epoch})
    m = c.message()
    assert (m.headers["message-id"], m.headers["seq"]) == (missed, "2")
    c.assert_silent()


def test_connect_without_resume_starts_from_the_head(gateway):
    first_session(gateway)
    gateway.publish_one(users=["alice"], event="e", payload={"n": 2})
    c = subscribed(gateway, "alice")
    live = gateway.publish_one(users=["alice"], event="e", payload={"n": 3})
    m = c.message()
    assert (m.headers["message-id"], m.headers["seq"]) == (live, "3")


def test_resume_beyond_the_buffer_gets_a_gap(make_gateway):
    gateway = make_gateway(SMALL_BUFFER)
    epoch = first_session(gateway)
    for n in (2, 3, 4):  # the buffer keeps 3 and 4; 2 is gone
        gateway.publish_one(users=["alice"], event="e", payload={"n": n})
    c = gateway.client()
    c.connect(token("alice"), headers={"last-seq": "1", "epoch": epoch})
    c.subscribe()
    gap = c.message()
    assert gap.headers["event"] == "herald.gap"
    assert gap.headers["reason"] == "buffer-exceeded"
    assert gap.headers["seq"] == "4"
    assert gap.headers["epoch"] == epoch
    assert gap.body == ""
    # Live delivery continues from the gap's seq.
    gateway.publish_one(users=["alice"], event="e", payload={"n": 5})
    assert c.message().headers["seq"] == "5"
    c.assert_silent()


def test_resume_within_a_small_buffer_has_no_gap(make_gateway):
    gateway = make_gateway(SMALL_BUFFER)
    epoch = first_session(gateway)
    for n in (2, 3):  # exactly what the buffer holds
        gateway.publish_one(users=["alice"], event="e", payload={"n": n})
    c = gateway.client()
    c.connect(token("alice"), headers={"last-seq": "1", "epoch": epoch})
    c.subscribe()
    assert [c.message().headers["seq"] for _ in range(2)] == ["2", "3"]
    c.assert_silent()


def test_resume_with_another_epoch_gets_a_gap(gateway):
    epoch = first_session(gateway)
    c = gateway.client()
    c.connect(token("alice"), headers={"last-seq": "1", "epoch": str(int(epoch) + 1)})
    c.subscribe()
    gap = c.message()
    assert gap.headers["event"] == "herald.gap"
    assert gap.headers["reason"] == "epoch-changed"
    assert gap.headers["epoch"] == epoch
    assert gap.headers["seq"] == "1"


def test_last_seq_without_epoch_is_an_error(gateway):
    c = gateway.client()
    c.open(token("alice"), headers={"last-seq": "1"})
    error = c.expect("error")
    assert "together" in error.headers["message"]


def test_resume_replays_a_full_default_buffer(gateway):
    epoch = first_session(gateway)
    missed = gateway.publish([
        {"users": ["alice"], "event": "e", "payload": {"n": n, "pad": "x" * 2000}}
        for n in range(2, 101)  # seqs 2..100: the default buffer keeps 100
    ])["ids"]
    c = gateway.client()
    c.connect(token("alice"), headers={"last-seq": "1", "epoch": epoch})
    c.subscribe()
    got = [c.message(timeout=3).headers["message-id"] for _ in missed]
    assert got == missed
