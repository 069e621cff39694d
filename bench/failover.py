#!/usr/bin/env python3
"""Failover measured (issue 22, docs/capacity.md#failover): an edge killed, a
root restarted, a router restarted with a new (stale) presence view, while a
stream of notifications flows, in targeted routing (and fanout, to compare).

A deployment is started by `deploy/up` (two RabbitMQ roots, a router per root,
`--edges` edges, HAProxy hashing users by `uid`) from release binaries, every
routing and presence setting at its default (`routing.stale_ms` 35 s, edges'
snapshots every 60 s). `--users` stomp.py sessions connect through HAProxy,
one user each. A publisher sends user-scoped notifications, each to the next
user in turn, `--rate` per second, through the two roots in turn, each
confirmed; a publication whose root fails is published again (same id)
through the other root, as a backend with two roots does. A user's session
that drops reconnects through HAProxy at once, and every 0.2 s until it
works, resuming (`last-seq`, `epoch`, `offline-ms`), as Herald's browser client does.

Scenarios (each runs `--before` seconds of stream, the event, then
`--after` seconds, then waits for everything still due):

- `edge-kill`: the edge holding the most users is SIGKILLed. Its users'
  sessions drop and come back on other edges; their mailboxes died with the
  edge (the resume is answered with an `epoch-changed` gap). Measured: time
  from the kill until the first and the last of them is subscribed again;
  what their users lost, by when it was published: before the kill,
  between the kill and the user's new subscription (the outage), after it
  (must be 0); the other users' losses (must be 0). `deploy/up` restarts the
  edge afterwards.
- `root-restart`: root 1's RabbitMQ is stopped (`stop_app`) and started
  again. Measured: how long it was down, the time from its start until every
  edge and the router are linked to it again, losses (must be 0), copies
  delivered twice, the longest publish-to-arrival time.
- `router-restart`: router 1 is SIGKILLed and started again by `deploy/up`:
  its view of the edges is new, so it routes to every edge until it has
  listened for `stale_ms` and has every edge's snapshot. Measured: the time
  until it is ready, and until it routes by edge and trusts every edge (targeted),
  publications it sent to every edge meanwhile, losses (must be 0).

Usage (pika and stomp.py from tests/distributed/requirements.txt; release
binaries from `cargo build --release -p herald-router -p herald-gateway`):
  .venv/bin/python bench/failover.py --bin-dir target/release \\
      [--modes targeted,fanout] [--scenarios edge-kill,root-restart,router-restart] \\
      [--users 60] [--rate 200] [--edges 3] [--json results.jsonl]
Prints one JSON line per scenario and mode; about two minutes per scenario
and mode, more for router-restart in targeted mode (it waits for the
edges' next snapshot, up to 60 s).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pika.exceptions
import requests

from distbench import READY_S, deploy, down, routing_toml, session, switch_mode
from herald_dist import (RECOVERY, Client, Deployment, amqp_publish, confirmed_channel,
                         offline_ms, wait_until)

# How often a dropped session tries again (a browser backs off more; this
# measures Herald and HAProxy, not a client's backoff).
RETRY_S = 0.2


class Subscriber:
    """One user's session through HAProxy, reconnecting and resuming when
    it drops; what arrived, when."""

    def __init__(self, dep: Deployment, uid: str):
        self.dep, self.uid = dep, uid
        self.cond = threading.Condition()
        self.arrived: dict[str, float] = {}  # message id -> wall clock
        self.copies = 0  # ids that arrived again
        self.gaps: list[str] = []
        self.dropped_at: float | None = None
        self.back_at: float | None = None
        self.stopping = threading.Event()
        self._dropped = threading.Event()
        self.client = session(dep, uid, self._tap)
        self.edge = self.client.edge
        self.resume = {"last-seq": self.client.connected.headers["seq"],
                       "epoch": self.client.connected.headers["epoch"]}
        self.last_heard = self.client.connected.at  # the last frame's wall clock
        self._thread = threading.Thread(target=self._reconnect, daemon=True)
        self._thread.start()

    def _tap(self, e) -> bool:
        if e.kind == "message":
            with self.cond:
                if e.headers.get("event") == "herald.gap":
                    self.gaps.append(e.headers.get("reason", ""))
                else:
                    mid = e.headers["message-id"]
                    if mid in self.arrived:
                        self.copies += 1
                    else:
                        self.arrived[mid] = e.at
                self.resume = {"last-seq": e.headers["seq"], "epoch": e.headers["epoch"]}
                self.last_heard = e.at
                self.cond.notify_all()
            return True
        if e.kind == "disconnected" and not self.stopping.is_set():
            self.dropped_at = self.dropped_at or e.at
            self._dropped.set()
        return False

    def _reconnect(self) -> None:
        while not self.stopping.is_set():
            if not self._dropped.wait(timeout=0.2):
                continue
            self._dropped.clear()
            while not self.stopping.is_set():
                with self.cond:
                    # As the browser client: how long ago the old session
                    # last sent a frame (the routers catch up from then).
                    resume = dict(self.resume, **{"offline-ms": offline_ms(self.last_heard)})
                c = Client(self.dep, self.uid, self.dep.token(self.uid), tap=self._tap)
                try:
                    c.connect(resume)
                    c.read_timeout(None)
                    c.subscribe()
                except Exception:  # noqa: BLE001 - retried, as a browser does
                    try:
                        c.conn.transport.stop()
                    except Exception:  # noqa: BLE001 - it failed already
                        pass
                    self.stopping.wait(RETRY_S)
                    continue
                self.client = c
                self.back_at = time.time()
                break

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(10)
        try:
            self.client.close(wait=False)
        except Exception:  # noqa: BLE001 - best effort at the end
            pass


class Publisher(threading.Thread):
    """User-scoped notifications, each to the next user, `rate` a second,
    through the roots in turn, each confirmed; one whose root fails goes
    again (same id) through the other."""

    def __init__(self, dep: Deployment, users: list[str], rate: int, run: str):
        super().__init__(daemon=True)
        self.dep, self.users, self.rate, self.run_id = dep, users, rate, run
        self.sent: list[tuple[float, float, str, str]] = []  # (began, confirmed, id, user)
        self.failures: Counter = Counter()
        self.resent = 0
        self.stop_now = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the scenario
            self.error = e

    def _run(self) -> None:
        roots = list(self.dep.roots)
        conns: dict = {}
        chans: dict = {}
        down_until = {r: 0.0 for r in roots}

        def channel(root):
            if root not in chans:
                if time.monotonic() < down_until[root]:
                    return None
                try:
                    conns[root] = self.dep.amqp(root)
                    chans[root] = confirmed_channel(conns[root])
                except (pika.exceptions.AMQPError, OSError):
                    self.failures[f"connect {root}"] += 1
                    down_until[root] = time.monotonic() + 0.5
                    return None
            return chans[root]

        t0 = time.monotonic()
        i = 0
        while not self.stop_now.is_set():
            delay = t0 + i / self.rate - time.monotonic()
            if delay > 0:
                self.stop_now.wait(delay)  # pacing to the rate
            uid = self.users[i % len(self.users)]
            mid = f"{self.run_id}-{i}"
            began = time.time()
            order = [roots[i % len(roots)], roots[(i + 1) % len(roots)]]
            for attempt, root in enumerate(order * 20):
                ch = channel(root)
                if ch is None:
                    if attempt % len(roots) == len(roots) - 1:
                        self.stop_now.wait(0.1)  # every root down: retry interval
                    continue
                try:
                    amqp_publish(ch, '{"i":%d}' % i, {"users": [uid], "event": "failover"},
                                 message_id=mid)
                except (pika.exceptions.AMQPError, OSError):
                    self.failures[f"publish {root}"] += 1
                    try:
                        conns.pop(root).close()
                    except Exception:  # noqa: BLE001 - it is broken already
                        pass
                    chans.pop(root, None)
                    down_until[root] = time.monotonic() + 0.5
                    continue
                if attempt:
                    self.resent += 1
                self.sent.append((began, time.time(), mid, uid))
                break
            else:
                raise RuntimeError(f"{mid}: no root took it in 20 tries each")
            i += 1
        for c in conns.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001 - best effort
                pass


def run_stream(dep, subs, args, event) -> tuple[Publisher, dict]:
    """The stream around `event` (a function returning what it measured)."""
    pub = Publisher(dep, [s.uid for s in subs], args.rate, f"fo-{int(time.time())}")
    pub.start()
    time.sleep(args.before)  # the stream before the event: its length is a parameter
    measured = event()
    time.sleep(args.after)  # the stream after the event
    pub.stop_now.set()
    pub.join(30)
    if pub.error:
        raise SystemExit(f"the publisher failed: {pub.error!r}")
    return pub, measured


def settle(subs, pub, must: set[str], timeout: float) -> None:
    """Wait until every id in `must` has arrived at its user."""
    owner = {mid: uid for _, _, mid, uid in pub.sent}
    by_uid = {s.uid: s for s in subs}
    deadline = time.monotonic() + timeout
    for mid in sorted(must):
        s = by_uid[owner[mid]]
        with s.cond:
            s.cond.wait_for(lambda: mid in s.arrived, max(0.0, deadline - time.monotonic()))


def losses(subs, pub) -> tuple[dict, list]:
    """The run's figures, and what never arrived: (began, id, user)."""
    by_uid = {s.uid: s for s in subs}
    lost = [(began, mid, uid) for began, _, mid, uid in pub.sent
            if mid not in by_uid[uid].arrived]
    lat = [by_uid[uid].arrived[mid] - confirmed for _, confirmed, mid, uid in pub.sent
           if mid in by_uid[uid].arrived]
    lat.sort()
    return {
        "published": len(pub.sent),
        "lost": len(lost),
        "copies": sum(s.copies for s in subs),
        "gaps": sum(len(s.gaps) for s in subs),
        "resent_by_publisher": pub.resent,
        "publisher_failures": dict(pub.failures),
        "latency_p50_ms": round(lat[len(lat) // 2] * 1000, 1) if lat else None,
        "latency_max_ms": round(lat[-1] * 1000, 1) if lat else None,
    }, lost


def edge_kill(dep, subs, args) -> dict:
    counts = Counter(s.edge for s in subs)
    victim = counts.most_common(1)[0][0]
    moved = [s for s in subs if s.edge == victim]
    marks: dict = {}

    def event():
        marks["kill"] = time.time()
        dep.kill(victim)
        wait_until("every moved user subscribed again",
                   lambda: all(s.back_at for s in moved), RECOVERY)
        return {}

    pub, _ = run_stream(dep, subs, args, event)
    t_kill = marks["kill"]
    moved_ids = {s.uid for s in moved}
    back = {s.uid: s.back_at for s in moved}
    after = {mid for began, _, mid, uid in pub.sent
             if uid not in moved_ids or began > back[uid]}
    settle(subs, pub, after, RECOVERY)
    out, lost = losses(subs, pub)
    window = {"before_kill": 0, "outage": 0, "after_resubscribe": 0, "other_users": 0}
    outage_sent = 0
    for began, _, mid, uid in pub.sent:
        if uid in moved_ids and t_kill <= began <= back[uid]:
            outage_sent += 1
    for began, mid, uid in lost:
        if uid not in moved_ids:
            window["other_users"] += 1
        elif began < t_kill:
            window["before_kill"] += 1
        elif began <= back[uid]:
            window["outage"] += 1
        else:
            window["after_resubscribe"] += 1
    out.update({
        "edge": victim,
        "users_moved": len(moved),
        "first_back_s": round(min(back.values()) - t_kill, 3),
        "all_back_s": round(max(back.values()) - t_kill, 3),
        "published_in_outage": outage_sent,
        "lost_by_when": window,
        "epoch_changed_gaps": sum(s.gaps.count("epoch-changed") for s in moved),
    })
    res = dep.up_again()
    if f"started {victim}" not in res:
        raise SystemExit(f"deploy/up did not restart {victim}:\n{res}")
    return out


def root_restart(dep, subs, args) -> dict:
    marks: dict = {}

    def event():
        marks["stop"] = time.time()
        dep.rabbitmqctl("root1", "stop_app")
        marks["start"] = time.time()
        dep.rabbitmqctl("root1", "start_app")
        marks["started"] = time.time()
        wait_until("every edge and router linked to root1 again", dep.pipeline_ready, RECOVERY)
        marks["relinked"] = time.time()
        return {}

    pub, _ = run_stream(dep, subs, args, event)
    settle(subs, pub, {mid for _, _, mid, _ in pub.sent}, RECOVERY)
    out, _ = losses(subs, pub)
    out.update({
        "down_s": round(marks["started"] - marks["stop"], 3),
        "relinked_after_start_s": round(marks["relinked"] - marks["started"], 3),
    })
    return out


def router_restart(dep, subs, args) -> dict:
    marks: dict = {}
    router = dep.routers["router1"]

    def event():
        marks["kill"] = time.time()
        dep.kill("router1")
        dep.up_again()
        wait_until("router1 ready", lambda: dep.router_ready("router1"), RECOVERY)
        marks["ready"] = time.time()
        if dep.routing == "targeted":
            wait_until("router1 to route by edge, trusting every edge",
                       lambda: dep.routing_views_trusted(["router1"]), 120)
            marks["targeting"] = time.time()
        return {}

    pub, _ = run_stream(dep, subs, args, event)
    settle(subs, pub, {mid for _, _, mid, _ in pub.sent}, RECOVERY)
    out, _ = losses(subs, pub)
    out["ready_s"] = round(marks["ready"] - marks["kill"], 3)
    if "targeting" in marks:
        out["targeting_s"] = round(marks["targeting"] - marks["kill"], 3)
        out["sent_to_every_edge_since_restart"] = {
            reason: labelled(router, "herald_routing_every_total", reason)
            for reason in ("warming", "all_edges")}
        out["sent_by_edge_since_restart"] = dep.metric(router,
                                                       "herald_routing_targeted_total")
    return out


def labelled(addr: str, name: str, reason: str) -> float:
    """One `reason` series of a router's metric."""
    text = requests.get(f"http://{addr}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f'{name}{{reason="{reason}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


SCENARIOS = {"edge-kill": edge_kill, "root-restart": root_restart,
             "router-restart": router_restart}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", required=True, type=Path)
    p.add_argument("--modes", default="targeted,fanout")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--users", type=int, default=60)
    p.add_argument("--rate", type=int, default=200, help="publications per second")
    p.add_argument("--edges", type=int, default=3)
    p.add_argument("--before", type=float, default=5.0, help="seconds of stream before the event")
    p.add_argument("--after", type=float, default=10.0, help="seconds of stream after it")
    p.add_argument("--port-offset", type=int, default=4000)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    modes = args.modes.split(",")
    scenarios = args.scenarios.split(",")
    for x in modes:
        if x not in ("targeted", "fanout"):
            raise SystemExit(f"--modes: targeted or fanout, got {x!r}")
    for x in scenarios:
        if x not in SCENARIOS:
            raise SystemExit(f"--scenarios: one of {', '.join(SCENARIOS)}, got {x!r}")
    if args.edges < 2 or args.users < 1 or args.rate < 1:
        raise SystemExit("--edges must be at least 2, --users and --rate at least 1")
    top = Path(tempfile.mkdtemp(prefix="herald-failover-"))
    try:
        dep = deploy(top, args.bin_dir.resolve(), args.edges, args.port_offset,
                     routing_toml(modes[0]))
        for mode in modes:
            if dep.routing != mode:
                switch_mode(dep, routing_toml(mode))
            for name in scenarios:
                dep.wait_ready(READY_S)
                subs = [Subscriber(dep, f"fo-{mode}-{name}-{i}-{int(time.time())}")
                        for i in range(args.users)]
                try:
                    r = SCENARIOS[name](dep, subs, args)
                finally:
                    for s in subs:
                        s.stop()
                    dep.sessions.clear()
                r = {"scenario": name, "mode": mode, "users": args.users, "rate": args.rate,
                     "edges": args.edges, **r}
                line = json.dumps(r)
                print(line, flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(line + "\n")
    finally:
        down(top)


if __name__ == "__main__":
    sys.exit(main())
