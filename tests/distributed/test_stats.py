"""The cluster-wide GET /v1/stats (docs/stats.md#cluster): the routers answer
for the whole deployment from the edges' stats reports and the routers'
summaries kept in Redis; each edge answers `mode: edge` for itself.

Sessions are opened on chosen edges directly (Deployment.direct_client), so
the test knows which edge counts what. The edges report every
`edge.presence_heartbeat_ms` (10 s), so every check of the cluster's figures
polls until the reports have come, with a deadline. A stopped edge goes
stale after `redis.presence_edge_ttl_ms` (20 s in router.toml): its part is
listed `stale` and its last figures still count, not zero. Through Varnish
(deploy/up's varnishd in front of the routers), a dashboard's second poll is
a hit and the routers are asked once.
"""

from __future__ import annotations

from pathlib import Path

import requests

from herald_dist import TIMEOUT, unique, wait_until

# How long the cluster's figures may take to show something an edge did: its
# next report (every 10 s) plus a loaded machine's margin.
REPORTED = 25.0


def auth(dep) -> dict:
    return {"Authorization": f"Bearer {dep.api_key}"}


def stale_limit_s(dep) -> float:
    """The routers' stale limit (redis.presence_edge_ttl_ms), seconds."""
    return max(dep.router_config(r).get("redis", {}).get("presence_edge_ttl_ms", 35_000)
               for r in dep.routers) / 1000


def router_ids(dep) -> set[str]:
    """The routers' part ids: `<hostname>:<HTTP port>` (router/src/stats.rs)."""
    host = Path("/proc/sys/kernel/hostname").read_text().strip()
    return {f"{host}:{addr.rpartition(':')[2]}" for addr in dep.routers.values()}


def get_stats(base: str, **params) -> dict:
    """GET {base}/v1/stats, every page of topics: the first answer with
    `topics.items` holding them all."""
    params = {"topics_limit": 500, **params}
    r = requests.get(f"{base}/v1/stats", params=params, timeout=TIMEOUT)
    assert r.status_code == 200, f"{r.status_code} {r.text}"
    first = r.json()
    page = first
    while page["topics"]["next"] is not None:
        r = requests.get(f"{base}/v1/stats",
                         params={**params, "topics_after": page["topics"]["next"]},
                         timeout=TIMEOUT)
        assert r.status_code == 200, f"{r.status_code} {r.text}"
        page = r.json()
        first["topics"]["items"] += page["topics"]["items"]
    return first


def cluster(dep, router: str) -> dict:
    return get_stats(f"http://{dep.routers[router]}")


def edge_own(dep, edge: str) -> dict:
    s = get_stats(f"http://{dep.edges[edge]}")
    assert s["mode"] == "edge", s
    assert "parts" not in s
    return s


def row(stats: dict, topic: str, window: str = "last_minute") -> dict:
    """A topic's counts in `window`; zeros when it has no row."""
    for item in stats["topics"]["items"]:
        if item["name"] == topic:
            return item[window]
    return {"accepted": 0, "delivered": 0}


def delivered_everywhere(stats: dict) -> int:
    """Delivered over every topic row, last day."""
    return sum(i["last_day"]["delivered"] for i in stats["topics"]["items"])


def parts(stats: dict) -> dict[tuple[str, str], dict]:
    return {(p["kind"], p["id"]): p for p in stats["parts"]}


def register(dep, topic: str) -> None:
    """Register `topic` on every router, so each counts it under its name now.
    No callback; `timeout_ms` given all the same, because a topic's timeout
    is checked against the lease (10 s in router.toml) even without a
    callback_url, and the default (10 s) does not fit."""
    for router, addr in dep.routers.items():
        r = requests.put(f"http://{addr}/v1/topics/{topic}", json={"timeout_ms": 3000},
                         headers=auth(dep), timeout=TIMEOUT)
        assert r.status_code in (200, 201), f"{router}: {r.status_code} {r.text}"


def unregister(dep, topic: str) -> None:
    r = requests.delete(f"{dep.proxy_url}/v1/topics/{topic}", headers=auth(dep),
                        timeout=TIMEOUT)
    assert r.status_code in (204, 404), f"{r.status_code} {r.text}"


