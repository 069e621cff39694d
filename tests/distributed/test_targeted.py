"""Targeted routing (routing.mode = "targeted", docs/architecture.md): a
notification goes only to the edges holding a recipient, and nothing is
missed when a user moves between edges or a router restarts.

The delivery tests (a user moving, by reconnecting or because their edge
died) hold in both modes and run in both; the tests of what each edge
receives and of a restarted router's view need targeted routers
(HERALD_DIST_ROUTING=targeted): they are marked `targeted_only`, which
scripts/test.sh deselects in fanout mode, and skipped if run there anyway."""

import threading
import time

import pytest

from herald_dist import (RECOVERY, TIMEOUT, amqp_publish, confirmed_channel, ids_of, offline_ms,
                         unique, wait_until)

def needs_targeted(dep):
    if dep.routing != "targeted":
        pytest.skip("needs HERALD_DIST_ROUTING=targeted")


def views_trusted(dep, routers=None) -> None:
    """Wait until every router (or those named) routes by edge and trusts
    its view of every edge."""
    wait_until("the routers to trust their views of every edge",
               lambda: dep.routing_views_trusted(routers), RECOVERY)


def received(dep) -> dict[str, float]:
    """Notifications each edge got from its roots."""
    return {e: dep.metric(a, "herald_uplink_received_total") for e, a in dep.edges.items()}


def publish(dep, root: str, headers: dict, mid: str) -> None:
    with dep.amqp(root) as conn:
        amqp_publish(confirmed_channel(conn), "{}", headers, message_id=mid)


@pytest.mark.targeted_only
def test_each_scope_reaches_only_the_edges_holding_a_recipient(dep):
    needs_targeted(dep)
    views_trusted(dep)
    run = unique("tgt")
    co = unique("co")
    a, b, c = dep.clients_on_distinct_edges(f"{run}-u", [{}, {"client": co}, {}])
    assert len({a.edge, b.edge, c.edge}) == 3
    # Whether the routers have the three sessions' reports yet or not, each
    # notification reaches its edge once: directly, or by the catch-up when
    # the report comes.
    before = received(dep)
    for i, root in enumerate(["root1", "root2", "root1"]):
        publish(dep, root, {"users": [a.uid], "event": "only.a"}, f"{run}-a{i}")
    assert ids_of(a.messages(3)) == [f"{run}-a0", f"{run}-a1", f"{run}-a2"]
    publish(dep, "root2", {"scope": "client", "clients": [co], "event": "only.b"}, f"{run}-b")
    assert ids_of([b.message()]) == [f"{run}-b"]
    # Nothing for c's edge.
    after = received(dep)
    assert after[c.edge] == before[c.edge], (before, after)
    assert after[b.edge] - before[b.edge] == 1, (before, after)
    assert after[a.edge] - before[a.edge] == 3, (before, after)
    # Global scope: every edge, one publication.
    every_before = dep.router_metric("herald_routing_every_publications_total")
    publish(dep, "root1", {"scope": "global", "event": "all"}, f"{run}-g")
    for x in (a, b, c):
        assert ids_of([x.message()]) == [f"{run}-g"]
    assert dep.router_metric("herald_routing_every_publications_total") == every_before + 1
    # A user nobody holds: sent nowhere.
    unheld = dep.router_metric("herald_routing_unheld_total")
    quiet = received(dep)
    publish(dep, "root1", {"users": [unique("nobody")], "event": "lost"}, f"{run}-n")
    wait_until("the router to count a notification nobody holds",
               lambda: dep.router_metric("herald_routing_unheld_total") == unheld + 1)
    assert received(dep) == quiet
    for x in (a, b, c):
        x.assert_silent()


class Stream:
    """Numbered publications to one user, through both roots in turn, each
    confirmed before the next, until stopped; what was published when."""

    def __init__(self, dep, uid: str, run: str):
        self.dep, self.uid, self.run = dep, uid, run
        self.sent: list[tuple[float, str]] = []  # (wall clock when its publish began, id)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            conns = {r: self.dep.amqp(r) for r in ("root1", "root2")}
            channels = {r: confirmed_channel(c) for r, c in conns.items()}
            i = 0
            while not self.stop.is_set():
                root = "root1" if i % 2 == 0 else "root2"
                mid = f"{self.run}-{i}"
                began = time.time()
                amqp_publish(channels[root], "{}", {"users": [self.uid], "event": "move"},
                             message_id=mid)
                self.sent.append((began, mid))
                i += 1
                self.stop.wait(0.02)  # about 40 publications a second
            for c in conns.values():
                c.close()
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT)
        assert self.error is None, f"publishing failed: {self.error!r}"

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(TIMEOUT)

    def since(self, t: float) -> list[str]:
        return [mid for began, mid in self.sent if began > t]


def move(dep, leave) -> None:
    """A user on one edge receiving a stream moves to another edge (`leave`
    takes them off the first); everything published once their new
    session is subscribed reaches it."""
    if dep.routing == "targeted":
        views_trusted(dep)
    run = unique("move")
    uid = unique("mover")
    first, second = list(dep.edges)[:2]
    old = dep.direct_client(first, uid)
    with Stream(dep, uid, run) as stream:
        old.messages(5)  # the stream flows to the first edge
        leave(first, old)
        new = dep.direct_client(second, uid)
        subscribed = time.time()
        # Let the stream run past the new edge's presence report and on.
        wait_until("40 publications after the move",
                   lambda: len(stream.since(subscribed)) >= 40, TIMEOUT)
        stream.finish()
    want = stream.since(subscribed)
    got: set[str] = set()

    def all_in():
        while True:
            try:
                e = new.events.get(timeout=0.1)
            except Exception:  # noqa: BLE001 - queue.Empty: nothing more yet
                return set(want) <= got
            if e.kind == "message":
                got.add(e.headers["message-id"])

    wait_until(f"every publication after the move on {second}", all_in, TIMEOUT)
    missed = [m for m in want if m not in got]
    assert not missed, f"missed after the move: {missed}"
    if dep.routing == "targeted":
        print("re-sent by the catch-up so far:",
              dep.router_metric("herald_routing_catch_up_total"))


