"""Publications through either root reach exactly the right users, whichever
edge HAProxy put them on."""

import json

import pytest

from herald_dist import amqp_publish, confirmed_channel, ids_of, unique



@pytest.mark.parametrize("root", ["root1", "root2"])
def test_each_scope_through_a_root_reaches_exactly_its_users_on_every_edge(dep, root):
    run = unique("fan")
    # The users of the scope matrix: company (`client` claim) and site. The
    # companies are this run's own: with targeted routing, a company's first
    # user on an edge also gets what went to the company elsewhere in the
    # second before their session began (the catch-up's clock margin).
    acme, globex = unique("acme"), unique("globex")
    spec_a = {"client": acme, "site": "s1"}
    spec_b = {"client": acme, "site": "s2"}
    spec_c = {"client": globex, "site": "s1"}
    spec_d = {}  # no company, no site
    a, b, c, d = dep.clients_on_distinct_edges(f"{run}-u", [spec_a, spec_b, spec_c, spec_d])
    assert len({x.edge for x in (a, b, c, d)}) == min(3, len(dep.edges)), \
        "the users must sit on different edges"
    u = {x: x.uid for x in (a, b, c, d)}
    # Each edge's own /v1/stats accounts for the sessions put on it.
    for edge in {x.edge for x in (a, b, c, d)}:
        here = sum(1 for x in (a, b, c, d) if x.edge == edge)
        assert dep.edge_stats(edge)["sessions"]["by_transport"]["websocket"] >= here

    # (headers, who must get it). Published in this order through one root,
    # so every session receives its share in this order.
    plan = [
        ({"scope": "user", "users": [u[a], u[c]], "event": "chat.message"}, [a, c]),
        ({"users": [u[d]], "event": "default.scope"}, [d]),  # no scope header: user
        ({"scope": "user", "users": list(u.values()), "sites": ["s2"], "event": "site.user"}, [b]),
        ({"scope": "client", "clients": [acme], "event": "co.news"}, [a, b]),
        ({"scope": "client", "clients": [acme, globex], "sites": ["s1"],
          "event": "co.site"}, [a, c]),
        ({"scope": "user", "users": [unique("nobody")], "event": "not.ours"}, []),
        ({"scope": "client", "clients": [unique("other-co")], "event": "not.ours"}, []),
        ({"scope": "global", "sites": ["s1"], "event": "all.site"}, [a, c]),
        ({"scope": "global", "event": "all.everyone"}, [a, b, c, d]),
    ]
    expected = {x: [] for x in (a, b, c, d)}
    bodies = {}
    with dep.amqp(root) as conn:
        ch = confirmed_channel(conn)
        for i, (headers, who) in enumerate(plan):
            mid = f"{run}-{i}"
            body = json.dumps({"i": i, "via": root, "text": "héllo ✓"})
            bodies[mid] = body
            amqp_publish(ch, body, headers, message_id=mid)
            for x in who:
                expected[x].append(mid)

    for x, want in expected.items():
        got = x.messages(len(want))
        assert ids_of(got) == want, f"{x.uid} on {x.edge}"
        for m in got:
            mid = m.headers["message-id"]
            i = int(mid.rsplit("-", 1)[1])
            assert m.headers["event"] == plan[i][0]["event"]
            assert m.headers["scope"] == plan[i][0].get("scope", "user")
            assert m.headers["content-type"] == "application/json"
            assert m.body == bodies[mid]
            assert m.headers["epoch"] == x.connected.headers["epoch"]
        # Consecutive from the mailbox's first (after the probes of
        # Deployment.routers_know, one per root, with targeted routing).
        first = 1 + (len(dep.roots) if dep.routing == "targeted" else 0)
        assert [int(m.headers["seq"]) for m in got] == list(range(first, first + len(want)))
    # The last publication reached everyone, after anything misrouted would have.
    for x in expected:
        x.assert_silent()


