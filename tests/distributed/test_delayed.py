"""Delayed notifications across the deployment: the routers keep them in the
Redis deploy/up starts for them, fire them through the edges exchange when
due, hold `when-online` ones until an edge reports the user online (edge ->
herald.presence on every root -> router -> Redis), apply AMQP cancels, and
dead-letter bad timing headers. Statuses are read from the routers through
HAProxy (round robin: whichever router answers, they share Redis)."""

import json

import pytest

from herald_dist import (TIMEOUT, amqp_publish, confirmed_channel, dead_letters, text, unique,
                         wait_until)

# Short enough to keep the suite fast, long enough that a notification
# fired at once (not delayed) would show.
DELAY_MS = 3000


def test_a_delayed_amqp_publication_arrives_no_earlier_than_its_due_time(dep):
    user = dep.client(unique("later-u"))
    nid = unique("later")
    with dep.amqp("root1") as conn:
        amqp_publish(confirmed_channel(conn), '{"n":1}',
                     {"users": [user.uid], "event": "x.later", "delay-ms": DELAY_MS},
                     message_id=nid)
    # Stored before the router acked it; read back through either router.
    status = dep.wait_state(nid, "scheduled", "firing", "delivered")
    due = status["due_at_ms"]
    assert due - status["accepted_at_ms"] == DELAY_MS, status

    m = user.message(timeout=DELAY_MS / 1000 + TIMEOUT)
    assert m.headers["message-id"] == nid
    assert json.loads(m.body) == {"n": 1}
    assert m.at * 1000 >= due, f"arrived {due - m.at * 1000:.0f} ms before its due time"
    delivered = dep.wait_state(nid, "delivered")
    assert delivered["attempts"] == 1, delivered
    user.assert_silent()


def test_a_when_online_notification_is_held_until_its_user_connects_through_haproxy(dep):
    uid = unique("offline-u")  # never connected: no edge reports it online
    nid = unique("held")
    with dep.amqp("root2") as conn:
        amqp_publish(confirmed_channel(conn), '{"digest":3}',
                     {"users": [uid], "event": "x.digest", "when-online": True},
                     message_id=nid)
    held = dep.wait_state(nid, "held")
    assert held["attempts"] == 1, held

    # The edge HAProxy picks reports the user online to every root; a router
    # records it in Redis and releases what is held. (The first SUBSCRIBE
    # starts from the mailbox head at CONNECT, so a release that beats the
    # SUBSCRIBE is not missed.)
    c = dep.client(uid)
    m = c.message()
    assert m.headers["message-id"] == nid
    assert m.headers["event"] == "x.digest"
    assert json.loads(m.body) == {"digest": 3}
    delivered = dep.wait_state(nid, "delivered")
    assert delivered["attempts"] == 2, f"claimed when due, then when {uid} came: {delivered}"
    c.assert_silent()


def test_an_amqp_cancel_through_the_other_root_stops_a_scheduled_notification(dep):
    user = dep.client(unique("cancel-u"))
    doomed, control = unique("doomed"), unique("control")
    cancelled_before = dep.router_metric("herald_delayed_cancelled_total")
    with dep.amqp("root2") as conn:
        amqp_publish(confirmed_channel(conn), '{"n":"doomed"}',
                     {"users": [user.uid], "event": "x.doomed", "delay-ms": DELAY_MS},
                     message_id=doomed)
    due = dep.wait_state(doomed, "scheduled")["due_at_ms"]

    # Through root 1, so router 1 cancels what router 2 stored.
    with dep.amqp("root1") as conn:
        amqp_publish(confirmed_channel(conn), b"", None, message_id=doomed, kind="herald.cancel")
    cancelled = dep.wait_state(doomed, "cancelled")
    assert cancelled["due_at_ms"] == due
    wait_until("the routers to count the cancel",
               lambda: dep.router_metric("herald_delayed_cancelled_total")
               == cancelled_before + 1)

    # Absence, proven by a control notification due after the cancelled one
    # was: the firers would have claimed the cancelled one first, so when
    # the control arrives, the cancelled one's time has passed.
    with dep.amqp("root2") as conn:
        amqp_publish(confirmed_channel(conn), '{"n":"control"}',
                     {"users": [user.uid], "event": "x.control", "deliver-at": due + 300},
                     message_id=control)
    m = user.message(timeout=DELAY_MS / 1000 + TIMEOUT)
    assert m.headers["message-id"] == control, "the cancelled notification was delivered"
    assert m.at * 1000 >= due + 300
    user.assert_silent()
    assert dep.status(doomed)["state"] == "cancelled"


@pytest.mark.parametrize("root", ["root1", "root2"])
def test_bad_timing_headers_are_dead_lettered_naming_the_header(dep, root):
    a, b = dep.client(unique("timing-a")), dep.client(unique("timing-b"))
    users = [a.uid]
    # message id -> (headers, the header at fault, words of the reason)
    cases = {
        unique("negative"): ({"users": users, "delay-ms": -5}, "delay-ms", "negative"),
        unique("soon"): ({"users": users, "delay-ms": "soon"}, "delay-ms", "integer"),
        unique("tuesday"): ({"users": users, "deliver-at": "next tuesday"}, "deliver-at",
                            "RFC 3339"),
        unique("two-users"): ({"users": [a.uid, b.uid], "when-online": True}, "when-online",
                              "exactly one user"),
    }
    good = unique("good")
    rejected_before = dep.router_metric("herald_notifications_rejected_total")
    with dep.amqp(root) as conn:
        ch = confirmed_channel(conn)
        for mid, (headers, _, _) in cases.items():
            amqp_publish(ch, '{"bad":true}', {**headers, "event": "x.bad-timing"},
                         message_id=mid, routing_key="rk.timing")
        # Right after, through the same root and router.
        amqp_publish(ch, '{"good":true}', {"users": users, "event": "x.good"}, message_id=good)

    m = a.message()
    assert m.headers["message-id"] == good, "the valid publication comes through, alone"
    a.assert_silent()
    b.assert_silent(timeout=0)

    dead = dead_letters(dep, root, set(cases))
    for mid, (headers, header, words) in cases.items():
        _, props, body = dead[mid]
        error = text(props.headers["x-herald-error"])
        assert text(props.headers["x-herald-field"]) == header, (mid, error)
        assert error.startswith(f"{header}:") and words in error, (mid, error)
        assert text(props.headers["x-herald-routing-key"]) == "rk.timing"
        assert body == b'{"bad":true}'
        # Refused, so never stored: no status.
        assert dep.status(mid) is None, mid
    wait_until("the routers to count the rejections",
               lambda: dep.router_metric("herald_notifications_rejected_total")
               == rejected_before + len(cases))