def test_a_user_reconnecting_to_another_edge_misses_nothing(dep):
    move(dep, lambda edge, session: session.close())


def test_a_user_whose_edge_dies_misses_nothing_on_the_next(dep):
    killed = []

    def kill(edge, session):
        dep.kill(edge)
        killed.append(edge)
        session.expect("disconnected", TIMEOUT)

    try:
        move(dep, kill)
    finally:
        dep.close_sessions()
        if killed:
            out = dep.up_again()
            assert f"started {killed[0]}" in out, out
    dep.wait_ready(RECOVERY)


@pytest.mark.targeted_only
def test_a_user_whose_edge_dies_misses_nothing_published_while_away(dep):
    """The user's edge SIGKILLed while a stream flows to them; they stay
    away while more is published, then resume on another edge with
    `offline-ms` (how long ago their old session last sent them a frame),
    as the browser client does. The routers re-send from then: every
    publication the old session did not get reaches the new one, those
    published while nobody held the user included."""
    needs_targeted(dep)
    views_trusted(dep)
    run = unique("away")
    uid = unique("away-user")
    first, second = list(dep.edges)[:2]
    old = dep.direct_client(first, uid)
    got_old: list[str] = []
    last = {}

    def seen(e):
        got_old.append(e.headers["message-id"])
        last.update(seq=e.headers["seq"], epoch=e.headers["epoch"], at=e.at)

    killed = False
    try:
        with Stream(dep, uid, run) as stream:
            for m in old.messages(5):
                seen(m)
            dep.kill(first)
            killed = True
            while True:  # what the old session still got, until it drops
                e = old.next()
                if e.kind == "disconnected":
                    away_from = e.at
                    break
                assert e.kind == "message", e
                seen(e)
            # Away for a while: more than the routers' clock margin (1 s)
            # of publications that no edge delivers to anyone.
            wait_until("60 publications while the user is away",
                       lambda: len(stream.since(away_from)) >= 60, TIMEOUT)
            away_ms = offline_ms(last["at"])
            new = dep.direct_client(second, uid, headers={
                "last-seq": last["seq"], "epoch": last["epoch"], "offline-ms": away_ms})
            subscribed = time.time()
            wait_until("40 publications after the move",
                       lambda: len(stream.since(subscribed)) >= 40, TIMEOUT)
            stream.finish()
        want = [mid for _, mid in stream.sent if mid not in set(got_old)]
        away = [mid for began, mid in stream.sent if away_from < began <= subscribed]
        got: list[str] = []

        def all_in():
            while True:
                try:
                    e = new.events.get(timeout=0.1)
                except Exception:  # noqa: BLE001 - queue.Empty: nothing more yet
                    return set(want) <= set(got)
                if e.kind == "message" and e.headers["event"] != "herald.gap":
                    got.append(e.headers["message-id"])

        wait_until(f"every publication the old session did not get, on {second}", all_in,
                   TIMEOUT)
        missed = [m for m in want if m not in got]
        assert not missed, f"missed: {missed}"
        copies = [m for m in got if m in set(got_old)]
        print(f"away {away_ms} ms; {len(away)} published meanwhile; "
              f"{len(want)} the old session did not get, all on {second}; "
              f"{len(copies)} copies of what it had (the 1 s margin)")
    finally:
        dep.close_sessions()
        if killed:
            out = dep.up_again()
            assert f"started {first}" in out, out
    dep.wait_ready(RECOVERY)


@pytest.mark.targeted_only
def test_a_restarted_router_delivers_while_its_view_is_new_then_targets_again(dep):
    needs_targeted(dep)
    run = unique("rr")
    # Sessions on each edge directly, with heart-beats: they stay open
    # through the restart without a message.
    users = [dep.direct_client(e, unique(f"{run}-u")) for e in dep.edges]
    try:
        dep.kill("router1")
    finally:
        # deploy/up again starts only what is not running: router1.
        out = dep.up_again()
    assert "started router1" in out, out
    dep.wait_ready(RECOVERY)
    # Its view is new (it routes to every edge until it has listened for
    # stale_ms and has every edge's snapshot): everything arrives.
    publish(dep, "root1", {"users": [u.uid for u in users], "event": "new.view"}, f"{run}-0")
    for u in users:
        assert ids_of([u.message()]) == [f"{run}-0"], u.edge
    # The edges' snapshots make it whole again; then each to its edge only.
    views_trusted(dep, ["router1"])
    router1 = dep.routers["router1"]
    before = dep.metric(router1, "herald_routing_edge_publications_total")
    for i, u in enumerate(users, start=1):
        publish(dep, "root1", {"users": [u.uid], "event": "trusted"}, f"{run}-{i}")
        assert ids_of([u.message()]) == [f"{run}-{i}"], u.edge
    assert dep.metric(router1, "herald_routing_edge_publications_total") - before == len(users)
    for u in users:
        u.assert_silent()
