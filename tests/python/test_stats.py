"""Per-topic statistics and GET /v1/stats on the standalone gateway
(docs/stats.md), with its embedded delayed store.

A topic registered with `PUT /v1/topics/{name}` gets a row of its own;
no topic, or a topic not registered, counts under `other`. Immediate and
delayed notifications (one of each cancelled, a `when_online` one held for
an offline user) reach a stomp.py session; the counts are checked in every
window and in Prometheus. Bad paging is a 422 naming the field; the cache
headers let a poller revalidate (304).

The standalone gateway has no Redis store (`[redis]` is the router's; the
gateway keeps delayed notifications in DATA_DIR/delayed), so there is no
Redis variant here: the routers' figures over Redis are
tests/distributed/test_stats.py's.
"""

from __future__ import annotations

import re
import time

import requests

from conftest import API_KEY, TIMEOUT, subscribed

AUTH = {"Authorization": f"Bearer {API_KEY}"}
WINDOWS = ("last_minute", "last_hour", "last_day")
EVENTS = ("accepted", "delivered", "callbacks_succeeded", "callbacks_failed",
          "callbacks_retried", "callbacks_dead", "callbacks_declined", "held", "cancelled",
          "expired")
CACHE_CONTROL = "public, max-age=15, stale-while-revalidate=15, stale-if-error=600"


