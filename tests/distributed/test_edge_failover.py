"""An edge killed: its users move to other edges through HAProxy, nobody
else moves."""

import time

from herald_dist import (RECOVERY, TIMEOUT, amqp_publish, confirmed_channel, ids_of, unique,
                         wait_until)


def publish_to(dep, uids, event, run):
    mid = unique(run)
    with dep.amqp("root1") as conn:
        amqp_publish(confirmed_channel(conn), "{}", {"users": uids, "event": event},
                     message_id=mid)
    return mid


def reconnect(dep, old, headers):
    """The same user again through HAProxy (same uid), retried until it
    works as a browser client would (the first tries may still be routed to
    the dead edge before HAProxy retries elsewhere or notices)."""
    deadline = time.monotonic() + RECOVERY
    failures = []
    while True:
        try:
            c = dep.client(old.uid, headers=headers)
            c.failed_attempts = failures
            return c
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            failures.append(repr(e))
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)  # reconnect interval, bounded by the deadline


def next_new(dep, c, first):
    """The next message of a moved user's new session that is not a copy
    of one they had before the kill. With targeted routing the routers'
    catch-up re-sends to the new edge what went to the old one for the
    user in the second before the new session began (docs/architecture.md,
    targeted routing): on a fast machine that can be Deployment.routers_know's
    probes and `first`. Fanout mode sends no copies: any message counts."""
    while True:
        m = c.message()
        copy = (m.headers["event"] == "herald.test.probe"
                or m.headers["message-id"] == first)
        if dep.routing == "targeted" and copy:
            continue
        return m


def test_users_of_a_killed_edge_reconnect_to_another_edge_and_nobody_else_moves(dep):
    run = unique("failover")
    by_edge = dep.clients_per_edge(f"{run}-u", per_edge=2)
    victim = next(iter(by_edge))
    moved = by_edge[victim]
    stayed = [c for e, cs in by_edge.items() if e != victim for c in cs]
    everyone = moved + stayed
    uids = [c.uid for c in everyone]

    # Everyone has a sequence to resume from.
    first = publish_to(dep, uids, "before.kill", run)
    last_seen = {}
    for c in everyone:
        m = c.message()
        assert m.headers["message-id"] == first
        last_seen[c.uid] = {"last-seq": m.headers["seq"], "epoch": m.headers["epoch"]}

    killed = False
    try:
        dep.kill(victim)
        killed = True
        for c in moved:
            c.expect("disconnected", TIMEOUT)

        # They come back through HAProxy with the same uid, resuming.
        back = []
        for c in moved:
            n = reconnect(dep, c, last_seen[c.uid])
            assert n.edge != victim and n.edge in by_edge, n.edge
            # A new edge, a new mailbox: the resume cannot be honoured, and
            # the subscription says so.
            gap = n.message()
            assert gap.headers["event"] == "herald.gap", gap.headers
            assert gap.headers["reason"] == "epoch-changed", gap.headers
            back.append(n)
        print(f"reconnect attempts that failed: {[n.failed_attempts for n in back]}")

        # New publications reach everybody: the moved users on their new
        # edge, the others on the sessions they never left.
        second = publish_to(dep, uids, "after.kill", run)
        for c in back:
            assert ids_of([next_new(dep, c, first)]) == [second], f"{c.uid} on {c.edge}"
        for c in stayed:
            assert ids_of([c.message()]) == [second], f"{c.uid} on {c.edge}"
        for c in stayed:
            c.assert_silent()  # in particular: no disconnect

        # Once HAProxy has marked the edge down, the others still hash to
        # their own edge (consistent hashing moves only the dead edge's users).
        wait_until(f"HAProxy to mark {victim} DOWN",
                   lambda: dep.haproxy_servers()[("edges", victim)].startswith("DOWN"), RECOVERY)
        for c in stayed:
            again = dep.client(c.uid)
            assert again.edge == c.edge, f"{c.uid} moved from {c.edge} to {again.edge}"
            again.close()
        for c in moved:
            again = dep.client(c.uid)
            assert again.edge != victim
            again.close()
    finally:
        dep.close_sessions()
        if killed:
            # deploy/up again starts only what is not running: the killed edge.
            out = dep.up_again()
            assert f"started {victim}" in out, out
            for e in by_edge:
                if e != victim:
                    assert f"{e} already running" in out, out
    dep.wait_ready(RECOVERY)