def test_http_publishes_through_haproxy_reach_users_on_every_edge(dep):
    """POST /v1/notifications through HAProxy goes round robin to the routers
    (so through both roots): each publication reaches users on all edges."""
    users = dep.clients_on_distinct_edges(unique("http-u"), [{}, {}, {}])
    uids = [x.uid for x in users]
    ids = []
    for i in range(4):  # at least two per router
        ids += dep.publish_http({"users": uids, "event": "http.fanout",
                                 "payload": {"i": i}})["ids"]
    for x in users:
        got = ids_of(x.messages(len(ids)))
        # Two roots: publications through different roots may overtake each
        # other, so compare as sets; each exactly once.
        assert sorted(got) == sorted(ids), f"{x.uid} on {x.edge}"
    for x in users:
        x.assert_silent()


def test_one_id_through_both_roots_and_both_routers_reaches_each_user_once(dep):
    """A backend may publish the same notification through two roots (or
    retry over HTTP and land on the other router): the routers' shared
    ledger answers the retries as duplicates, and the edges deduplicate what
    two roots both forward. Without an id, each publication is its own
    notification."""
    users = dep.clients_on_distinct_edges(unique("dedup-u"), [{}, {}, {}])
    uids = [x.uid for x in users]
    twice = unique("twice")
    for root in ("root1", "root2"):
        with dep.amqp(root) as conn:
            ch = confirmed_channel(conn)
            amqp_publish(ch, '{"copy":"' + root + '"}', {"users": uids, "event": "dup.amqp"},
                         message_id=twice)
            # No message_id: the router makes one, so both copies arrive.
            amqp_publish(ch, "{}", {"users": uids, "event": "dup.anonymous"})
    http_id = unique("twice-http")
    for attempt in range(4):  # round robin: both routers, twice each
        answer = dep.publish_http({"id": http_id, "users": uids, "event": "dup.http",
                                   "payload": {}})
        assert answer["ids"] == [http_id]
        # The routers share the idempotency ledger in Redis: every retry,
        # whichever router takes it, is answered as a duplicate.
        assert answer.get("duplicates", []) == ([http_id] if attempt else []), answer
    # The end marker, once the duplicates had every chance to arrive.
    end = unique("end")
    for root in ("root1", "root2"):
        with dep.amqp(root) as conn:
            amqp_publish(confirmed_channel(conn), "{}", {"users": uids, "event": "dup.end"},
                         message_id=end)
    for x in users:
        got = []
        while not got or got[-1].headers["message-id"] != end:
            got.append(x.message())
        x.assert_silent()  # not even the second copy of the end marker
        events = [m.headers["event"] for m in got]
        ids = ids_of(got)
        assert ids.count(twice) == 1, f"{x.uid} on {x.edge}: {events}"
        assert ids.count(http_id) == 1, f"{x.uid} on {x.edge}: {events}"
        anonymous = [m for m in got if m.headers["event"] == "dup.anonymous"]
        assert len(anonymous) == 2 and len(set(ids_of(anonymous))) == 2, events
        assert len(got) == 5, events


def test_a_large_payload_reaches_users_on_every_edge_byte_for_byte(dep):
    users = dep.clients_on_distinct_edges(unique("big-u"), [{}, {}, {}])
    # ~600 KB of JSON text with characters that need escaping somewhere.
    payload = json.dumps({"rows": [{"i": i, "s": "é\"\\✓\u2028" * 8} for i in range(6000)]},
                         ensure_ascii=False)
    assert 500_000 < len(payload.encode()) < 1_000_000
    mid = unique("big")
    with dep.amqp("root2") as conn:
        amqp_publish(confirmed_channel(conn), payload,
                     {"users": [x.uid for x in users], "event": "big.one"}, message_id=mid)
    for x in users:
        m = x.message()
        assert m.headers["message-id"] == mid
        assert int(m.headers["content-length"]) == len(payload.encode())
        assert m.body == payload, f"{x.uid} on {x.edge}: the payload changed on the way"
