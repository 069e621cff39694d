"""The AMQP publishers (examples/pika, examples/amqplib) against a router and
an edge on a real RabbitMQ and Redis: each publishes to a user, publishes a
delayed notification, and cancels it (AMQP's `herald.cancel`). The test
proves each effect on its own: a stomp.py session of the user on the edge
receives the publication, the router's status of the delayed one, read by
the test, is `cancelled`, and nothing was dead-lettered."""

import json
import shutil

import pika
import pytest

from conftest import AMQP_URL, EXAMPLES, REPO, run_example, unique, wait_until, watch

VENV_PYTHON = REPO / ".venv" / "bin" / "python"

# How each example is run, as its header comment says (from its directory).
COMMANDS = {
    "pika": [str(VENV_PYTHON), "publish.py"],
    "amqplib": ["node", "publish.mjs"],
}


@pytest.mark.parametrize("lib", list(COMMANDS))
def test_publisher_publishes_schedules_and_cancels(distributed, lib):
    cmd = COMMANDS[lib]
    assert shutil.which(cmd[0]), f"{cmd[0]} is not installed (scripts/test.sh installs it)"
    user = unique(f"ex-{lib}")
    watcher, _ = watch(distributed.edge, user)
    dead_before = distributed.dead_letters()

    run = run_example(cmd, {"HERALD_AMQP_URL": AMQP_URL,
                            "HERALD_AMQP_EXCHANGE": distributed.exchange,
                            "HERALD_URL": distributed.router_url,
                            "HERALD_API_KEY": distributed.api_key,
                            "HERALD_USER": user},
                      cwd=EXAMPLES / lib)

    # Through the router and the edge to the user's browser.
    welcome = run.one("publish").removeprefix("confirmed ")
    m = watcher.message()
    assert m.headers["message-id"] == welcome
    assert m.headers["event"] == "account.welcome"
    assert json.loads(m.body) == {"text": "Welcome to Herald"}

    # The delayed one was stored ten minutes ahead, then cancelled.
    reminder = run.one("schedule").removeprefix("confirmed ")
    assert run.one("cancel") == f"confirmed {reminder}"
    printed = [json.loads(line.partition(" ")[2]) for line in run.lines("status")]
    assert [s["state"] for s in printed] == ["scheduled", "cancelled"], run
    status = distributed.status(reminder)
    assert status["state"] == "cancelled"
    assert status["due_at_ms"] - status["accepted_at_ms"] == 600_000

    # Every publication was valid: none reached the dead letters.
    assert distributed.dead_letters() == dead_before
    watcher.assert_silent()
    watcher.close()


def test_a_cancel_published_right_behind_its_notification_cancels_it(distributed):
    """What docs/amqp.md's snippets do: publish a delayed notification and,
    on the same channel, its cancel at once (both confirmed by the broker)."""
    ids = [unique("behind") for _ in range(200)]
    dead_before = distributed.dead_letters()
    with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for nid in ids:
            ch.basic_publish(distributed.exchange, "later", b"{}", pika.BasicProperties(
                message_id=nid, content_type="application/json", delivery_mode=2,
                headers={"users": [unique("behind-u")], "event": "x.later", "delay-ms": 600_000}))
            ch.basic_publish(distributed.exchange, "cancel", b"", pika.BasicProperties(
                message_id=nid, type="herald.cancel", delivery_mode=2))

    # Each cancel is applied or dead-lettered; wait until all are one or the other.
    def settled():
        states = [distributed.status(nid)["state"] for nid in ids]
        refused = distributed.dead_letters() - dead_before
        return states if states.count("cancelled") + refused == len(ids) else None
    states = wait_until("every cancel to be applied or dead-lettered", settled)
    assert states.count("cancelled") == len(ids), (
        f"{states.count('scheduled')} of {len(ids)} cancels came before their notification "
        "and were dead-lettered; those notifications stay scheduled")
