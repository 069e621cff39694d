#!/usr/bin/env python3
"""Herald's capacity model: nodes per tier and traffic between tiers.

Turns a deployment's numbers (sessions, publications a second by scope and
their audiences, delayed notifications a second) into the edges, roots,
routers, Redis masters and HAProxy nodes it needs, and the network traffic
between them, from the per-node figures measured on this project's machines.
The model, its formulas and where each figure comes from: docs/capacity.md.

Two routing modes side by side: `fanout` (today: every edge receives every
notification from every root) and `targeted` (a projection, not built: an edge
receives only notifications for users it holds).

Settings come from the defaults, then a JSON or TOML file (--config; keys are
the flags' names with underscores, e.g. "client_pubs"), then the flags.
Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

# The per-node figures, in one place. Each names its source: a report under
# bench/reports/ (section) or a setting. "measured" figures were measured on
# this project's 2-core machines; "extrapolated" ones say from what. Keep in
# step with the inputs table of docs/capacity.md (tests/python/test_capacity.py
# checks that every key here is in that table with the same value).
FIGURES = {
    # edge (herald-gateway), memory
    "session_rss_bytes": (3909, "measured", "connections.md: idle WebSocket session, 3,582-3,909 B (a distinct user each, mailbox included)"),
    "session_rss_bytes_xhr": (6740, "measured", "connections.md 2026-11-21: idle xhr-streaming session, 5,172-6,740 B"),
    "kernel_socket_bytes": (4746, "measured", "capacity.md: kernel slab per idle edge-side TCP socket, 4,528-5,176 B"),
    "retained_overhead_bytes": (176, "measured", "retained.md: a retained notification costs payload + 158-176 B"),
    "retained_slot_bytes": (20, "measured", "retained.md breakdown: one mailbox buffer slot"),
    "dedup_id_bytes": (46, "measured", "retained.md breakdown: one id in the dedup window"),
    "edge_base_bytes": (6 * 2**20, "measured", "connections.md: gateway RSS before sessions, 5.7-5.8 MiB"),
    # edge, CPU (microseconds of one core)
    "edge_us_per_delivery": (8.5, "measured", "delayed.md 2026-11-24 later: edge CPU in the router herd, 1.63-1.77 s per 200,000 (user scope, WebSocket)"),
    "edge_us_per_message": (45.0, "measured", "router.md latency at 4,500/s: gateway 2.4 s per 45,000 = 53 us per publication, less one delivery"),
    "edge_us_per_connect": (143.0, "measured", "connections.md: 14,000 connects/s on 2 cores shared with the clients (upper bound)"),
    "xhr_cpu_factor": (1.5, "extrapolated", "SockJS HTTP transports: a driver task per session and one more hand-off per message; no bench measures it"),
    "heartbeats_per_session_s": (0.2, "extrapolated", "gateway/js heartbeatMs 10000 both ways, each costed as a delivery"),
    # router (herald-router)
    "router_us_per_publication": (17.0, "measured", "router.md: 58,997-67,340 publications per router CPU-second"),
    "router_us_per_delayed": (12.0, "measured", "delayed.md 2026-11-25 evening / 2026-11-24: router 3.8-5.5 us per ingested entry, about 7 us per fired one"),
    "router_us_per_presence_change": (17.0, "extrapolated", "assumed equal to a publication's (a report parsed and written to Redis); not measured"),
    # root (RabbitMQ 3.10, persistent messages, durable classic queues)
    "root_us_per_intake": (74.0, "measured", "capacity.md: a backend's publish through the publications queue to the router, 71-78 us (one queue)"),
    "root_us_per_forward": (30.0, "measured", "capacity.md: the router's forward, published and routed once (74 - 44 us)"),
    "root_us_per_queue": (44.0, "measured", "capacity.md: each bound queue, delivered and acked, 43.6-44.3 us (slope)"),
    "queue_max_per_s": (20000, "measured", "router.md: one queue took 19,527-20,260/s with the broker CPU-bound (a lower bound)"),
    # Redis (one main thread per master)
    "redis_us_per_insert": (12.0, "measured", "delayed.md 2026-11-25 evening: 11.5-11.9 us per entry in scrambled due order (6.6-8.7 sequential)"),
    "redis_us_per_fire": (28.6, "measured", "delayed.md 2026-11-24: one Redis core fires about 35,000 a second in a steady stream"),
    "redis_bytes_per_pending": (784, "measured", "delayed.md 2026-11-25 evening: 784 B per pending notification at ten million, 200 B payloads"),
    "redis_us_per_online": (24.0, "measured", "capacity.md: presence, per user coming online, per root"),
    "redis_us_per_offline": (16.0, "measured", "capacity.md: presence, per user going offline, per root"),
    "redis_us_company_online": (8.0, "measured", "capacity.md: of redis_us_per_online, the company script, whose {pc} keys share one hash slot"),
    "redis_us_company_offline": (5.0, "measured", "capacity.md: of redis_us_per_offline, the company script ({pc} slot)"),
    "redis_bytes_per_online_user": (892, "measured", "capacity.md: presence keys per online user"),
    # wire sizes
    "stomp_head_bytes": (225, "extrapolated", "MESSAGE head of gateway/src/session/core.rs message_headers with typical ids, plus the WebSocket header"),
    "amqp_overhead_bytes": (250, "extrapolated", "AMQP 0-9-1 method, content header (properties, headers table) and body frames"),
    "packet_overhead_bytes": (66, "extrapolated", "Ethernet 14 + IPv4 20 + TCP with timestamps 32, one packet per delivery"),
    "redis_bytes_per_trip": (200, "extrapolated", "keys, record header and script arguments per entry, on each of the insert, claim and delivered round trips"),
    "presence_bytes_per_change": (300, "extrapolated", "a user's share of a presence pipeline: keys, the detail JSON, script arguments"),
    # limits
    "ports_per_address": (28232, "measured", "capacity.md: this machine's net.ipv4.ip_local_port_range, 32768-60999"),
}

# Settings of Herald that the model reads (docs/configuration.md).
CONFIG = {
    "buffer_messages": 256,  # mailbox.buffer_messages
    "buffer_bytes": 1 << 20,  # mailbox.buffer_bytes
    "mailbox_ttl_s": 300,  # mailbox.ttl_secs
    "dedup_window_s": 120,  # edge.dedup_window_secs
    "dedup_max": 1_000_000,  # edge.dedup_max
    "store_shards": 16,  # redis.shards
}

# Every setting: (default, kind, help). kind: "int", "float", "share" (0 to 1),
# "mode"; a "+" after it: greater than 0.
# None as default: computed by the model (the shapes) or required (sessions).
SETTINGS = {
    # load
    "sessions": (None, "int+", "concurrent sessions (required)"),
    "sessions_per_user": (1.0, "float+", "sessions per online user (tabs, devices)"),
    "user_pubs": (0.0, "float", "publications/s to single users (scope user)"),
    "client_pubs": (0.0, "float", "publications/s to a client company (scope client)"),
    "global_pubs": (0.0, "float", "publications/s to everyone (scope global)"),
    "user_audience": (1.0, "float+", "sessions one user-scope publication reaches"),
    "client_audience": (100.0, "float+", "sessions one client-scope publication reaches (online employees)"),
    "delayed": (0.0, "float", "delayed notifications accepted (and fired) per second, user scope"),
    "delay_mean_s": (3600.0, "float", "mean time a delayed notification waits (sets the pending count)"),
    "payload": (200.0, "float+", "mean payload bytes"),
    "session_minutes": (20.0, "float+", "mean session length (sets connects/s)"),
    "xhr_share": (0.0, "share", "share of sessions on SockJS HTTP transports (xhr-streaming, eventsource, xhr-polling)"),
    "bundle": (1.0, "float+", "notifications per AMQP message to the edges (1: AMQP publications today; HTTP batches and fired delayed ones bundle up to 256)"),
    # shape: computed when not given
    "edges": (None, "int+", "edges (computed when not given)"),
    "roots": (None, "int+", "root brokers (computed when not given)"),
    "routers": (None, "int+", "routers (computed when not given)"),
    "redis_masters": (None, "int+", "Redis masters (computed when not given)"),
    "proxies": (None, "int+", "HAProxy nodes (computed when not given)"),
    # nodes
    "edge_cores": (16.0, "float+", "cores per edge"),
    "edge_ram_gib": (64.0, "float+", "RAM per edge, GiB"),
    "root_cores": (16.0, "float+", "cores per root broker"),
    "router_cores": (8.0, "float+", "cores per router"),
    "redis_ram_gib": (64.0, "float+", "RAM per Redis master, GiB"),
    "cpu_target": (0.6, "share+", "CPU share a node may use (headroom for failover and bursts)"),
    "mem_target": (0.8, "share+", "RAM share an edge may use"),
    "redis_mem_target": (0.5, "share+", "RAM share a Redis master may use (an AOF rewrite forks: copy-on-write)"),
    "min_roots": (2, "int+", "fewest roots (backends retry another root)"),
    # limits
    "fd_limit": (1_048_576, "int+", "descriptors per edge process (the shipped systemd units; this machine: 20,000)"),
    "fd_reserve": (1000, "int", "descriptors an edge keeps for other things (links, listeners, files)"),
    "max_sessions": (100_000, "int+", "session.max_sessions of each edge"),
    "proxy_fd_limit": (1_048_576, "int+", "descriptors per HAProxy process (two per session)"),
    "ports_per_address": (FIGURES["ports_per_address"][0], "int+", "source ports per proxy address and edge (64,511 with ip_local_port_range 1024-65535)"),
    "source_addresses": (None, "int+", "source addresses per HAProxy node (haproxy/generate --sources/--source-addrs; computed when not given)"),
    "routing": ("both", "mode", "fanout (today), targeted (projection) or both"),
}

MODES = ("fanout", "targeted")

# The limits of each tier, as named in the result's "use".
TIERS = {
    "edges": ("edge fds", "edge max_sessions", "edge memory", "edge CPU"),
    "roots": ("root CPU", "root queue rate"),
    "routers": ("router CPU",),
    "redis_masters": ("Redis CPU", "Redis memory", "Redis {pc} slot"),
    "proxies": ("proxy fds", "proxy ports"),
}


class InputError(Exception):
    """A bad setting; the message names the flag."""


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_value(name: str, raw) -> object:
    """A setting's value from a flag's text or a config file's value."""
    default, kind, _ = SETTINGS[name]
    if kind == "mode":
        allowed = ("fanout", "targeted", "both")
        if raw not in allowed:
            raise InputError(f"{flag(name)}: must be one of {', '.join(allowed)}, not {raw!r}")
        return raw
    if isinstance(raw, bool):
        raise InputError(f"{flag(name)}: must be a number, not {raw!r}")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"{flag(name)}: must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{flag(name)}: must be a finite number, not {raw!r}")
    if kind.startswith("int"):
        if value != int(value):
            raise InputError(f"{flag(name)}: must be a whole number, not {raw!r}")
        value = int(value)
    if kind.endswith("+") and value <= 0:
        raise InputError(f"{flag(name)}: must be greater than 0, not {raw!r}")
    if value < 0:
        raise InputError(f"{flag(name)}: must not be negative, not {raw!r}")
    if kind.startswith("share") and value > 1:
        raise InputError(f"{flag(name)}: must be between 0 and 1, not {raw!r}")
    return value