def publish(dep, router: str, body: dict) -> list[str]:
    """POST /v1/notifications to `router` itself."""
    r = requests.post(f"http://{dep.routers[router]}/v1/notifications", json=body,
                      headers=auth(dep), timeout=TIMEOUT)
    assert r.status_code == 202, f"{router}: {r.status_code} {r.text}"
    return r.json()["ids"]


def test_the_routers_answer_for_every_edge_and_router_and_the_sums_add_up(dep):
    run = unique("stats")
    topic = f"{run}-topic"
    register(dep, topic)
    try:
        e1, e2 = list(dep.edges)[:2]
        alice, bob = f"{run}-alice", f"{run}-bob"
        sessions = [dep.direct_client(e1, alice), dep.direct_client(e2, alice),
                    dep.direct_client(e2, bob)]
        dep.routers_know(sessions)
        r1, r2 = list(dep.routers)
        users = [alice, bob]
        sent = []
        # Under the registered topic: immediate through each router, and a
        # delayed one (the firer's path); under no topic: one immediate.
        sent += publish(dep, r1, {"users": users, "event": "stats.a", "topic": topic,
                                  "payload": {"n": 1}})
        sent += publish(dep, r2, {"users": users, "event": "stats.b", "topic": topic,
                                  "payload": {"n": 2}})
        sent += publish(dep, r2, {"users": users, "event": "stats.c", "topic": topic,
                                  "payload": {"n": 3}, "delay_ms": 100})
        sent += publish(dep, r1, {"users": users, "event": "stats.d", "payload": {"n": 4}})
        for s in sessions:
            got = [m.headers["message-id"] for m in s.messages(4)]
            assert sorted(got) == sorted(sent), f"{s.uid} on {s.edge}: {got}"
        # Three publications under the topic, each to three sessions.
        want_topic = {"accepted": 3, "delivered": 9}

        every_part = ({("edge", e) for e in dep.edges}
                      | {("router", r) for r in router_ids(dep)})
        last: dict = {}

        def settled():
            """Every edge has reported (an edge's first report may come a
            heartbeat after it started) and the sums are the edges' own."""
            c = last["cluster"] = cluster(dep, r1)
            own = last["edges"] = {e: edge_own(dep, e) for e in dep.edges}
            got = {k: row(c, topic)[k] for k in want_topic}
            return (got == want_topic
                    and set(parts(c)) == every_part
                    and c["sessions"]["total"] == sum(o["sessions"]["total"]
                                                      for o in own.values())
                    and c["deliveries"]["total"] == sum(o["deliveries"]["total"]
                                                        for o in own.values())
                    and c)

        try:
            c = wait_until("the cluster's figures to add up the edges' own", settled,
                           timeout=REPORTED)
        except AssertionError as e:
            raise AssertionError(f"{e}\ncluster: {last.get('cluster')}\n"
                                 f"edges: {last.get('edges')}") from None
        own = last["edges"]
        assert c["mode"] == "cluster"
        listed = parts(c)
        assert set(listed) == every_part, listed
        assert [(p["kind"], p["id"]) for p in c["parts"]] == sorted(listed), "sorted by kind, id"
        for p in c["parts"]:
            assert p["stale"] is False, p
            assert 0 <= p["age_ms"] <= stale_limit_s(dep) * 1000, p
        # This test's sessions are counted where they are.
        assert own[e1]["sessions"]["total"] >= 1 and own[e2]["sessions"]["total"] >= 2
        assert c["sessions"]["by_transport"]["websocket"] >= 3
        # The topic's row: its deliveries are the edges' (3 on e2, 6 in all),
        # its acceptances the routers'; the same in every window.
        assert row(own[e1], topic)["delivered"] == 3
        assert row(own[e2], topic)["delivered"] == 6
        for window in ("last_minute", "last_hour", "last_day"):
            assert {k: row(c, topic, window)[k] for k in want_topic} == want_topic, window
        assert row(c, topic)["lateness_ms"]["max"] is not None, "the delayed one fired"
        # No topic: counted under `other` (with whatever else the suite sent).
        other = row(c, "other", "last_day")
        assert other["accepted"] >= 1 and other["delivered"] >= 3, other
        # Every delivery an edge counted is in the cluster's rows: an edge's
        # rows of names the routers do not know are folded into `other`,
        # none is lost.
        assert delivered_everywhere(c) == sum(delivered_everywhere(o) for o in own.values())
        # Any router answers the same figures once the other router's summary
        # (written every `summary_every`) has reached it: r1 saw r2's part, r2
        # may still hold r1's summary from before its acceptance.
        def r2_agrees():
            c2 = last["r2"] = cluster(dep, r2)
            return (set(parts(c2)) == set(listed)
                    and {k: row(c2, topic)[k] for k in want_topic} == want_topic)

        try:
            wait_until(f"{r2} to answer the same figures", r2_agrees, timeout=REPORTED)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{r2}: {last.get('r2')}") from None
    finally:
        dep.close_sessions()
        unregister(dep, topic)


