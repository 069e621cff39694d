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
