"""POST /v1/users/{uid}/disconnect, distributed: a router sends the request
to every edge (the edges exchange, AMQP type `herald.disconnect`), and each
edge ends the user's sessions it holds with an ERROR that gives the reason.
A user with sessions on two edges loses both; another user on the same
edges keeps theirs."""

import requests

from herald_dist import TIMEOUT, unique


def test_a_router_ends_the_user_s_sessions_on_every_edge(dep):
    run = unique("kick")
    e1, e2 = list(dep.edges)[:2]
    alice = f"{run}-alice"
    a1 = dep.direct_client(e1, alice)
    a2 = dep.direct_client(e2, alice)
    bob = dep.direct_client(e1, f"{run}-bob")

    router = next(iter(dep.routers))
    r = requests.post(f"http://{dep.routers[router]}/v1/users/{alice}/disconnect",
                      json={"reason": "account suspended"},
                      headers={"Authorization": f"Bearer {dep.api_key}"}, timeout=TIMEOUT)
    assert r.status_code == 202, r.text
    assert r.json() == {"user": alice}

    for session in (a1, a2):
        e = session.expect("error")
        assert e.headers["message"] == "disconnected by an operator: account suspended", e
        session.expect("disconnected")
    # Bob, on the same edge as one of alice's sessions, still receives.
    dep.publish_http({"users": [bob.uid], "event": "still.here"})
    assert bob.message().headers["event"] == "still.here"
    bob.close()

    # A refused request names the field.
    r = requests.post(f"http://{dep.routers[router]}/v1/users/{alice}/disconnect",
                      json={}, headers={"Authorization": f"Bearer {dep.api_key}"},
                      timeout=TIMEOUT)
    assert r.status_code == 422 and r.json()["error"]["field"] == "reason", r.text