def load_file(path: str) -> dict:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InputError(f"--config: cannot read {path}: {e.strerror}") from None
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except ValueError as e:
        raise InputError(f"--config: {path} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}") from None
    if not isinstance(data, dict):
        raise InputError(f"--config: {path} must hold a table of settings")
    out = {}
    for key, raw in data.items():
        name = key.replace("-", "_")
        if name not in SETTINGS:
            raise InputError(f"--config: {path}: {key!r} is not a setting (see --help)")
        try:
            out[name] = parse_value(name, raw)
        except InputError as e:
            raise InputError(f"--config: {path}: {key}: {e}") from None
    return out


def settings(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(
        prog="scripts/capacity.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example (the field report's load on its 21 edges and 2 roots):\n"
               "  scripts/capacity.py --sessions 1100000 --user-pubs 12000 --client-pubs 1000 \\\n"
               "      --client-audience 1288 --edges 21 --roots 2\n"
               "Bad input exits 2 with a message naming the flag. Worked examples: docs/capacity.md.",
    )
    ap.add_argument("--config", metavar="FILE", help="JSON or TOML file of settings (flags win)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    ap.add_argument("--figures", action="store_true",
                    help="print the per-node figures the model uses, with their sources, and exit")
    for name, (default, kind, text) in SETTINGS.items():
        shown = "" if default is None else f" (default {default})"
        ap.add_argument(flag(name), dest=name, metavar="X" if kind != "mode" else "MODE",
                        help=text + shown)
    a = ap.parse_args(argv)
    if a.figures:
        for key, (value, status, source) in FIGURES.items():
            print(f"{key:30} {value:>12,} {status:12} {source}")
        sys.exit(0)
    s = {name: d for name, (d, _, _) in SETTINGS.items()}
    if a.config:
        s.update(load_file(a.config))
    for name in SETTINGS:
        raw = getattr(a, name)
        if raw is not None:
            s[name] = parse_value(name, raw)
    if s["sessions"] is None:
        raise InputError("--sessions: required (concurrent sessions), on the command line or in --config")
    if s["user_pubs"] + s["client_pubs"] + s["global_pubs"] + s["delayed"] <= 0:
        raise InputError("--user-pubs: give at least one publication rate (--user-pubs, --client-pubs, --global-pubs or --delayed)")
    if s["edges"] is not None and s["edges"] < 2:
        raise InputError("--edges: at least 2 (the model keeps one edge's users placeable when it fails)")
    if s["fd_reserve"] >= s["fd_limit"]:
        raise InputError("--fd-reserve: must be below --fd-limit")
    s["json"] = a.json
    return s


# ---- the model -----------------------------------------------------------------

def f(key: str) -> float:
    return FIGURES[key][0]


def hit(users_reached: float, edges: int, mode: str) -> float:
    """Share of the edges a publication reaching that many users must go to."""
    if mode == "fanout":
        return 1.0
    return 1.0 - (1.0 - 1.0 / edges) ** users_reached


def load(s: dict) -> dict:
    """The load in the model's terms, independent of the shape."""
    users = s["sessions"] / s["sessions_per_user"]
    deliveries = {
        "user": (s["user_pubs"] + s["delayed"]) * s["user_audience"],
        "client": s["client_pubs"] * s["client_audience"],
        "global": s["global_pubs"] * s["sessions"],
    }
    total = sum(deliveries.values())
    return {
        "users": users,
        "deliveries": total,
        "user_share": deliveries["user"] / total if total else 0.0,
        "per_session": total / s["sessions"],
        "connects": s["sessions"] / (s["session_minutes"] * 60),
        "pending": s["delayed"] * s["delay_mean_s"],
        # (notifications/s, users reached, of which delayed) by scope
        "scopes": [
            ("user", s["user_pubs"], max(1.0, s["user_audience"] / s["sessions_per_user"]), False),
            ("delayed", s["delayed"], max(1.0, s["user_audience"] / s["sessions_per_user"]), True),
            ("client", s["client_pubs"], max(1.0, s["client_audience"] / s["sessions_per_user"]), False),
            ("global", s["global_pubs"], users, False),
        ],
    }


def edge(s: dict, ld: dict, edges: int, mode: str) -> dict:
    """One edge's load, memory and CPU."""
    sessions = s["sessions"] / edges
    mailboxes = ld["users"] / edges * (1 + CONFIG["mailbox_ttl_s"] / (s["session_minutes"] * 60))
    # notifications and AMQP messages this edge receives
    received = sum(rate * hit(reach, edges, mode) for _, rate, reach, _ in ld["scopes"])
    # what its mailboxes keep depends on who it holds, not on the routing mode
    shared_kept = sum(rate * hit(reach, edges, "targeted") for name, rate, reach, _ in ld["scopes"]
                      if name in ("client", "global"))
    messages = received / s["bundle"]
    deliveries = ld["deliveries"] / edges
    payload = s["payload"]
    # memory
    per_session = (s["xhr_share"] * f("session_rss_bytes_xhr")
                   + (1 - s["xhr_share"]) * f("session_rss_bytes") + f("kernel_socket_bytes"))
    slots = min(CONFIG["buffer_messages"], max(1, CONFIG["buffer_bytes"] // max(1, int(payload))))
    per_mailbox = slots * (f("retained_slot_bytes")
                           + ld["user_share"] * (payload + f("retained_overhead_bytes") - f("retained_slot_bytes")))
    buffer_seconds = slots / ld["per_session"] if ld["per_session"] else 0.0
    shared_copies = min(shared_kept * buffer_seconds, mailboxes * slots * (1 - ld["user_share"]))
    dedup_ids = min(CONFIG["dedup_max"], received * CONFIG["dedup_window_s"])
    memory = (f("edge_base_bytes") + sessions * per_session + mailboxes * per_mailbox
              + shared_copies * (payload + f("retained_overhead_bytes") - f("retained_slot_bytes"))
              + dedup_ids * f("dedup_id_bytes"))
    # CPU, cores
    factor = 1 + s["xhr_share"] * (f("xhr_cpu_factor") - 1)
    cpu = {
        "receive": messages * f("edge_us_per_message") / 1e6,
        "deliver": deliveries * f("edge_us_per_delivery") * factor / 1e6,
        "heartbeats": sessions * f("heartbeats_per_session_s") * f("edge_us_per_delivery") * factor / 1e6,
        "connects": ld["connects"] / edges * f("edge_us_per_connect") / 1e6,
    }
    return {
        "sessions": sessions,
        "sessions_after_failure": s["sessions"] / (edges - 1),
        "received": received,
        "messages": messages,
        "deliveries": deliveries,
        "memory": memory,
        "cpu": cpu,
        "cores": sum(cpu.values()),
        "dedup_window_s": dedup_ids / received if received else CONFIG["dedup_window_s"],
        "global_burst_core_s": sessions * f("edge_us_per_delivery") * factor / 1e6,
    }


def edge_limits(s: dict, e: dict) -> dict:
    """Each edge constraint as a share of what it may use (1.0 = at the limit)."""
    return {
        "edge fds": e["sessions_after_failure"] / (s["fd_limit"] - s["fd_reserve"]),
        "edge max_sessions": e["sessions_after_failure"] / s["max_sessions"],
        "edge memory": e["memory"] / (s["edge_ram_gib"] * 2**30 * s["mem_target"]),
        "edge CPU": e["cores"] / (s["edge_cores"] * s["cpu_target"]),
    }


EDGE_LIMITS = TIERS["edges"]
MAX_EDGES = 1_000_000


def fewest_edges(fits) -> int | None:
    """The fewest edges (2 or more) for which `fits` holds, assuming more never hurts."""
    hi = 2
    while not fits(hi):
        if hi >= MAX_EDGES:
            return None
        hi = min(MAX_EDGES, hi * 2)
    lo = max(2, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def roots_load(s: dict, ld: dict, edges: int, mode: str) -> dict:
    """Root broker CPU (cores, all roots together) and the busiest queue's rate."""
    cores = 0.0
    to_edges = 0.0
    for name, rate, reach, delayed in ld["scopes"]:
        # a publication comes in through the publications queue (a delayed one
        # through HTTP and Redis instead); forwards may carry several
        msgs = rate / s["bundle"]
        fan = edges * hit(reach, edges, mode)
        intake = 0.0 if delayed else rate * f("root_us_per_intake")
        cores += (intake + msgs * (f("root_us_per_forward") + fan * f("root_us_per_queue"))) / 1e6
        to_edges += msgs * fan
    amqp_pubs = sum(rate for name, rate, _, delayed in ld["scopes"] if not delayed)
    return {"cores": cores, "messages_to_edges": to_edges, "amqp_pubs": amqp_pubs}


def redis_load(s: dict, ld: dict, roots: int) -> dict:
    cpu = (s["delayed"] * (f("redis_us_per_insert") + f("redis_us_per_fire"))
           + ld["connects"] * roots * (f("redis_us_per_online") + f("redis_us_per_offline"))) / 1e6
    memory = ld["pending"] * f("redis_bytes_per_pending") + ld["users"] * f("redis_bytes_per_online_user")
    pc = ld["connects"] * roots * (f("redis_us_company_online") + f("redis_us_company_offline")) / 1e6
    return {"cores": cpu, "memory": memory, "pc_cores": pc}


def solve(s: dict, ld: dict, mode: str) -> dict:
    """Nodes per tier (given or computed) and every constraint's use."""
    # edges: the given count, or the fewest that satisfy every edge constraint
    infeasible = []
    edges = s["edges"]
    if edges is None:
        edges = 2
        for name in EDGE_LIMITS:
            need = fewest_edges(lambda n: edge_limits(s, edge(s, ld, n, mode))[name] <= 1)
            if need is None:
                infeasible.append(name)
            else:
                edges = max(edges, need)
    e = edge(s, ld, edges, mode)
    lim = edge_limits(s, e)
    r = roots_load(s, ld, edges, mode)
    root_budget = s["root_cores"] * s["cpu_target"]
    roots = s["roots"] or max(s["min_roots"], math.ceil(r["cores"] / root_budget),
                              math.ceil(max(r["amqp_pubs"], r["messages_to_edges"] / edges) / f("queue_max_per_s")))
    router_cores = (r["amqp_pubs"] * f("router_us_per_publication") + s["delayed"] * f("router_us_per_delayed")
                    + ld["connects"] * 2 * roots * f("router_us_per_presence_change")) / 1e6
    routers = s["routers"] or max(roots, math.ceil(router_cores / (s["router_cores"] * s["cpu_target"])))
    rd = redis_load(s, ld, roots)
    redis_mem_budget = s["redis_ram_gib"] * 2**30 * s["redis_mem_target"]
    masters = s["redis_masters"] or max(1, math.ceil(rd["cores"] / s["cpu_target"]),
                                        math.ceil(rd["memory"] / redis_mem_budget))
    # HAProxy: two descriptors a session; one node spare, like the edges
    proxies = s["proxies"] or math.ceil(2 * s["sessions"] / s["proxy_fd_limit"]) + 1
    serving = max(1, proxies - 1)
    per_edge_and_proxy = s["sessions"] / edges / serving
    addresses = s["source_addresses"] or math.ceil(per_edge_and_proxy / s["ports_per_address"])
    # network, bytes/s
    pay = s["payload"]
    amqp = pay + f("amqp_overhead_bytes")
    traffic = {
        "backends -> roots": r["amqp_pubs"] * amqp,
        "roots <-> routers": 2 * r["amqp_pubs"] * amqp + s["delayed"] * amqp,
        "roots -> edges": r["messages_to_edges"] * (s["bundle"] * pay + f("amqp_overhead_bytes")),
        "routers <-> Redis": (3 * s["delayed"] * (pay + f("redis_bytes_per_trip"))
                              + 2 * ld["connects"] * roots * f("presence_bytes_per_change")),
        "edges -> browsers": ld["deliveries"] * (pay + f("stomp_head_bytes") + f("packet_overhead_bytes")),
    }
    use = dict(lim)
    use.update({
        "root CPU": r["cores"] / (roots * root_budget),
        "root queue rate": max(r["amqp_pubs"], r["messages_to_edges"] / edges) / roots / f("queue_max_per_s"),
        "router CPU": router_cores / (routers * s["router_cores"] * s["cpu_target"]),
        "Redis CPU": rd["cores"] / (masters * s["cpu_target"]),
        "Redis memory": rd["memory"] / (masters * redis_mem_budget),
        "Redis {pc} slot": rd["pc_cores"] / s["cpu_target"],
        "proxy fds": 2 * s["sessions"] / serving / s["proxy_fd_limit"],
        "proxy ports": per_edge_and_proxy / (addresses * s["ports_per_address"]),
    })
    return {
        "mode": mode, "infeasible": infeasible,
        "nodes": {"edges": edges, "roots": roots, "routers": routers, "redis_masters": masters,
                  "proxies": proxies},
        "edge": e, "root_cores": r["cores"], "router_cores": router_cores, "redis": rd,
        "source_addresses": addresses,
        "traffic": traffic, "use": use,
    }


# ---- output --------------------------------------------------------------------

def num(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB"


def gbit(bps: float) -> str:
    return f"{bps * 8 / 1e9:.2f} Gbit/s"


def bound_by(r: dict, tier: str) -> str:
    """The tier's limit closest to being reached, and how close."""
    name = max(TIERS[tier], key=lambda k: r["use"][k])
    return f"{name} {r['use'][name]:.2f}"


def report(s: dict, ld: dict, results: list[dict]) -> str:
    w, col = 36, 26
    lines = [
        f"load: {s['sessions']:,} sessions, {ld['users']:,.0f} users, {ld['connects']:,.0f} connects/s; "
        f"publications/s: user {num(s['user_pubs'])}, client {num(s['client_pubs'])} "
        f"(to {num(s['client_audience'])} sessions), global {num(s['global_pubs'])}, "
        f"delayed {num(s['delayed'])}; {ld['deliveries']:,.0f} deliveries/s",
        f"{'':{w}}" + "".join(f"{r['mode'] + (' (today)' if r['mode'] == 'fanout' else ' (projection)'):>{col}}"
                             for r in results),
    ]

    def row(label: str, fn) -> None:
        lines.append(f"{label:{w}}" + "".join(f"{fn(r):>{col}}" for r in results))

    def tier(label: str, key: str) -> None:
        given = s[key] is not None
        row(label + (" (given)" if given else ""), lambda r: f"{r['nodes'][key]:,}")
        row("  closest limit", lambda r: bound_by(r, key))

    tier("edges", "edges")
    row("  sessions each", lambda r: f"{r['edge']['sessions']:,.0f}")
    row("  notifications received/s each", lambda r: f"{r['edge']['received']:,.0f}")
    row("  deliveries/s each", lambda r: f"{r['edge']['deliveries']:,.0f}")
    row("  cores each: receive", lambda r: num(r["edge"]["cpu"]["receive"]))
    row("  cores each: deliver", lambda r: num(r["edge"]["cpu"]["deliver"]))
    row("  cores each: heartbeats, connects", lambda r: num(r["edge"]["cpu"]["heartbeats"] + r["edge"]["cpu"]["connects"]))
    row("  memory each", lambda r: gib(r["edge"]["memory"]))
    row("  dedup window (s)", lambda r: num(r["edge"]["dedup_window_s"]))
    row("  a global publication (core-s)", lambda r: num(r["edge"]["global_burst_core_s"]))
    tier("roots", "roots")
    row("  RabbitMQ cores, all roots", lambda r: num(r["root_cores"]))
    tier("routers", "routers")
    row("  router cores, all", lambda r: num(r["router_cores"]))
    tier("Redis masters", "redis_masters")
    row("  Redis cores, all", lambda r: num(r["redis"]["cores"]))
    row("  of which {pc} slot", lambda r: num(r["redis"]["pc_cores"]))
    row("  Redis memory, all", lambda r: gib(r["redis"]["memory"]))
    tier("HAProxy nodes", "proxies")
    row("  source addresses each" + (" (given)" if s["source_addresses"] else ""),
        lambda r: f"{r['source_addresses']:,}")
    lines.append("traffic")
    for k in results[0]["traffic"]:
        row(f"  {k}", lambda r, k=k: gbit(r["traffic"][k]))
    for r in results:
        first = max(r["use"].items(), key=lambda kv: kv[1])
        lines.append(f"first limit reached, {r['mode']}: {first[0]} at {first[1]:.2f}")
        for name in r["infeasible"]:
            lines.append(f"  no number of edges brings {name} under its limit ({r['mode']})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    try:
        s = settings(argv)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ld = load(s)
    modes = MODES if s["routing"] == "both" else (s["routing"],)
    results = [solve(s, ld, m) for m in modes]
    if s["json"]:
        print(json.dumps({"settings": {k: v for k, v in s.items() if k != "json"},
                          "load": {k: v for k, v in ld.items() if k != "scopes"},
                          "results": results}, indent=1))
    else:
        print(report(s, ld, results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
