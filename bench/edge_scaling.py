#!/usr/bin/env python3
"""Edge CPU per notification with 1, 2, 4 and 8 edges, fanout vs targeted
routing (issue 22, docs/capacity.md#targeted-routing).

For each edge count a whole deployment is started by `deploy/up` (two
RabbitMQ roots, a router per root, N edges, HAProxy hashing users by `uid`),
from release binaries, in a state directory of its own. `--users` stomp.py
sessions connect through HAProxy, one user each, so HAProxy spreads them over
the edges as it spreads browsers. Each round deploys once per AMQP client of
the edges (`--clients herald,lapin`: `edge.uplink_client`, in turn, so two
clients alternate A B A B); on each deployment, for each mode (`--modes`, in
turn: fanout, targeted), the routers are restarted with `routing.mode` set,
and once they route (targeted: once they trust their view of every edge) the
bench:

1. reads every edge's CPU (`utime + stime` from /proc) over `--idle` quiet
   seconds: what an edge spends with no traffic (heart-beats, reports);
2. publishes `--notifications` user-scoped notifications, each to one user
   drawn at random (a seeded generator: the same draw in every run), half
   through each root, at `--rate` per second, and waits until every session
   has received all of its own;
3. reads each edge's CPU again, and its `herald_uplink_received_total`
   (notifications the roots handed it) and `herald_deliveries_total`
   (messages it queued to sessions).

Per edge the traffic's CPU is the CPU over the run less the idle rate times
the run's length. The report gives, per edge count and mode: the total edge
CPU for the fixed traffic, CPU per delivered notification, notifications
received per delivered one, and (fanout) the CPU per notification an edge
received and did not deliver:
(fanout's edge CPU - targeted's CPU per delivery x deliveries) / (received -
delivered), from the same edge count's runs.

Usage (pika and stomp.py from tests/distributed/requirements.txt; release
binaries from `cargo build --release -p herald-router -p herald-gateway`):
  .venv/bin/python bench/edge_scaling.py --bin-dir target/release \
      [--edges 1,2,4,8] [--users 256] [--notifications 20000] [--rate 2000] \
      [--rounds 2] [--modes fanout,targeted] [--clients herald,lapin] \
      [--json results.jsonl]
Needs what deploy/up installs (rabbitmq-server, haproxy, redis-server,
varnish). Prints one JSON line per run, then the table; takes about
(2 x rounds + 1) minutes per edge count.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from distbench import cpu_s, deploy, down, root_pids, routing_toml, session, switch_mode
from herald_dist import Deployment, amqp_publish

# An edge is trusted 5 s after its last report (the edges report every 2 s
# here), and a restarted router routes by edge after 5 s.
STALE_MS = 5000
# The edges report every 2 s and send a snapshot every 3 s: a restarted
# router trusts every edge within seconds.
EDGE_TOML = "[edge]\npresence_heartbeat_ms = 2000\npresence_sync_ms = 3000\n"


class Receiver:
    """Counts every user's MESSAGE frames; wakes a waiter when they add up."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.got: dict[str, int] = {}
        self.lost: list[str] = []

    def tap(self, uid: str):
        def on(e) -> bool:
            if e.kind == "message":
                with self.cond:
                    self.got[uid] = self.got.get(uid, 0) + 1
                    self.cond.notify_all()
                return True
            if e.kind in ("disconnected", "error"):
                with self.cond:
                    self.lost.append(f"{uid}: {e.kind} {e.headers.get('message', '')}")
                    self.cond.notify_all()
            return False
        return on

    def wait_for(self, want: dict[str, int], timeout: float) -> None:
        def done() -> bool:
            if self.lost:
                return True
            return all(self.got.get(u, 0) >= n for u, n in want.items())

        with self.cond:
            ok = self.cond.wait_for(done, timeout=timeout)
            if self.lost:
                raise SystemExit(f"a session dropped during the run: {self.lost[:3]}")
            if not ok:
                short = {u: (self.got.get(u, 0), n) for u, n in want.items()
                         if self.got.get(u, 0) < n}
                raise SystemExit(f"not everything arrived in {timeout}s: "
                                 f"{len(short)} users short, e.g. {list(short.items())[:3]}")


