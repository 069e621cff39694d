"""Roots are independent brokers: one down does not stop the others."""

import requests

from herald_dist import (RECOVERY, TIMEOUT, amqp_publish, confirmed_channel, ids_of, unique,
                         wait_until)


def status(addr: str, path: str) -> int:
    return requests.get(f"http://{addr}{path}", timeout=TIMEOUT).status_code


def root_links(dep) -> dict[str, float]:
    return {e: dep.metric(addr, "herald_root_links") for e, addr in dep.edges.items()}


def test_with_root2_down_publications_through_root1_keep_flowing(dep):
    users = dep.clients_on_distinct_edges(unique("indep-u"), [{}, {}, {}])
    uids = [x.uid for x in users]
    stopped = False
    try:
        # The whole node, as deploy/down would stop it (the Erlang VM exits).
        stopped = True
        dep.rabbitmqctl("root2", "stop")
        wait_until("root2 to refuse AMQP connections", lambda: dep.amqp_refused("root2"))
        # root2's router says so (not ready, still alive); root1's does not care.
        wait_until("router2 /readyz to answer 503",
                   lambda: status(dep.routers["router2"], "/readyz") == 503)
        reasons = requests.get(f"http://{dep.routers['router2']}/readyz",
                               timeout=TIMEOUT).json()["reasons"]
        assert "broker disconnected" in reasons
        assert status(dep.routers["router2"], "/healthz") == 200
        assert status(dep.routers["router1"], "/readyz") == 200
        # Every edge still has its root1 link, and only that one.
        wait_until("every edge to report one root link",
                   lambda: set(root_links(dep).values()) == {1.0})

        run = unique("r1")
        sent = []
        with dep.amqp("root1") as conn:
            ch = confirmed_channel(conn)
            for i in range(5):
                mid = f"{run}-{i}"
                amqp_publish(ch, f'{{"i":{i}}}', {"users": uids, "event": "indep.user"},
                             message_id=mid)
                sent.append(mid)
            mid = f"{run}-global"
            amqp_publish(ch, "{}", {"scope": "global", "event": "indep.global"}, message_id=mid)
            sent.append(mid)
        for x in users:
            assert ids_of(x.messages(len(sent))) == sent, f"{x.uid} on {x.edge}"

        # The HTTP API too, once HAProxy has taken router2 out of rotation
        # (its health check follows router2's /readyz).
        wait_until("HAProxy to mark router2 DOWN",
                   lambda: dep.haproxy_servers()[("be_publish", "router2")].startswith("DOWN"),
                   RECOVERY)
        ids = []
        for i in range(4):
            ids += dep.publish_http({"users": uids, "event": "indep.http", "payload": i})["ids"]
        for x in users:
            assert ids_of(x.messages(len(ids))) == ids, f"{x.uid} on {x.edge}"
            x.assert_silent()
    finally:
        if stopped:
            # deploy/up again starts only what is not running: root2's node.
            out = dep.up_again()
            assert "started root2" in out and "root1 already running" in out, out
    # root2 back: its router and every edge consume from it again.
    dep.wait_ready(RECOVERY)
    wait_until("every edge to report two root links",
               lambda: set(root_links(dep).values()) == {2.0})