def test_a_stopped_edge_is_stale_and_still_counted(dep):
    run = unique("stats-stop")
    topic = f"{run}-topic"
    register(dep, topic)
    victim = list(dep.edges)[-1]
    r1 = next(iter(dep.routers))
    try:
        carol = f"{run}-carol"
        s = dep.direct_client(victim, carol)
        nid, = publish(dep, r1, {"users": [carol], "event": "stats.stop", "topic": topic,
                                 "payload": {"n": 1}})
        assert s.message().headers["message-id"] == nid
        own: dict = {}
        stopped: dict = {}

        def sums_add_up():
            """The cluster's sums are the edges' own figures (the victim's
            read now or, once it is stopped, its last)."""
            c = cluster(dep, r1)
            for e in dep.edges:
                own[e] = stopped[e] if e in stopped else edge_own(dep, e)
            return (row(c, topic, "last_hour")["delivered"] == 1
                    and c["sessions"]["total"] == sum(o["sessions"]["total"]
                                                      for o in own.values())
                    and c["deliveries"]["total"] == sum(o["deliveries"]["total"]
                                                        for o in own.values()))

        # The victim's report with this delivery has reached the routers.
        wait_until(f"{victim}'s delivery in the cluster's figures", sums_add_up,
                   timeout=REPORTED)
        before = own[victim]
        assert row(before, topic, "last_hour")["delivered"] == 1
        assert before["sessions"]["total"] >= 1

        dep.kill(victim)
        limit = stale_limit_s(dep)

        def stale():
            c = cluster(dep, r1)
            p = parts(c)[("edge", victim)]
            return p["stale"] and (c, p)

        c, p = wait_until(f"{victim}'s part to be stale", stale, timeout=limit + REPORTED)
        assert p["age_ms"] > limit * 1000
        # Its last figures still count: its delivery, its session (gone with
        # it, but not zero), its deliveries (last hour and day: the minute
        # may have passed by now).
        for window in ("last_hour", "last_day"):
            assert {k: row(c, topic, window)[k] for k in ("accepted", "delivered")} == \
                {"accepted": 1, "delivered": 1}, window
        for key, other in parts(c).items():
            if key != ("edge", victim):
                assert other["stale"] is False, other

        stopped[victim] = before
        wait_until(f"the cluster's sums to count {victim}'s last figures", sums_add_up,
                   timeout=REPORTED)
    finally:
        dep.close_sessions()
        dep.up_again()
        dep.wait_ready()
        unregister(dep, topic)


def test_a_dashboard_polling_through_varnish_touches_the_routers_once(dep):
    # A query of this test's own: an object no earlier poll has cached.
    url = f"{dep.varnish_url}/v1/stats"
    params = {"topics_after": unique("varnish")}
    before = dep.varnish_counter("MAIN.backend_req")
    first = requests.get(url, params=params, timeout=TIMEOUT)
    assert first.status_code == 200, first.text
    assert first.headers["X-Cache"] == "MISS"
    assert first.json()["mode"] == "cluster"
    assert first.headers["Cache-Control"].startswith("public, max-age=15")
    second = requests.get(url, params=params, timeout=TIMEOUT)
    assert second.status_code == 200
    assert second.headers["X-Cache"] == "HIT"
    assert second.json() == first.json()
    # A dashboard revalidating gets a 304 from the cache, from the same
    # object (X-Varnish on a hit: this request's id, then the object's).
    third = requests.get(url, params=params, headers={"If-None-Match": first.headers["ETag"]},
                         timeout=TIMEOUT)
    assert third.status_code == 304, third.status_code
    assert third.headers["X-Cache"] == "HIT"
    assert len(second.headers["X-Varnish"].split()) == 2
    assert third.headers["X-Varnish"].split()[1] == second.headers["X-Varnish"].split()[1]
    assert dep.varnish_counter("MAIN.backend_req") - before == 1
