"""The HTTP examples (examples/{python,node,go,php,java}) against a running
standalone gateway: each mints a browser token, publishes to a user,
schedules a delayed notification, reads its status and cancels it. The test
proves each effect on its own: a stomp.py session of the user receives the
publication, a second session connected with the token the example minted
replays it, and the delayed notification's status, read by the test, is
`cancelled`."""

import json
import shutil
import time

import jwt
import pytest
import requests

from conftest import API_KEY, EXAMPLES, REPO, SECRET, TIMEOUT, run_example, unique, watch

VENV_PYTHON = REPO / ".venv" / "bin" / "python"

# How each example is run, as its header comment says (from its directory).
COMMANDS = {
    "python": [str(VENV_PYTHON), "example.py"],
    "node": ["node", "example.mjs"],
    "go": ["go", "run", "main.go"],
    "php": ["php", "example.php"],
    "java": ["java", "Example.java"],
}


@pytest.mark.parametrize("lang", list(COMMANDS))
def test_example_publishes_schedules_reads_and_cancels(gateway, lang):
    cmd = COMMANDS[lang]
    assert shutil.which(cmd[0]), f"{cmd[0]} is not installed (scripts/test.sh installs it)"
    user = unique(f"ex-{lang}")
    # The user's browser, online before the example publishes (with the
    # test's own token): an immediate notification reaches live mailboxes.
    watcher, epoch = watch(gateway, user)

    run = run_example(cmd, {"HERALD_URL": gateway.base, "HERALD_API_KEY": API_KEY,
                            "HERALD_JWT_SECRET": SECRET, "HERALD_USER": user},
                      cwd=EXAMPLES / lang)

    # The token: HS256 under the gateway's secret, for this user, not expired.
    minted = run.one("token")
    assert jwt.get_unverified_header(minted)["alg"] == "HS256"
    claims = jwt.decode(minted, SECRET, algorithms=["HS256"])
    assert claims["sub"] == user
    assert claims["exp"] > time.time() + 60

    # The publication reached the user's browser, as published.
    [welcome] = run.answer("publish", 202)["ids"]
    m = watcher.message()
    assert m.headers["message-id"] == welcome
    assert m.headers["event"] == "account.welcome"
    assert json.loads(m.body) == {"text": "Welcome to Herald"}

    # The gateway accepts the example's token: a session opened with it
    # resumes the user's mailbox from the start and gets the same message.
    browser = gateway.client()
    connected = browser.connect(minted, headers={"last-seq": "0", "epoch": epoch})
    assert connected.headers["user-name"] == user
    browser.subscribe()
    replayed = browser.message()
    assert replayed.headers["message-id"] == welcome
    assert json.loads(replayed.body) == {"text": "Welcome to Herald"}

    # The delayed one: scheduled ten minutes ahead, read back, cancelled.
    scheduled = run.answer("schedule", 202)
    [reminder] = scheduled["ids"]
    [entry] = scheduled["scheduled"]
    assert entry["id"] == reminder and entry["duplicate"] is False
    status = run.answer("status", 200)
    assert status["id"] == reminder and status["state"] == "scheduled"
    assert status["due_at_ms"] - status["accepted_at_ms"] == 600_000
    cancel = run.answer("cancel", 200)
    assert cancel["id"] == reminder and cancel["state"] == "cancelled"

    # Independently of what the example printed: the gateway says cancelled.
    r = requests.get(f"{gateway.base}/v1/notifications/{reminder}",
                     headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled"

    # Nothing else reached either session (the delayed one is not due anyway).
    watcher.assert_silent()
    browser.assert_silent()
    watcher.close()
    browser.close()
