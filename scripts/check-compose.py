#!/usr/bin/env python3
"""Check deploy/compose.yaml against the code it names, without running it
(no image can be pulled here):

- every HERALD_* variable it sets is a setting's variable in
  docs/configuration.md (a misspelt one would be ignored, or warned about);
- every service HAProxy's configuration (deploy/compose/haproxy.cfg) sends
  to is a compose service, and the file is what haproxy/generate makes
  now with the command in its header;
- the Herald services run the image's two programs.

Prints "compose: N passed, M failed"; exits 1 on a failure.
"""

import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {name}")
    else:
        failed += 1
        print(f"FAIL: {name}{': ' + detail if detail else ''}")


def main():
    compose = yaml.safe_load((REPO / "deploy/compose.yaml").read_text())
    services = compose["services"]
    documented = set(re.findall(r"`(HERALD_[A-Z0-9_]+)`", (REPO / "docs/configuration.md").read_text()))
    for name, svc in sorted(services.items()):
        env = svc.get("environment") or {}
        unknown = sorted(k for k in env if k.startswith("HERALD_") and k not in documented)
        check(f"{name}: its HERALD_* variables are settings", not unknown, f"unknown {unknown}")
        if "herald" in str(svc.get("image", "")):
            check(f"{name}: runs herald-gateway or herald-router",
                  svc.get("command") in (["herald-gateway"], ["herald-router"]), str(svc.get("command")))
    cfg = (REPO / "deploy/compose/haproxy.cfg").read_text()
    hosts = set(re.findall(r"^\s*server \S+ ([a-z0-9-]+):\d+", cfg, re.M))
    check("haproxy.cfg sends to compose services only", hosts and hosts <= set(services),
          f"{sorted(hosts - set(services))}")
    header = next(l for l in cfg.splitlines() if l.startswith("#   haproxy/generate "))
    args = shlex.split(header[1:].strip())
    out = args.index("-o")
    with tempfile.TemporaryDirectory() as tmp:
        args[out + 1] = str(Path(tmp) / "haproxy.cfg")
        r = subprocess.run([str(REPO / args[0]), *args[1:]], capture_output=True, text=True, cwd=REPO)
        fresh = Path(args[out + 1]).read_text() if r.returncode == 0 else ""
    def body(text):  # the header names the output file: not compared
        return [line for line in text.splitlines() if not line.startswith("#   haproxy/generate ")]

    check("haproxy.cfg is haproxy/generate's output now", body(fresh) == body(cfg), r.stderr.strip())
    print(f"compose: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