def edge_figures(dep: Deployment) -> dict[str, dict]:
    out = {}
    for e, addr in dep.edges.items():
        out[e] = {
            "cpu_s": cpu_s(dep.pid(e)),
            "received": dep.metric(addr, "herald_uplink_received_total"),
            "delivered": dep.metric(addr, "herald_deliveries_total"),
        }
    return out


def one_run(dep: Deployment, mode: str, users: list[str], rx: Receiver, args, seed: int) -> dict:
    # Idle: what each edge spends with nothing to deliver.
    before = {e: cpu_s(dep.pid(e)) for e in dep.edges}
    t0 = time.monotonic()
    time.sleep(args.idle)  # the measured idle window itself, not a synchronisation
    idle_s = time.monotonic() - t0
    idle_rate = {e: (cpu_s(dep.pid(e)) - before[e]) / idle_s for e in dep.edges}

    draw = random.Random(seed)
    targets = [draw.choice(users) for _ in range(args.notifications)]
    want = dict(rx.got)
    for u in targets:
        want[u] = want.get(u, 0) + 1
    start = edge_figures(dep)
    routers_before = {r: cpu_s(dep.pid(r)) for r in dep.routers}
    brokers = root_pids(dep)
    brokers_before = {r: cpu_s(pid) for r, pid in brokers.items()}
    t0 = time.monotonic()
    roots = list(dep.roots)
    conns = [dep.amqp(r) for r in roots]
    try:
        chans = [c.channel() for c in conns]
        interval = 1.0 / args.rate
        for i, uid in enumerate(targets):
            due = t0 + i * interval
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing to --rate
            amqp_publish(chans[i % len(chans)], b'{"n":%d}' % i,
                         {"scope": "user", "users": [uid], "event": "bench.scaling"})
        published_s = time.monotonic() - t0
    finally:
        for c in conns:
            c.close()
    rx.wait_for(want, timeout=max(60.0, args.notifications / 200))
    # The edges count a delivery as they queue it, before the session
    # reads it: everything arrived, so every count is in.
    end = edge_figures(dep)
    took_s = time.monotonic() - t0
    routers_cpu = sum(cpu_s(dep.pid(r)) - routers_before[r] for r in dep.routers)
    roots_cpu = sum(cpu_s(pid) - brokers_before[r] for r, pid in brokers.items())
    edges = {}
    for e in dep.edges:
        cpu = end[e]["cpu_s"] - start[e]["cpu_s"]
        edges[e] = {
            "cpu_s": round(cpu, 3),
            "idle_cpu_s": round(idle_rate[e] * took_s, 3),
            "net_cpu_s": round(cpu - idle_rate[e] * took_s, 3),
            "received": int(end[e]["received"] - start[e]["received"]),
            "delivered": int(end[e]["delivered"] - start[e]["delivered"]),
        }
    total_net = sum(x["net_cpu_s"] for x in edges.values())
    received = sum(x["received"] for x in edges.values())
    delivered = sum(x["delivered"] for x in edges.values())
    return {
        "edges_n": len(dep.edges),
        "mode": mode,
        "notifications": args.notifications,
        "rate": args.rate,
        "published_s": round(published_s, 2),
        "took_s": round(took_s, 2),
        "edge_net_cpu_s": round(total_net, 3),
        "received": received,
        "delivered": delivered,
        "us_per_delivered": round(total_net / max(delivered, 1) * 1e6, 1),
        "received_per_delivered": round(received / max(delivered, 1), 2),
        "routers_cpu_s": round(routers_cpu, 3),
        "roots_cpu_s": round(roots_cpu, 3),
        "per_edge": edges,
    }


