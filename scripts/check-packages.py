#!/usr/bin/env python3
"""Check what scripts/package.sh put in dist/, as an operator would meet it.

    scripts/check-packages.py [--dist DIR]

- `sha256sum -c SHA256SUMS` over the .debs and the release tarballs, and
  each tarball holds its binary, unit, configurations, LICENSE and README;
- each .deb (herald-gateway, herald-router) is extracted with `dpkg-deb -x`
  (and its control files with `dpkg-deb -e`) into a temporary directory:
  the binary, its unit (ExecStart pointing at it), /etc/herald conffiles
  (the env file mode 0600), man pages, copyright, the postinst making the
  user `herald`;
- the extracted binaries run from that tree: `--version` names the commit
  of HEAD; the shipped env file as it is (placeholders) is refused by
  `--check-config` (exit 78); `--print-config` shows no secret given in the
  environment; each is started with the shipped /etc/herald/*.toml on a
  free 127.0.0.1 port, secrets and per-host settings in the environment as
  the unit gives them, `/healthz` polled until 200 (the router's `/readyz`
  too: it reached RabbitMQ on 127.0.0.1:5672 and Redis on 127.0.0.1:6379,
  under exchange, queue and key names of its own, deleted at the end), then
  stopped with SIGTERM and must exit 0;
- herald-mint-token (in the gateway's package) signs a token;
- the units are Type=notify and each binary, started as above with
  $NOTIFY_SOCKET naming a datagram socket of this script (as systemd does),
  sends READY=1 (its /readyz answers 200 then) and, on SIGTERM, STOPPING=1;
  `systemd-analyze verify` passes the units (herald-gateway@.service
  through an instance) when systemd-analyze is installed, the binaries'
  paths pointed at the extracted tree;
- lintian on both .debs, failing on errors and warnings.

Prints one line per check, then "N passed, M failed"; exits 1 on a failure.
Needs pika (the repository's .venv has it) for the cleanup of the broker.
"""

