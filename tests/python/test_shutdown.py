"""Graceful shutdown as a connected client sees it."""

import requests

from conftest import TIMEOUT, subscribed


def test_sigterm_sends_server_shutting_down_and_exits_0(gateway):
    clients = [subscribed(gateway, user) for user in ("alice", "bob")]
    code = gateway.terminate()
    for c in clients:
        error = c.expect("error")
        assert error.headers["message"] == "server shutting down"
        c.expect("disconnected")
    assert code == 0, gateway.log()


def test_shutdown_with_no_sessions_is_prompt(gateway):
    assert requests.get(f"{gateway.base}/healthz", timeout=TIMEOUT).status_code == 200
    assert gateway.terminate(timeout=5) == 0, gateway.log()
