"""Every request of one SockJS session lands on the same edge: HAProxy
hashes the `uid` query parameter, which SockJS repeats on every request."""

import json

from herald_dist import (XhrStreamingSession, amqp_publish, confirmed_channel, stomp_encode,
                         unique)


def connect(dep, s):
    """Open the receiver, then CONNECT through xhr_send (an edge that does
    not hold the session would answer 404)."""
    s.open()
    assert s.send(stomp_encode("CONNECT", {"accept-version": "1.2", "host": "/",
                                           "passcode": dep.token(s.uid)})) == 204
    command, headers, _ = s.stomp_frame()
    assert command == "CONNECTED", (command, headers)
    assert headers["user-name"] == s.uid


def connected_on_new_edge(dep, prefix, used, tries=40):
    """A connected xhr-streaming session whose user landed on an edge not in `used`."""
    for attempt in range(tries):
        s = XhrStreamingSession(dep, f"{prefix}-{attempt}-{unique('s')}")
        dep.sessions.append(s)
        # An edge counts a SockJS session once STOMP is connected.
        s.edge = dep.placed(lambda: connect(dep, s), f"the xhr-streaming session of {s.uid}")
        if s.edge not in used or len(used) >= len(dep.edges):
            return s
        s.close()
    raise AssertionError(f"no user landed on a new edge in {tries} tries")


def test_an_xhr_streaming_session_through_haproxy_stays_on_one_edge(dep):
    run = unique("sockjs")
    sessions = []
    for _ in range(min(2, len(dep.edges))):
        sessions.append(connected_on_new_edge(dep, f"{run}-u", {s.edge for s in sessions}))

    for s in sessions:
        # SUBSCRIBE through xhr_send too.
        assert s.send(stomp_encode("SUBSCRIBE", {"id": "sub-0", "destination": "/user/notifications",
                                                 "ack": "auto", "receipt": "r-1"})) == 204
        command, headers, _ = s.stomp_frame()
        assert (command, headers.get("receipt-id")) == ("RECEIPT", "r-1")
        stats = dep.edge_stats(s.edge)
        assert stats["sessions"]["by_transport"]["xhr_streaming"] >= 1, stats

    # The same session id under another user's uid hashes to another edge,
    # which does not know the session: the uid is what keeps it together.
    a, b = sessions
    stray = XhrStreamingSession(dep, b.uid)
    stray.base = a.base
    assert stray.send(stomp_encode("SUBSCRIBE", {"id": "sub-1",
                                                 "destination": "/user/notifications"})) == 404

    mids = {}
    with dep.amqp("root1") as conn:
        ch = confirmed_channel(conn)
        for s in sessions:
            mids[s.uid] = unique("sockjs-msg")
            amqp_publish(ch, json.dumps({"to": s.uid, "quote": "\"\u2028"}),
                         {"users": [s.uid], "event": "sockjs.hello"}, message_id=mids[s.uid])
    for s in sessions:
        command, headers, body = s.stomp_frame()
        assert command == "MESSAGE", (command, headers)
        assert headers["message-id"] == mids[s.uid]
        assert headers["event"] == "sockjs.hello"
        assert json.loads(body) == {"to": s.uid, "quote": "\"\u2028"}


def test_an_xhr_streaming_receiver_reopened_after_its_limit_finds_its_session(dep):
    """An xhr-streaming response ends after 128 KiB and the client opens the
    next one: through HAProxy that request must reach the same edge too."""
    s = XhrStreamingSession(dep, unique("sockjs-reopen"))
    dep.sessions.append(s)
    s.edge = dep.placed(lambda: connect(dep, s), f"the xhr-streaming session of {s.uid}")
    assert s.send(stomp_encode("SUBSCRIBE", {"id": "sub-0", "destination": "/user/notifications",
                                             "ack": "auto", "receipt": "r-1"})) == 204
    assert s.stomp_frame()[0] == "RECEIPT"
    big, after = unique("big"), unique("after")
    payload = json.dumps({"pad": "x" * 200_000})  # beyond the 128 KiB limit
    with dep.amqp("root2") as conn:
        amqp_publish(confirmed_channel(conn), payload, {"users": [s.uid], "event": "sockjs.big"},
                     message_id=big)
    command, headers, body = s.stomp_frame()
    assert (command, headers["message-id"]) == ("MESSAGE", big)
    assert body == payload
    kind, error = s.next_frame()
    assert (kind, error) == ("eof", None), "the response should end at the streaming limit"

    with dep.amqp("root1") as conn:
        amqp_publish(confirmed_channel(conn), '{"n":2}',
                     {"users": [s.uid], "event": "sockjs.after"}, message_id=after)
    s.open(first=False)  # same session, same uid: same edge
    command, headers, body = s.stomp_frame()
    assert (command, headers["message-id"]) == ("MESSAGE", after)
    assert json.loads(body) == {"n": 2}
