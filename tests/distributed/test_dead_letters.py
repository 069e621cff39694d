"""Invalid AMQP publications are dead-lettered with the reason, never
dropped, and never stop the stream."""

import json

import pytest

from herald_dist import amqp_publish, confirmed_channel, dead_letters, text, unique, wait_until


def rejected(dep) -> float:
    """Publications refused by all routers (herald_notifications_rejected_total)."""
    return dep.router_metric("herald_notifications_rejected_total")


@pytest.mark.parametrize("root", ["root1", "root2"])
def test_invalid_publications_are_dead_lettered_with_the_reason(dep, root):
    user = dep.client(unique("dl-user"))
    bad_users, no_event, bad_utf8 = unique("bad-users"), unique("no-event"), unique("bad-utf8")
    too_big = unique("too-big")
    big = b"\0" * (1024 * 1024 + 1)  # publish.max_payload_bytes + 1
    good = unique("good")
    rejected_before = rejected(dep)
    with dep.amqp(root) as conn:
        ch = confirmed_channel(conn)
        amqp_publish(ch, '{"n":1}', {"users": user.uid, "event": "x.bad"}, message_id=bad_users,
                     routing_key="rk.users")
        amqp_publish(ch, '{"n":2}', {"users": [user.uid]}, message_id=no_event,
                     routing_key="rk.event")
        # A text content type promises UTF-8.
        amqp_publish(ch, b"caf\xe9", {"users": [user.uid], "event": "x.text"},
                     message_id=bad_utf8, content_type="text/plain; charset=utf-8")
        amqp_publish(ch, big, {"users": [user.uid], "event": "x.big"}, message_id=too_big,
                     content_type="application/octet-stream")
        # Published right after, through the same root and router.
        amqp_publish(ch, '{"n":3}', {"users": [user.uid], "event": "x.good"}, message_id=good)

    m = user.message()
    assert m.headers["message-id"] == good, "the valid publication comes through, alone"
    assert json.loads(m.body) == {"n": 3}
    user.assert_silent()

    dead = dead_letters(dep, root, {bad_users, no_event, bad_utf8, too_big})
    _, props, body = dead[bad_users]
    error = text(props.headers["x-herald-error"])
    assert error.startswith("users:") and "array" in error, error
    assert text(props.headers["x-herald-field"]) == "users"
    assert text(props.headers["x-herald-routing-key"]) == "rk.users"
    # The publication itself is kept: body, properties, original headers.
    assert body == b'{"n":1}'
    assert props.content_type == "application/json"
    assert text(props.headers["event"]) == "x.bad"

    _, props, body = dead[no_event]
    error = text(props.headers["x-herald-error"])
    assert error.startswith("event:") and "required" in error, error
    assert text(props.headers["x-herald-field"]) == "event"
    assert body == b'{"n":2}'

    _, props, body = dead[bad_utf8]
    error = text(props.headers["x-herald-error"])
    assert text(props.headers["x-herald-field"]) == "body", error
    assert "UTF-8" in error, error
    assert body == b"caf\xe9"

    _, props, body = dead[too_big]
    assert text(props.headers["x-herald-field"]) == "body", props.headers
    assert body == big

    # Counted, once each.
    wait_until("the routers to count four rejections",
               lambda: rejected(dep) == rejected_before + 4)
    # Nothing invalid reached an edge.
    for addr in dep.edges.values():
        assert dep.metric(addr, "herald_uplink_rejected_total") == 0