def wait_until(what: str, predicate, timeout: float = TIMEOUT):
    """Poll `predicate` until it returns something truthy (returned)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)  # polling interval, bounded by the deadline


def put_topic(gw, name: str) -> None:
    r = requests.put(f"{gw.base}/v1/topics/{name}", json={}, headers=AUTH, timeout=TIMEOUT)
    assert r.status_code == 201, f"{r.status_code} {r.text}"


def stats(gw, **params) -> requests.Response:
    return requests.get(f"{gw.base}/v1/stats", params=params, timeout=TIMEOUT)


def topics(gw) -> dict[str, dict]:
    """Every topic row (following `next`): name -> the row."""
    out: dict[str, dict] = {}
    params: dict = {"topics_limit": 500}
    while True:
        r = stats(gw, **params)
        assert r.status_code == 200, r.text
        page = r.json()["topics"]
        out.update({item["name"]: item for item in page["items"]})
        if page["next"] is None:
            return out
        params["topics_after"] = page["next"]


def counts(row: dict | None, window: str = "last_minute") -> dict[str, int]:
    if row is None:
        return {e: 0 for e in EVENTS}
    return {e: row[window][e] for e in EVENTS}


def status(gw, nid: str) -> dict:
    r = requests.get(f"{gw.base}/v1/notifications/{nid}", headers=AUTH, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


def metric(gw, name: str, **labels) -> float:
    """The sample of `name` whose labels include `labels`."""
    for line in gw.metrics().splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{([^}}]*)\}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return 0.0


def test_each_registered_topic_counts_on_its_own_and_the_rest_under_other(gateway):
    gw = gateway
    put_topic(gw, "billing")
    alice = subscribed(gw, "alice")

    def one(**fields) -> str:
        return gw.publish_one(users=fields.pop("users", ["alice"]), event="stats.test",
                              payload={"n": 1}, **fields)

    received = [
        one(topic="billing"),                     # immediate, registered topic
        one(),                                    # immediate, no topic
        one(topic="not-registered"),              # immediate, unknown topic: other
        one(topic="billing", delay_ms=150),       # delayed, fired
        one(delay_ms=150),
    ]
    cancelled = [one(topic="billing", delay_ms=600_000), one(delay_ms=600_000)]
    for nid in cancelled:
        r = requests.delete(f"{gw.base}/v1/notifications/{nid}", headers=AUTH, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "cancelled"
    # when_online for users with no session: held.
    held = [one(users=["bob"], topic="billing", when_online=True),
            one(users=["carol"], when_online=True)]

    got = [alice.message().headers["message-id"] for _ in received]
    assert sorted(got) == sorted(received)
    for nid in held:
        wait_until(f"{nid} to be held", lambda: status(gw, nid)["state"] == "held")

    want = {
        "billing": dict.fromkeys(EVENTS, 0) | {"accepted": 4, "delivered": 2, "cancelled": 1,
                                               "held": 1},
        "other": dict.fromkeys(EVENTS, 0) | {"accepted": 5, "delivered": 3, "cancelled": 1,
                                             "held": 1},
    }
    last: dict = {}

    def counted():
        rows = last["rows"] = topics(gw)
        return all(counts(rows.get(t)) == w for t, w in want.items())

    try:
        wait_until("every event counted", counted)
    except AssertionError as e:
        raise AssertionError(f"{e}: {last['rows']}") from None
    rows = last["rows"]
    assert set(rows) == {"billing", "other"}, "an unregistered topic gets no row"
    for name, w in want.items():
        for window in WINDOWS:
            assert counts(rows[name], window) == w, (name, window)
    # The delayed one fired: its lateness is known (p99 is at most the max).
    late = rows["billing"]["last_minute"]["lateness_ms"]
    assert late["max"] is not None and late["p50"] <= late["p99"] <= late["max"], late
    assert 0 <= late["max"] < 10_000

    body = stats(gw).json()
    assert body["mode"] == "standalone"
    assert "parts" not in body
    assert body["sessions"]["total"] == 1
    assert body["sessions"]["by_transport"]["websocket"] == 1
    assert body["deliveries"]["total"] == 5
    assert body["deliveries"]["per_second"] == 5 / 60
    assert body["delayed"]["pending"] == sum(body["delayed"]["due"].values())
    assert body["callbacks"] == {"succeeded": 0, "failed": 0, "retried": 0, "dead": 0,
                                 "declined": 0}
    # The same counts in Prometheus, labelled by topic.
    for name, w in want.items():
        for event in ("accepted", "delivered", "cancelled", "held"):
            assert metric(gw, "herald_topic_events_total", topic=name, event=event) == w[event], \
                (name, event)
    assert metric(gw, "herald_topic_events_total", topic="not-registered") == 0


def test_paging_bad_parameters_and_cache_validators(gateway):
    gw = gateway
    # A quiet gateway: its figures do not change between two requests.
    first = stats(gw)
    assert first.status_code == 200
    assert first.headers["Cache-Control"] == CACHE_CONTROL
    assert "Accept-Encoding" in first.headers["Vary"]
    assert first.headers["Last-Modified"]
    etag = first.headers["ETag"]
    assert re.fullmatch(r'"[0-9a-f]+"', etag), etag
    again = stats(gw)
    assert again.headers["ETag"] == etag, "unchanged figures, same tag"
    r = requests.get(f"{gw.base}/v1/stats", headers={"If-None-Match": etag}, timeout=TIMEOUT)
    assert r.status_code == 304
    assert r.content == b""
    assert r.headers["ETag"] == etag
    assert r.headers["Cache-Control"] == CACHE_CONTROL
    r = requests.get(f"{gw.base}/v1/stats", headers={"If-None-Match": '"something-else"'},
                     timeout=TIMEOUT)
    assert r.status_code == 200

    # Paging: sorted by name, `other` among them, `next` until the last page.
    for name in ("alpha", "beta"):
        put_topic(gw, name)
        gw.publish_one(users=["nobody"], event="stats.page", topic=name, payload={})
    gw.publish_one(users=["nobody"], event="stats.page", payload={})
    wait_until("three rows", lambda: set(topics(gw)) == {"alpha", "beta", "other"})
    names, after = [], None
    for _ in range(4):
        params = {"topics_limit": 1} | ({"topics_after": after} if after else {})
        page = stats(gw, **params).json()["topics"]
        names += [i["name"] for i in page["items"]]
        after = page["next"]
        if after is None:
            break
    assert names == ["alpha", "beta", "other"]
    # The figures changed: another tag, and the old one no longer matches.
    r = requests.get(f"{gw.base}/v1/stats", headers={"If-None-Match": etag}, timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.headers["ETag"] != etag

    refused = metric(gw, "herald_stats_refused_total")
    bad = [("topics_limit=0", "topics_limit"), ("topics_limit=abc", "topics_limit"),
           ("topics_limit=501", "topics_limit"), ("topics_limit=", "topics_limit"),
           ("topics_after=", "topics_after"), (f"topics_after={'x' * 201}", "topics_after")]
    for query, field in bad:
        r = requests.get(f"{gw.base}/v1/stats?{query}", timeout=TIMEOUT)
        assert r.status_code == 422, (query, r.status_code, r.text)
        error = r.json()["error"]
        assert error["code"] == "invalid_field", (query, error)
        assert error["field"] == field, (query, error)
    assert metric(gw, "herald_stats_refused_total") - refused == len(bad)
    # No API key needed; a wrong one is ignored (docs/stats.md#access).
    r = requests.get(f"{gw.base}/v1/stats", headers={"Authorization": "Bearer wrong"},
                     timeout=TIMEOUT)
    assert r.status_code == 200
