"""Delivery as a stock STOMP client sees it: headers, scopes, isolation, filters."""

import json

import pytest
import requests

from conftest import API_KEY, DESTINATION, TIMEOUT, subscribed, token


def test_user_notification_arrives_with_its_headers_and_body(gateway):
    c = gateway.client()
    connected = c.connect(token("alice", client="acme"))
    c.subscribe()
    payload = {"text": "hello", "n": 1, "nested": {"ok": True}}
    mid = gateway.publish_one(scope="user", users=["alice"], event="chat.message",
                              topic="chat", payload=payload)
    m = c.message()
    h = m.headers
    assert h["subscription"] == "sub-0"
    assert h["destination"] == DESTINATION
    assert h["message-id"] == mid
    assert h["seq"] == "1"
    assert h["epoch"] == connected.headers["epoch"]
    assert h["event"] == "chat.message"
    assert h["scope"] == "user"
    assert h["topic"] == "chat"
    assert h["content-type"] == "application/json"
    assert int(h["content-length"]) == len(m.body.encode())
    assert json.loads(m.body) == payload
    c.assert_silent()


def test_caller_chosen_id_is_the_message_id(gateway):
    c = subscribed(gateway, "alice")
    assert gateway.publish_one(users=["alice"], event="e", payload=1, id="order-42") == "order-42"
    assert c.message().headers["message-id"] == "order-42"


def test_batch_arrives_in_order_with_consecutive_seqs(gateway):
    c = subscribed(gateway, "alice")
    ids = gateway.publish([
        {"users": ["alice"], "event": f"e.{i}", "payload": {"i": i}} for i in range(3)
    ])["ids"]
    got = [c.message() for _ in ids]
    assert [m.headers["message-id"] for m in got] == ids
    assert [m.headers["seq"] for m in got] == ["1", "2", "3"]
    assert [json.loads(m.body)["i"] for m in got] == [0, 1, 2]


def test_raw_payload_keeps_its_content_type(gateway):
    c = subscribed(gateway, "alice")
    r = requests.post(f"{gateway.base}/v1/notifications?users=alice&event=note.raw",
                      data="plain text, not JSON",
                      headers={"Authorization": f"Bearer {API_KEY}",
                               "Content-Type": "text/plain; charset=utf-8"},
                      timeout=TIMEOUT)
    assert r.status_code == 202, r.text
    m = c.message()
    assert m.headers["event"] == "note.raw"
    assert m.headers["content-type"].startswith("text/plain")
    assert m.body == "plain text, not JSON"


def test_a_user_notification_never_reaches_another_user(gateway):
    alice = subscribed(gateway, "alice", client="acme")
    bob = subscribed(gateway, "bob", client="acme")
    for_alice = gateway.publish_one(users=["alice"], event="secret", payload="for alice")
    assert alice.message().headers["message-id"] == for_alice
    # Delivery to one session is in order: had bob been sent alice's message,
    # it would come before this one.
    for_bob = gateway.publish_one(users=["bob"], event="hello", payload="for bob")
    m = bob.message()
    assert m.headers["message-id"] == for_bob
    assert m.headers["seq"] == "1"
    bob.assert_silent()
    alice.assert_silent()


def test_client_scope_reaches_that_company_only(gateway):
    alice = subscribed(gateway, "alice", client="acme")
    carol = subscribed(gateway, "carol", client="acme")
    bob = subscribed(gateway, "bob", client="globex")
    dan = subscribed(gateway, "dan")  # no company at all
    news = gateway.publish_one(scope="client", clients=["acme"], event="co.news", payload={})
    for c in (alice, carol):
        m = c.message()
        assert m.headers["message-id"] == news
        assert m.headers["scope"] == "client"
    everyone = gateway.publish_one(scope="global", event="maintenance", payload={})
    for c in (alice, carol, bob, dan):
        m = c.message()
        assert m.headers["message-id"] == everyone
        assert m.headers["scope"] == "global"
        c.assert_silent()


def test_global_scope_reaches_every_connected_user(gateway):
    users = [subscribed(gateway, f"user-{i}", client=f"co-{i % 2}") for i in range(4)]
    mid = gateway.publish_one(scope="global", event="maintenance", payload={"at": "now"})
    for c in users:
        m = c.message()
        assert m.headers["message-id"] == mid
        assert m.headers["seq"] == "1"


def test_sites_filter_limits_delivery_to_tokens_with_that_site(gateway):
    erin = subscribed(gateway, "erin", client="acme", site="s1")
    frank = subscribed(gateway, "frank", client="acme", site="s2")
    gina = subscribed(gateway, "gina", client="acme")  # no site claim
    to_s2 = gateway.publish_one(scope="user", users=["erin", "frank", "gina"], sites=["s2"],
                                event="e", payload=1)
    to_s1 = gateway.publish_one(scope="client", clients=["acme"], sites=["s1"],
                                event="e", payload=2)
    to_all = gateway.publish_one(scope="global", event="e", payload=3)
    assert [erin.message().headers["message-id"] for _ in range(2)] == [to_s1, to_all]
    assert [frank.message().headers["message-id"] for _ in range(2)] == [to_s2, to_all]
    assert gina.message().headers["message-id"] == to_all
    for c in (erin, frank, gina):
        c.assert_silent()


def test_event_filter_on_subscribe(gateway):
    chat = subscribed(gateway, "alice", headers={"events": "chat.*"})
    both = subscribed(gateway, "bob", headers={"events": "chat.*,order.created"})
    everything = subscribed(gateway, "carol")
    users = ["alice", "bob", "carol"]
    order = gateway.publish_one(users=users, event="order.created", payload={})
    other = gateway.publish_one(users=users, event="order.shipped", payload={})
    msg = gateway.publish_one(users=users, event="chat.message", payload={})
    m = chat.message()
    assert (m.headers["message-id"], m.headers["event"]) == (msg, "chat.message")
    assert [both.message().headers["message-id"] for _ in range(2)] == [order, msg]
    assert [everything.message().headers["message-id"] for _ in range(3)] == [order, other, msg]
    for c in (chat, both, everything):
        c.assert_silent()


def test_subscribing_to_another_users_destination_is_an_error(gateway):
    alice = gateway.client()
    alice.connect(token("alice"))
    alice.subscribe("/user/bob/notifications", wait_receipt=False)
    error = alice.expect("error")
    assert "not available" in error.headers["message"]
    assert "/user/bob/notifications" in error.headers["message"]
    alice.expect("disconnected")
    # And bob's notifications did not go anywhere near alice.
    bob = subscribed(gateway, "bob")
    gateway.publish_one(users=["bob"], event="e", payload={})
    assert bob.message().headers["seq"] == "1"


def test_a_burst_larger_than_the_write_queue_arrives_whole(gateway):
    c = subscribed(gateway, "alice")
    batch = [{"users": ["alice"], "event": "bulk", "payload": {"i": i, "pad": "x" * 2000}}
             for i in range(200)]
    ids = gateway.publish(batch)["ids"]
    got = [c.message(timeout=3).headers["message-id"] for _ in ids]
    assert got == ids
