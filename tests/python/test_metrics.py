"""GET /metrics counts what the clients above just did, under the documented names."""

import time

import requests

from conftest import TIMEOUT, subscribed, token


def series(gateway) -> dict:
    """{'name{labels}': value} from the Prometheus/OpenMetrics text."""
    out = {}
    for line in gateway.metrics().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_count_sessions_deliveries_and_refusals(gateway):
    alice = subscribed(gateway, "alice")
    gateway.publish_one(users=["alice"], event="e", payload={})
    alice.message()
    refused = gateway.client()
    refused.open(token("bob", exp_in=-3600))
    refused.expect("error")
    r = requests.post(f"{gateway.base}/v1/notifications", json={"users": ["a"], "event": "e"},
                      headers={"Authorization": "Bearer wrong"}, timeout=TIMEOUT)
    assert r.status_code == 401
    m = series(gateway)
    assert m['herald_sessions{transport="websocket"}'] == 1
    assert m["herald_mailboxes"] == 1
    assert m["herald_deliveries_total"] == 1
    assert m['herald_connections_refused_total{reason="auth"}'] == 1
    assert m['herald_protocol_errors_total{kind="refused"}'] == 1
    assert m['herald_notifications_accepted_total{source="http"}'] == 1
    assert m['herald_notifications_rejected_total{source="http",reason="unauthorized"}'] == 1
    alice.close()
    # The server notices the close a moment after the client does: poll.
    deadline = time.monotonic() + TIMEOUT
    while series(gateway)['herald_sessions{transport="websocket"}'] != 0:
        assert time.monotonic() < deadline, "session gauge never went back to 0"
        time.sleep(0.02)


def until(gateway, condition, what: str) -> dict:
    """Scrape until `condition(series)` holds; the series that satisfied it."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        m = series(gateway)
        if condition(m):
            return m
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)  # polling interval, bounded by the deadline


LATENCY = "herald_delivery_latency_seconds"
WS = '{transport="websocket"}'


def bucket(m: dict, le: str) -> float:
    return m[f'{LATENCY}_bucket{{le="{le}",transport="websocket"}}']


def test_build_info_names_the_version_and_commit(gateway):
    info = [k for k in series(gateway) if k.startswith("herald_build_info{")]
    assert len(info) == 1, info
    assert 'version="' in info[0] and 'commit="' in info[0], info
    assert 'commit=""' not in info[0], info


def test_a_standalone_gateway_has_no_root_link_to_lose(gateway):
    m = series(gateway)
    assert m["herald_root_links_configured"] == 0
    assert m["herald_root_links"] == 0


def test_bytes_and_latency_move_with_each_delivered_frame(gateway):
    alice = subscribed(gateway, "alice")
    before = series(gateway)
    assert before[f"herald_bytes_received_total{WS}"] > 0, "CONNECT and SUBSCRIBE were read"
    payload = {"text": "x" * 1000}
    for i in range(3):
        gateway.publish_one(users=["alice"], event="e", payload=payload)
    frames = [alice.message() for _ in range(3)]
    # One latency observation per MESSAGE frame handed to the socket.
    after = until(gateway,
                  lambda m: m[f"{LATENCY}_count{WS}"] >= before[f"{LATENCY}_count{WS}"] + 3,
                  "three latency observations")
    assert after[f"{LATENCY}_count{WS}"] == before[f"{LATENCY}_count{WS}"] + 3
    assert after[f"{LATENCY}_sum{WS}"] > before[f"{LATENCY}_sum{WS}"]
    # Each was measured from its HTTP acceptance: well under 10 s here.
    assert bucket(after, "10.0") - bucket(before, "10.0") == 3
    assert bucket(after, "+Inf") == after[f"{LATENCY}_count{WS}"]
    # Bytes sent grew by at least the frames: command, headers, body, NUL.
    least = 0
    for f in frames:
        head = "MESSAGE\n" + "".join(f"{k}:{v}\n" for k, v in f.headers.items()) + "\n"
        least += len(head.encode()) + len(f.body.encode()) + 1
    grown = after[f"herald_bytes_sent_total{WS}"] - before[f"herald_bytes_sent_total{WS}"]
    assert grown >= least, (grown, least)
    # Another transport saw none of it.
    assert after['herald_bytes_sent_total{transport="xhr_streaming"}'] == \
        before['herald_bytes_sent_total{transport="xhr_streaming"}']


def test_a_delayed_notification_is_measured_from_its_firing(gateway):
    alice = subscribed(gateway, "alice")
    before = series(gateway)
    gateway.publish_one(users=["alice"], event="later", payload={}, delay_ms=3000)
    assert alice.message(timeout=TIMEOUT + 3).headers["event"] == "later"
    after = until(gateway,
                  lambda m: m[f"{LATENCY}_count{WS}"] == before[f"{LATENCY}_count{WS}"] + 1,
                  "one latency observation")
    # Accepted 3 s before it was written, fired just before: under 2.5 s.
    assert bucket(after, "2.5") - bucket(before, "2.5") == 1


def test_process_metrics_are_plausible(gateway):
    held = [subscribed(gateway, f"user-{i}") for i in range(8)]
    m = series(gateway)
    assert m['herald_sessions{transport="websocket"}'] == len(held)
    assert m["process_resident_memory_bytes"] > 1_000_000
    assert m["process_virtual_memory_bytes"] >= m["process_resident_memory_bytes"]
    assert m["process_open_fds"] >= len(held), "a socket per session"
    assert m["process_max_fds"] >= m["process_open_fds"]
    assert m["process_threads"] >= 1
    assert m["process_cpu_seconds_total"] > 0
    started = m["process_start_time_seconds"]
    assert time.time() - 600 < started <= time.time() + 1, started
