"""No valid token, no session: each refusal is an ERROR that says why, then close."""

import pytest

from conftest import token


def refused(gateway, passcode, headers=None):
    """CONNECT and return the ERROR frame; fail if CONNECTED ever arrives."""
    c = gateway.client()
    c.open(passcode, headers)
    error = c.expect("error")
    # After ERROR the server closes: the next event is the socket closing,
    # never a CONNECTED.
    c.expect("disconnected")
    c.assert_silent()
    return error


def test_connect_with_a_valid_token_is_accepted(gateway):
    connected = gateway.client().connect(token("alice", client="acme"))
    assert connected.headers["version"] == "1.2"
    assert connected.headers["user-name"] == "alice"
    assert connected.headers["seq"] == "0"
    assert int(connected.headers["epoch"]) >= 0
    assert connected.headers["session"]


def test_missing_token_is_refused(gateway):
    error = refused(gateway, None)
    assert "no token" in error.headers["message"]


def test_forged_token_is_refused(gateway):
    forged = token("alice", secret="not-the-gateway-secret-0123456789abcdef")
    error = refused(gateway, forged)
    assert "signature is invalid" in error.headers["message"]


def test_expired_token_is_refused(gateway):
    # Well past the default 30 s leeway.
    error = refused(gateway, token("alice", exp_in=-3600))
    assert "expired" in error.headers["message"]


def test_token_signed_with_hs384_is_refused(gateway):
    error = refused(gateway, token("alice", algorithm="HS384"))
    message = error.headers["message"]
    assert "algorithm not accepted" in message
    assert "HS256" in message


def test_garbage_token_is_refused(gateway):
    error = refused(gateway, "not-a-jwt")
    assert "malformed" in error.headers["message"]


def test_refusals_are_counted(gateway):
    refused(gateway, None)
    refused(gateway, token("alice", exp_in=-3600))
    text = gateway.metrics()
    assert any(line.startswith("herald_connections_refused_total{") and line.endswith(" 2")
               for line in text.splitlines()), text


@pytest.mark.parametrize("where", ["passcode", "authorization-header", "query"])
def test_token_is_read_from_each_documented_place(gateway, where):
    t = token("carol")
    if where == "passcode":
        c = gateway.client()
        c.open(t)
    elif where == "authorization-header":
        c = gateway.client()
        c.open(None, {"Authorization": f"Bearer {t}"})
    else:
        c = gateway.client(ws_path=f"/ws?token={t}")
        c.open(None)
    assert c.expect("connected").headers["user-name"] == "carol"

