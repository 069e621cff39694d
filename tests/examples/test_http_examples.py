"""The HTTP examples (examples/{python,node,go,php,java}) as docs/examples.md
says to run them, against the quickstart's gateway: the page's recipe blocks
are read and run as written (the `env` block, then each line of the `http`
block, with bash, from a directory that holds the gateway's `herald-data/`
and a link to `examples/`). Each example mints a browser token, publishes
to a user, schedules a delayed notification, reads its status and cancels
it. The test proves each effect on its own: a stomp.py session of the user
receives the publication, a second session connected with the token the
example minted replays it, and the delayed notification's status, read by
the test, is `cancelled`."""

import json
import os
import re
import shutil
import subprocess
import time

import jwt
import pytest
import requests

from conftest import (EXAMPLE_TIMEOUT, EXAMPLES, REPO, TIMEOUT, Gateway, Run, free_port,
                      harness, unique)

DOC = REPO / "docs" / "examples.md"
VENV_BIN = REPO / ".venv" / "bin"


def recipe(name: str) -> str:
    """The shell block of docs/examples.md that follows `<!-- recipe: NAME ...-->`."""
    text = DOC.read_text()
    m = re.search(r"<!-- recipe: " + re.escape(name) + r"\b[^>]*-->\n```sh\n(.*?)```", text, re.S)
    assert m, f"docs/examples.md has no `recipe: {name}` block"
    return m.group(1)


def http_lines() -> dict[str, str]:
    """Each line of the `http` block, by the examples/ directory it enters."""
    lines = {}
    for line in recipe("http").splitlines():
        m = re.match(r"\(cd examples/(\w+) && ", line)
        assert m, f"an `http` line that enters no example: {line!r}"
        lines[m.group(1)] = line
    return lines


class QuickstartGateway(Gateway):
    """The README's quickstart gateway (`cargo run --release -p herald-gateway`:
    no flag, no setting, dev mode) as the debug build, started in `root` so
    that its `herald-data/` is there; only its port is a free one
    (HERALD_LISTEN), and its heart-beats are sent every second so that a
    session waiting while a JVM compiles is kept."""

    def __init__(self, root):
        super().__init__(root)
        self.root = root

    def start(self) -> None:
        command = recipe("gateway").strip()
        assert command == "cargo run --release -p herald-gateway", command
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
        env.setdefault("RUST_LOG", "info")
        for _attempt in range(5):
            self.port = free_port()
            env["HERALD_LISTEN"] = f"127.0.0.1:{self.port}"
            env["HERALD_SESSION__HEARTBEAT_SEND_MS"] = "1000"
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen([str(harness.gateway_bin().resolve())], cwd=self.root,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env)
            log.close()
            if self._wait_healthy():
                return
            if self.proc.poll() == harness.EX_UNAVAILABLE:
                continue
            self.kill()
            pytest.fail(f"the quickstart gateway did not become healthy:\n{self.log()}")
        pytest.fail(f"the quickstart gateway could not bind a port:\n{self.log()}")

    def secret(self) -> str:
        return (self.root / "herald-data" / "dev-jwt-secret").read_text()

    def api_key(self) -> str:
        return (self.root / "herald-data" / "dev-api-key").read_text()


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    root = tmp_path_factory.mktemp("quickstart")
    (root / "examples").symlink_to(EXAMPLES)
    gw = QuickstartGateway(root)
    gw.start()
    yield gw
    gw.stop()


def test_the_recipe_is_the_quickstart_and_every_example():
    assert sorted(http_lines()) == ["go", "java", "node", "php", "python"]
    assert "herald-data/dev-api-key" in recipe("env")
    assert "herald-data/dev-jwt-secret" in recipe("env")


@pytest.mark.parametrize("lang", ["python", "node", "go", "php", "java"])
def test_example_publishes_schedules_reads_and_cancels(quickstart, lang):
    line = http_lines()[lang]
    secret, api_key = quickstart.secret(), quickstart.api_key()
    user = unique(f"ex-{lang}")
    # The user's browser, online before the example publishes: an
    # immediate notification reaches live mailboxes.
    watcher = quickstart.client()
    connected = watcher.connect(jwt.encode({"sub": user, "exp": int(time.time()) + 3600}, secret,
                                           algorithm="HS256"),
                                headers={"heart-beat": "0,1000"})
    epoch = connected.headers["epoch"]
    watcher.subscribe()

    # The documented commands, as written, in a shell of their own.
    script = recipe("env") + line + "\n"
    base = {k: os.environ[k] for k in ("HOME", "LANG", "GOCACHE", "GOPATH", "JAVA_HOME")
            if k in os.environ}
    env = {**base, "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
           "HERALD_URL": quickstart.base, "HERALD_USER": user}
    for tool in ("bash", "pip" if lang == "python" else line.split("&& ")[-1].split()[0]):
        assert shutil.which(tool, path=env["PATH"]), f"{tool} is not installed"
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=quickstart.root, env=env,
                          capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    run = Run(["bash", "-c", script], proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{run}"

    # The token: HS256 under the gateway's secret, for this user, not expired.
    minted = run.one("token")
    assert jwt.get_unverified_header(minted)["alg"] == "HS256"
    claims = jwt.decode(minted, secret, algorithms=["HS256"])
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
    browser = quickstart.client()
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
    r = requests.get(f"{quickstart.base}/v1/notifications/{reminder}",
                     headers={"Authorization": f"Bearer {api_key}"}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "cancelled"

    # Nothing else reached either session (the delayed one is not due anyway).
    watcher.assert_silent()
    browser.assert_silent()
    watcher.close()
    browser.close()


def test_a_gateway_started_with_the_examples_variables_warns_and_runs(quickstart, tmp_path):
    """The recipe's exports in the gateway's own shell: HERALD_API_KEY and
    HERALD_URL are the examples', not settings, so the gateway ignores them
    with a warning instead of refusing to start (exit 78, as it once did)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env.update({"HERALD_API_KEY": "0123456789abcdef", "HERALD_URL": "http://127.0.0.1:8080"})
    out = subprocess.run([str(harness.gateway_bin().resolve()), "--check-config"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out
    text = out.stdout + out.stderr
    assert "HERALD_API_KEY is not a setting of herald-gateway" in text, text
    assert "HERALD_NAMED_API_KEYS" in text, text
    assert "HERALD_URL is not a setting of herald-gateway" in text, text