def table(results: list[dict]) -> str:
    rows = ["| edges | client | mode | runs | edge CPU for the traffic, s (each run) | µs per delivery "
            "| received per delivery | µs per notification received, not delivered "
            "| routers' CPU, s | roots' CPU, s |",
            "|---:|---|---|---:|---|---:|---:|---:|---:|---:|"]
    by = {}
    for r in results:
        by.setdefault((r["edges_n"], r.get("client", "lapin"), r["mode"]), []).append(r)
    for (n, client, mode), runs in sorted(by.items()):
        cpu = [r["edge_net_cpu_s"] for r in runs]
        per = statistics.median(r["us_per_delivered"] for r in runs)
        rec = statistics.median(r["received_per_delivered"] for r in runs)
        undelivered = "-"
        targeted = by.get((n, client, "targeted"))
        if mode == "fanout" and targeted and n > 1:
            a = statistics.median(t["edge_net_cpu_s"] / t["delivered"] for t in targeted)
            vals = [(r["edge_net_cpu_s"] - a * r["delivered"]) / (r["received"] - r["delivered"])
                    for r in runs if r["received"] > r["delivered"]]
            if vals:
                undelivered = f"{statistics.median(vals) * 1e6:.1f}"
        others = []
        for key in ("routers_cpu_s", "roots_cpu_s"):
            vals = [r[key] for r in runs if key in r]
            others.append(f"{statistics.median(vals):.2f}" if vals else "-")
        rows.append(f"| {n} | {client} | {mode} | {len(runs)} | {statistics.median(cpu):.2f} "
                    f"({', '.join(f'{c:.2f}' for c in cpu)}) | {per:.1f} | {rec:.2f} "
                    f"| {undelivered} | {' | '.join(others)} |")
    return "\n".join(rows)


def deployment_runs(n: int, rnd: int, client: str, modes: list[str], bins: Path,
                    args) -> list[dict]:
    """One deployment of `n` edges on `client`: a run of each mode."""
    results = []
    top = Path(tempfile.mkdtemp(prefix=f"herald-scaling-{n}-"))
    try:
        edge_toml = EDGE_TOML + f'uplink_client = "{client}"\n'
        dep = deploy(top, bins, n, args.port_offset, routing_toml(modes[0], STALE_MS), edge_toml)
        rx = Receiver()
        users = [f"scale-{n}-{i}" for i in range(args.users)]
        sessions = [session(dep, u, rx.tap(u)) for u in users]
        spread = {e: sum(1 for c in sessions if c.edge == e) for e in dep.edges}
        print(f"# {n} edges, {client}: sessions per edge {spread}", file=sys.stderr, flush=True)
        for mode in modes:
            switch_mode(dep, routing_toml(mode, STALE_MS))
            r = one_run(dep, mode, users, rx, args, seed=rnd)
            r["round"] = rnd + 1
            r["client"] = client
            r["sessions_per_edge"] = spread
            results.append(r)
            line = json.dumps(r)
            print(line, flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(line + "\n")
        for c in sessions:
            c.close(wait=False)
    finally:
        down(top)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", required=True, type=Path,
                   help="where herald-router and herald-gateway are (a release build)")
    p.add_argument("--edges", default="1,2,4,8", help="edge counts, comma-separated")
    p.add_argument("--users", type=int, default=256)
    p.add_argument("--notifications", type=int, default=20000)
    p.add_argument("--rate", type=int, default=2000, help="publications per second")
    p.add_argument("--rounds", type=int, default=2, help="runs of each mode per edge count")
    p.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured first")
    p.add_argument("--port-offset", type=int, default=3000)
    p.add_argument("--modes", default="fanout,targeted",
                   help="routing modes, comma-separated (each deployment runs them in turn)")
    p.add_argument("--clients", default="herald",
                   help="the edges' AMQP clients (edge.uplink_client), comma-separated: "
                        "each round deploys once per client, in turn (A B A B)")
    p.add_argument("--json", type=Path, help="append each run's JSON line to this file")
    args = p.parse_args()
    counts = [int(x) for x in args.edges.split(",")]
    if not all(1 <= n <= 99 for n in counts):
        raise SystemExit("--edges: counts between 1 and 99")
    if args.users < 1 or args.notifications < 1 or args.rate < 1 or args.rounds < 1:
        raise SystemExit("--users, --notifications, --rate and --rounds must be at least 1")
    modes = args.modes.split(",")
    clients = args.clients.split(",")
    if not set(modes) <= {"fanout", "targeted"} or not set(clients) <= {"herald", "lapin"}:
        raise SystemExit("--modes: fanout, targeted; --clients: herald, lapin")
    bins = args.bin_dir.resolve()
    results = []
    for n in counts:
        for rnd in range(args.rounds):
            for client in clients:
                results += deployment_runs(n, rnd, client, modes, bins, args)
    print()
    print(table(results))


if __name__ == "__main__":
    main()
