"""pika publishing to herald-router: what docs/amqp.md promises a Python backend."""

from __future__ import annotations

import json
import time

import pika

PERSISTENT = 2


def props(message_id: str, headers: dict, content_type: str = "application/json") -> pika.BasicProperties:
    return pika.BasicProperties(
        message_id=message_id,
        content_type=content_type,
        delivery_mode=PERSISTENT,
        headers=headers,
    )


def test_a_publication_reaches_the_edges_with_its_headers(router):
    body = json.dumps({"room": 7, "text": "héllo"}).encode()
    headers = {"users": ["alice", "bob"], "event": "chat.message", "ttl-ms": 60000, "topic": "chat"}
    before = time.time_ns() // 1000
    router.publish(body, props("chat-7-1", headers), routing_key="chat.message")
    router.publish(b"{}", props("reload-1", {"scope": "client", "clients": ["acme"], "sites": ["eu"], "event": "deploy.reload"}))

    (_, first, first_body), (_, second, _) = router.take(router.names.edge_queue, 2)
    after = time.time_ns() // 1000
    # Plus when the router accepted each (microseconds after the epoch),
    # for the edges' delivery-latency histogram.
    for p in (first, second):
        assert before <= p.headers.pop("x-herald-accepted-us") <= after
    assert first_body == body
    assert first.message_id == "chat-7-1"
    assert first.content_type == "application/json"
    assert first.headers == {**headers, "scope": "user"}
    assert second.headers == {"scope": "client", "clients": ["acme"], "sites": ["eu"], "event": "deploy.reload"}

    assert router.stop() == 0
    assert router.ready(router.names.queue) == 0, "every delivery acked"


def test_python_byte_strings_are_strings(router):
    router.publish(b"\x00\x01", props("bytes-1", {"users": [b"bob"], "event": b"file.ready"}, "application/octet-stream"))
    (_, p, body), = router.take(router.names.edge_queue, 1)
    assert body == b"\x00\x01"
    assert p.headers["users"] == ["bob"]
    assert p.headers["event"] == "file.ready"


def test_refused_publications_are_dead_lettered_with_the_reason(router):
    cases = {
        "users-str": ({"users": "alice", "event": "e"}, "users", "must be an array of strings"),
        "users-int": ({"users": ["a", 7], "event": "e"}, "users", "entry 1 is an integer"),
        "ttl-str": ({"users": ["a"], "event": "e", "ttl-ms": "5000"}, "ttl-ms", "must be an integer"),
        "no-event": ({"users": ["a"]}, "event", "required"),
        "scope": ({"scope": "all", "event": "e"}, "scope", "unknown scope"),
        "delay": ({"users": ["a"], "event": "e", "delay-ms": 1000}, "delay-ms", "delayed delivery is not enabled on this router"),
        "online": ({"users": ["a"], "event": "e", "when-online": True}, "when-online", "delayed delivery is not enabled on this router"),
    }
    for message_id, (headers, _, _) in cases.items():
        router.publish(b'{"x":1}', props(message_id, headers), routing_key="rk.1")
    router.publish(b"caf\xe9", props("latin1", {"users": ["a"], "event": "e"}, "text/plain"))

    dead = {p.message_id: (p, body) for _, p, body in router.take(router.names.dead_queue, len(cases) + 1)}
    for message_id, (headers, field, words) in cases.items():
        p, body = dead[message_id]
        assert body == b'{"x":1}'
        assert p.headers["x-herald-field"] == field, p.headers
        assert p.headers["x-herald-error"].startswith(f"{field}: "), p.headers
        assert words in p.headers["x-herald-error"], p.headers
        assert p.headers["x-herald-routing-key"] == "rk.1"
        for name, value in headers.items():
            assert p.headers[name] == value
    p, body = dead["latin1"]
    assert p.headers["x-herald-field"] == "body"
    assert body == b"caf\xe9"
    assert router.ready(router.names.edge_queue) == 0