import argparse
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AMQP_URL = os.environ.get("HERALD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
REDIS_URL = os.environ.get("HERALD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {name}")
    else:
        failed += 1
        print(f"FAIL: {name}{': ' + detail if detail else ''}")
    sys.stdout.flush()
    return ok


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def head_commit():
    return run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"]).stdout.strip()


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def env_file(path):
    """KEY=VALUE lines of a systemd EnvironmentFile (comments and blanks skipped)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def base_env():
    """A clean environment: nothing of the caller's HERALD_* leaks in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")} | {"RUST_LOG": "info"}


def notify_socket(workdir):
    """A datagram socket standing in for systemd's $NOTIFY_SOCKET."""
    path = workdir / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    return sock, str(path)


def until_state(sock, line, timeout):
    """Datagrams until one with `line` (e.g. READY=1); None after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            state = sock.recv(4096).decode()
        except socket.timeout:
            return None
        if line in state.splitlines():
            return state


def serve(name, cmd, env, ready_paths, port, workdir):
    """Start with $NOTIFY_SOCKET set, expect READY=1, poll each path until
    200, SIGTERM, expect STOPPING=1 and exit 0."""
    log = open(workdir / f"{name}.log", "w+")
    sock, path = notify_socket(workdir)
    proc = subprocess.Popen(cmd, env=env | {"NOTIFY_SOCKET": path}, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        ready = until_state(sock, "READY=1", START_TIMEOUT)
        check(f"{name}: sd_notify READY=1 on $NOTIFY_SOCKET", ready is not None,
              f"exit {proc.poll()}; log:\n{tail(log)}")
        for path in ready_paths:
            url = f"http://127.0.0.1:{port}{path}"
            deadline = time.monotonic() + START_TIMEOUT
            status = None
            while time.monotonic() < deadline and proc.poll() is None:
                status = http_status(url)
                if status == 200:
                    break
                time.sleep(0.1)
            if not check(f"{name}: GET {path} answers 200", status == 200,
                         f"last status {status}, exit {proc.poll()}; log:\n{tail(log)}"):
                return
        proc.send_signal(signal.SIGTERM)
        stopping = until_state(sock, "STOPPING=1", STOP_TIMEOUT)
        check(f"{name}: sd_notify STOPPING=1 at SIGTERM", stopping is not None)
        try:
            code = proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        check(f"{name}: SIGTERM, clean exit", code == 0, f"exit {code}; log:\n{tail(log)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        sock.close()


def tail(f, lines=20):
    f.flush()
    f.seek(0)
    return "".join(f.readlines()[-lines:])


def extract(deb, workdir):
    tree = workdir / "tree"
    control = workdir / "control"
    r = run(["dpkg-deb", "-x", str(deb), str(tree)])
    check(f"{deb.name}: dpkg-deb -x", r.returncode == 0, r.stderr)
    r = run(["dpkg-deb", "-e", str(deb), str(control)])
    check(f"{deb.name}: dpkg-deb -e", r.returncode == 0, r.stderr)
    return tree, control


def unit_path(tree, name):
    for d in ("usr/lib/systemd/system", "lib/systemd/system"):
        p = tree / d / f"{name}.service"
        if p.exists():
            return p
    return None


def check_layout(name, tree, control, conf, extra_bins=()):
    binary = tree / "usr/bin" / name
    check(f"{name}: /usr/bin/{name} is executable", os.access(binary, os.X_OK))
    for b in extra_bins:
        check(f"{name}: /usr/bin/{b} is executable", os.access(tree / "usr/bin" / b, os.X_OK))
    unit = unit_path(tree, name)
    check(f"{name}: systemd unit {name}.service", unit is not None)
    if unit:
        text = unit.read_text()
        check(f"{name}: the unit runs /usr/bin/{name} as the user herald",
              f"ExecStart=/usr/bin/{name} " in text and "User=herald" in text
              and f"/etc/herald/{conf}.env" in text)
        check(f"{name}: the unit is Type=notify", "\nType=notify\n" in text)
    toml = tree / "etc/herald" / f"{conf}.toml"
    envf = tree / "etc/herald" / f"{conf}.env"
    check(f"{name}: /etc/herald/{conf}.toml", toml.is_file())
    check(f"{name}: /etc/herald/{conf}.env is mode 0600",
          envf.is_file() and (envf.stat().st_mode & 0o777) == 0o600)
    conffiles = (control / "conffiles").read_text().split() if (control / "conffiles").exists() else []
    check(f"{name}: both are conffiles",
          f"/etc/herald/{conf}.toml" in conffiles and f"/etc/herald/{conf}.env" in conffiles,
          f"conffiles: {conffiles}")
    check(f"{name}: man page", (tree / f"usr/share/man/man1/{name}.1.gz").is_file())
    doc = tree / "usr/share/doc" / name
    check(f"{name}: copyright, changelog, examples, configuration.md",
          (doc / "copyright").is_file() and (doc / "changelog.Debian.gz").is_file()
          and any((doc / "examples").glob("*.toml")) and (doc / "configuration.md").is_file())
    postinst = (control / "postinst").read_text() if (control / "postinst").exists() else ""
    check(f"{name}: postinst makes the system user herald",
          "adduser --system" in postinst and "#DEBHELPER#" not in postinst)
    return binary, toml, envf


def unit_dir(tree):
    for d in ("usr/lib/systemd/system", "lib/systemd/system"):
        if (tree / d).is_dir():
            return tree / d
    return None


def check_template(tree):
    """herald-gateway@.service: one instance per edge, each with its files."""
    d = unit_dir(tree)
    unit = d / "herald-gateway@.service" if d else None
    if not check("herald-gateway: template unit herald-gateway@.service",
                 unit is not None and unit.is_file()):
        return
    text = unit.read_text()
    check("herald-gateway@.service: Type=notify; /etc/herald/gateway-%i.{toml,env}, "
          "its own state directory and edge id",
          "\nType=notify\n" in text and "--config /etc/herald/gateway-%i.toml" in text
          and "EnvironmentFile=/etc/herald/gateway-%i.env" in text
          and "StateDirectory=herald/%i" in text and "--data-dir %S/herald/%i" in text
          and "Environment=HERALD_EDGE_ID=%i" in text)


def verify_units(tree, workdir, units):
    """`systemd-analyze verify` on `units` (file names; `x@y.service` is an
    instance of the template x@.service), their /usr/bin paths pointed at
    the extracted tree (verify checks that ExecStart's program exists)."""
    if shutil.which("systemd-analyze") is None:
        print("skip: systemd-analyze verify (systemd-analyze is not installed)")
        return
    src = unit_dir(tree)
    out = workdir / "units"
    out.mkdir()
    for f in src.glob("*.service"):
        text = f.read_text().replace("/usr/bin/herald-", f"{tree}/usr/bin/herald-")
        (out / f.name).write_text(text)
    r = run(["systemd-analyze", "verify", "--man=no", *[str(out / u) for u in units]])
    said = (r.stdout + r.stderr).strip()
    check(f"systemd-analyze verify {' '.join(units)}", r.returncode == 0 and not said, said)


def check_version(name, binary, commit):
    r = run([str(binary), "--version"])
    check(f"{name}: --version names the commit of HEAD ({commit})",
          r.returncode == 0 and commit in r.stdout, (r.stdout + r.stderr).strip())


def check_config_refuses_placeholders(name, binary, toml, envf, workdir):
    env = base_env() | env_file(envf)
    r = run([str(binary), "--config", str(toml), "--check-config"], env=env, cwd=workdir)
    check(f"{name}: the shipped env file (placeholders) is refused, exit 78",
          r.returncode == 78, f"exit {r.returncode}: {r.stdout}{r.stderr}")


def check_print_config(name, binary, toml, env, secret_values, workdir):
    r = run([str(binary), "--config", str(toml), "--print-config"], env=env, cwd=workdir)
    shown = [s for s in secret_values if s in r.stdout]
    check(f"{name}: --print-config exits 0, secrets from the environment redacted",
          r.returncode == 0 and not shown and "<redacted>" in r.stdout,
          f"exit {r.returncode}, shown {shown}: {r.stderr}")


def gateway(deb, commit, root):
    workdir = root / "gateway"
    workdir.mkdir()
    tree, control = extract(deb, workdir)
    binary, toml, envf = check_layout("herald-gateway", tree, control, "gateway",
                                      extra_bins=("herald-mint-token",))
    check_template(tree)
    verify_units(tree, workdir, ["herald-gateway.service", "herald-gateway@edge-07.service"])
    check_version("herald-gateway", binary, commit)
    check_config_refuses_placeholders("herald-gateway", binary, toml, envf, workdir)
    jwt = secrets.token_hex(24)
    api_key = secrets.token_hex(16)
    port = free_port()
    env = base_env() | {"HERALD_AUTH__JWT_SECRET": jwt, "HERALD_API_KEYS": api_key}
    check_print_config("herald-gateway", binary, toml, env, [jwt, api_key], workdir)
    r = run([str(tree / "usr/bin/herald-mint-token"), "--sub", "alice", "--ttl", "60"],
            env=base_env() | {"HERALD_JWT_SECRET": jwt})
    parts = r.stdout.strip().split(".")
    header = {}
    if len(parts) == 3:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    check("herald-mint-token: signs an HS256 token", r.returncode == 0 and header.get("alg") == "HS256",
          r.stderr)
    cmd = [str(binary), "--config", str(toml), "--listen", f"127.0.0.1:{port}",
           "--data-dir", str(workdir / "data")]
    serve("herald-gateway", cmd, env, ["/healthz", "/readyz"], port, workdir)


def router(deb, commit, root):
    workdir = root / "router"
    workdir.mkdir()
    tree, control = extract(deb, workdir)
    binary, toml, envf = check_layout("herald-router", tree, control, "router")
    verify_units(tree, workdir, ["herald-router.service"])
    check_version("herald-router", binary, commit)
    check_config_refuses_placeholders("herald-router", binary, toml, envf, workdir)
    suffix = f".pkgcheck-{secrets.token_hex(6)}"
    names = {
        "EXCHANGE": f"herald{suffix}",
        "QUEUE": f"herald.publications{suffix}",
        "DEAD_EXCHANGE": f"herald.dead{suffix}",
        "DEAD_QUEUE": f"herald.dead{suffix}",
        "EDGES_EXCHANGE": f"herald.edges{suffix}",
        "PRESENCE_EXCHANGE": f"herald.presence{suffix}",
        "PRESENCE_QUEUE": f"herald.presence{suffix}",
    }
    prefix = f"herald-pkgcheck-{secrets.token_hex(6)}"
    api_key = secrets.token_hex(16)
    port = free_port()
    # Everything from the environment, as the unit's EnvironmentFile would
    # give it: the listen address too (HERALD_ROUTER_LISTEN).
    env = base_env() | {
        "HERALD_ROUTER_LISTEN": f"127.0.0.1:{port}",
        "HERALD_ROUTER_API_KEYS": api_key,
        "HERALD_ROUTER_AMQP__URL": AMQP_URL,
        "HERALD_ROUTER_REDIS__URL": REDIS_URL,
        "HERALD_ROUTER_REDIS__PREFIX": prefix,
    } | {f"HERALD_ROUTER_AMQP__TOPOLOGY__{k}": v for k, v in names.items()}
    check_print_config("herald-router", binary, toml, env, [api_key], workdir)
    try:
        serve("herald-router", [str(binary), "--config", str(toml)], env,
              ["/healthz", "/readyz"], port, workdir)
    finally:
        cleanup_broker(names)
        cleanup_redis(prefix)


def cleanup_broker(names):
    import pika
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    ch = conn.channel()
    for q in {names["QUEUE"], names["DEAD_QUEUE"], names["PRESENCE_QUEUE"]}:
        ch.queue_delete(q)
    for x in {names["EXCHANGE"], names["DEAD_EXCHANGE"], names["EDGES_EXCHANGE"],
              names["PRESENCE_EXCHANGE"]}:
        ch.exchange_delete(x)
    conn.close()


def cleanup_redis(prefix):
    host_port = REDIS_URL.split("://", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    keys = run(["redis-cli", "-h", host, "-p", port, "--scan", "--pattern", f"{prefix}*"]).stdout.split()
    if keys:
        run(["redis-cli", "-h", host, "-p", port, "DEL", *keys])


def tarballs(dist):
    r = run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist)
    check("SHA256SUMS: sha256sum -c", r.returncode == 0, r.stdout + r.stderr)
    listed = (dist / "SHA256SUMS").read_text() if (dist / "SHA256SUMS").exists() else ""
    for name in ("herald-gateway", "herald-router"):
        found = sorted(dist.glob(f"{name}-*-linux-*.tar.gz"))
        if not check(f"{name}: one release tarball, in SHA256SUMS",
                     len(found) == 1 and found[0].name in listed, str(found)):
            continue
        members = run(["tar", "-tzf", str(found[0])]).stdout.split()
        want = [f"bin/{name}", f"systemd/{name}.service", "LICENSE", "README.md", "VERSION",
                "docs/configuration.md"]
        if name == "herald-gateway":
            want.append("systemd/herald-gateway@.service")
        missing = [w for w in want if not any(m.endswith("/" + w) for m in members)]
        check(f"{name}: the tarball holds its binary, unit, configurations, LICENSE, README",
              not missing and any("/etc/" in m and m.endswith(".toml") for m in members),
              f"missing {missing}")


def lintian(debs):
    for deb in debs:
        r = run(["lintian", "--fail-on", "error,warning", "--display-info", str(deb)])
        out = (r.stdout + r.stderr).strip()
        if out:
            print(out)
        check(f"{deb.name}: lintian (no errors, no warnings)", r.returncode == 0, f"exit {r.returncode}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dist", default=str(REPO / "dist"))
    args = ap.parse_args()
    dist = Path(args.dist).resolve()
    commit = head_commit()
    started = time.monotonic()
    debs = {}
    for name in ("herald-gateway", "herald-router"):
        found = sorted(dist.glob(f"{name}_*.deb"))
        if check(f"{name}: one .deb in {dist}", len(found) == 1, str(found)):
            debs[name] = found[0]
    tarballs(dist)
    with tempfile.TemporaryDirectory(prefix="herald-pkgcheck-") as tmp:
        root = Path(tmp)
        if "herald-gateway" in debs:
            gateway(debs["herald-gateway"], commit, root)
        if "herald-router" in debs:
            router(debs["herald-router"], commit, root)
    lintian(list(debs.values()))
    print(f"packages: {passed} passed, {failed} failed ({time.monotonic() - started:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
