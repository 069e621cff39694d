"""Presence for backends, distributed: the routers answer
GET /v1/presence/users/{uid} and the counts per client company from what
the edges report (the presence reports' detail, kept in the routers'
Redis). A user with sessions on two edges shows both; an edge that stops
stops counting once its liveness key expires (redis.presence_edge_ttl_ms);
any router answers the same.

Sessions are opened on chosen edges directly (not through HAProxy, which
hashes a user to one edge), as a user with two browsers behind two
proxies would have them.
"""

import requests

from herald_dist import RECOVERY, TIMEOUT, unique, wait_until


def ask(dep, router: str, path: str, **params) -> dict:
    r = requests.get(f"http://{dep.routers[router]}{path}", params=params or None,
                     headers={"Authorization": f"Bearer {dep.api_key}"}, timeout=TIMEOUT)
    assert r.status_code == 200, f"{r.status_code} {r.text}"
    return r.json()


def user(dep, uid: str, router: str | None = None) -> dict:
    return ask(dep, router or next(iter(dep.routers)), f"/v1/presence/users/{uid}")


def test_a_user_on_two_edges_shows_both_and_companies_count_them(dep):
    run = unique("presence")
    e1, e2 = list(dep.edges)[:2]
    company = f"{run}-co"
    alice = f"{run}-alice"
    a1 = dep.direct_client(e1, alice, company)
    a2 = dep.direct_client(e2, alice, company)
    a3 = dep.direct_client(e2, alice, company)
    bob = dep.direct_client(e1, f"{run}-bob", company)

    p = wait_until("alice's three sessions reported",
                   lambda: (a := user(dep, alice))["sessions"]["total"] == 3 and a)
    assert p["online"] is True
    assert p["sessions"]["by_transport"] == {"websocket": 3}
    assert [(e["edge"], e["sessions"]) for e in p["edges"]] == [(e1, 1), (e2, 2)]
    assert p["since_ms"] == min(e["since_ms"] for e in p["edges"])
    # Every router answers the same (they share Redis).
    for router in dep.routers:
        assert user(dep, alice, router)["sessions"] == p["sessions"]

    counts = wait_until("the company's counts",
                        lambda: (c := ask(dep, next(iter(dep.routers)),
                                          f"/v1/presence/clients/{company}"))["sessions"] == 4
                        and c)
    assert counts == {"client": company, "users": 2, "sessions": 4}
    page = ask(dep, next(iter(dep.routers)), "/v1/presence/clients", limit=1000)
    assert {"client": company, "users": 2, "sessions": 4} in page["items"]

    # Sessions leave: the counts follow; the last one makes alice offline.
    a3.close()
    wait_until("alice down to two sessions",
               lambda: user(dep, alice)["sessions"]["total"] == 2)
    a2.close()
    p = wait_until("alice only on one edge",
                   lambda: (a := user(dep, alice))["sessions"]["total"] == 1 and a)
    assert [e["edge"] for e in p["edges"]] == [e1]
    a1.close()
    p = wait_until("alice offline", lambda: not (a := user(dep, alice))["online"] and a)
    assert p["edges"] == [] and p["since"] is None
    wait_until("the company down to bob",
               lambda: ask(dep, next(iter(dep.routers)), f"/v1/presence/clients/{company}")
               == {"client": company, "users": 1, "sessions": 1})
    bob.close()


def test_the_users_of_an_edge_that_stops_stop_counting(dep):
    run = unique("presence-stop")
    edges = list(dep.edges)
    victim, other = edges[-1], edges[0]
    company = f"{run}-co"
    carol = f"{run}-carol"
    dep.direct_client(victim, carol, company)
    dep.direct_client(other, carol, company)
    wait_until("carol on two edges",
               lambda: len(user(dep, carol)["edges"]) == 2)
    try:
        dep.kill(victim)
        # Its liveness key expires redis.presence_edge_ttl_ms (20 s in
        # router.toml, 35 s by default) after its last heartbeat: then it
        # counts for nothing.
        p = wait_until("the stopped edge to stop counting",
                       lambda: (a := user(dep, carol))["sessions"]["total"] == 1 and a,
                       timeout=RECOVERY + 10)
        assert [e["edge"] for e in p["edges"]] == [other]
        assert ask(dep, next(iter(dep.routers)), f"/v1/presence/clients/{company}") == \
            {"client": company, "users": 1, "sessions": 1}
    finally:
        dep.close_sessions()
        dep.up_again()
        dep.wait_ready()


def test_bad_input_is_a_422_naming_the_field(dep):
    base = f"http://{dep.routers[next(iter(dep.routers))]}"
    auth = {"Authorization": f"Bearer {dep.api_key}"}
    for path, field in [("/v1/presence/users/" + "u" * 300, "uid"),
                        ("/v1/presence/clients?limit=0", "limit"),
                        ("/v1/presence/clients?after=", "after")]:
        r = requests.get(base + path, headers=auth, timeout=TIMEOUT)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field
    assert requests.get(base + "/v1/presence/clients", timeout=TIMEOUT).status_code == 401
