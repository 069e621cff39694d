#!/usr/bin/env python3
"""RabbitMQ's CPU per message and per bound queue, for docs/capacity.md.

What a root broker spends when a router forwards a notification to the edges:
one persistent publish to the fanout exchange `herald.edges`, routed to one
durable queue per edge, each delivered to its edge (prefetch 256, acked in
bursts with `multiple`, as the edges' uplink does). This runs that shape on a
RabbitMQ node of its own (started here, on 127.0.0.1:--port, with its own
data directory and Erlang cookie, stopped at the end) for several edge counts
and reads the node's CPU (`utime + stime` of its beam.smp from /proc) from the
first publish until every queue is drained. A least-squares line through
(queues, CPU per message) gives the cost of a publication (intercept) and of
each bound queue (slope).

Messages: `--payload` bytes of JSON, persistent, headers as a router's forward
carries them (`scope`, `users`, `event`, `x-herald-accepted-us`),
`message_id`, `content_type`. The publisher does not wait for confirms (a
blocking client that waits for each one would measure fsyncs, not the
broker's work); the router uses confirms, one more frame per burst.

Usage (pika from tests/distributed/requirements.txt):
  .venv/bin/python bench/rabbitmq_fanout.py [--queues 1,4,16] [--messages 20000]
Needs Debian's rabbitmq-server. Prints one JSON line per queue count, then
the fit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pika

CLK = os.sysconf("SC_CLK_TCK")


def rabbit_bin(name: str) -> str:
    """Debian's unwrapped script (the one on PATH drops to the rabbitmq user), as deploy/lib.sh."""
    direct = f"/usr/lib/rabbitmq/bin/{name}"
    return direct if os.access(direct, os.X_OK) else (shutil.which(name) or name)


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


class Node:
    """A private RabbitMQ node, as deploy/up starts a root."""

    def __init__(self, port: int):
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="herald-capacity-rabbit-")
        self.name = f"herald-capacity-{port}@localhost"
        d = self.dir
        with open(f"{d}/rabbitmq.conf", "w") as f:
            f.write(f"listeners.tcp.local = 127.0.0.1:{port}\nlog.console = false\n")
        with open(f"{d}/enabled_plugins", "w") as f:
            f.write("[].\n")
        open(f"{d}/rabbitmq-env.conf", "w").close()
        self.env = dict(
            os.environ, HOME=d, RABBITMQ_NODENAME=self.name, RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(port), RABBITMQ_DIST_PORT=str(port + 20000),
            RABBITMQ_MNESIA_BASE=f"{d}/mnesia", RABBITMQ_LOG_BASE=f"{d}/log",
            RABBITMQ_CONFIG_FILE=f"{d}/rabbitmq.conf",
            RABBITMQ_ENABLED_PLUGINS_FILE=f"{d}/enabled_plugins",
            RABBITMQ_CONF_ENV_FILE=f"{d}/rabbitmq-env.conf",
            RABBITMQ_PID_FILE=f"{d}/beam.pid", ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}")
        self.proc = subprocess.Popen([rabbit_bin("rabbitmq-server")], env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            subprocess.run([rabbit_bin("rabbitmqctl"), "-n", self.name, "wait", f"{d}/beam.pid",
                            "--timeout", "120"], env=self.env, check=True, stdout=subprocess.DEVNULL)
        except subprocess.CalledProcessError:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            sys.exit(f"error: RabbitMQ node {self.name} did not start; its log is in {d}/log")
        with open(f"{d}/beam.pid") as f:
            self.pid = int(f.read().strip())

    def stop(self) -> None:
        subprocess.run([rabbit_bin("rabbitmqctl"), "-n", self.name, "stop"], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def consume(port: int, queue: str, n: int, done: threading.Event) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=256)
    got = 0
    for method, _props, _body in ch.consume(queue, inactivity_timeout=60):
        if method is None:
            break
        got += 1
        if got % 64 == 0 or got == n:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == n:
            break
    ch.cancel()
    conn.close()
    if got == n:
        done.set()


def one_run(node: Node, queues: int, messages: int, payload: int) -> dict:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", node.port))
    ch = conn.channel()
    ex = f"herald.edges.cap{queues}"
    ch.exchange_declare(ex, "fanout", durable=True)
    names = [f"herald.edge.cap{queues}-{i}" for i in range(queues)]
    for q in names:
        ch.queue_declare(q, durable=True, arguments={"x-expires": 600000})
        ch.queue_bind(q, ex)
    body = json.dumps({"text": "x" * max(0, payload - 11)}).encode()
    dones = [threading.Event() for _ in names]
    threads = [threading.Thread(target=consume, args=(node.port, q, messages, d), daemon=True)
               for q, d in zip(names, dones)]
    for t in threads:
        t.start()
    c0, t0 = proc_cpu(node.pid), time.monotonic()
    for k in range(messages):
        props = pika.BasicProperties(
            delivery_mode=2, message_id=f"cap-{queues}-{k:08d}", content_type="application/json",
            headers={"scope": "user", "users": [f"user-{k % 1000:06d}"], "event": "chat.message",
                     "x-herald-accepted-us": int(time.time() * 1e6)})
        ch.basic_publish(ex, "", body, props)
    for t in threads:
        t.join(timeout=300)
    c1, t1 = proc_cpu(node.pid), time.monotonic()
    for q in names:
        ch.queue_delete(q)
    ch.exchange_delete(ex)
    conn.close()
    complete = all(d.is_set() for d in dones)
    return {"queues": queues, "messages": messages, "payload": payload, "complete": complete,
            "seconds": round(t1 - t0, 2), "broker_cpu_s": round(c1 - c0, 2),
            "broker_us_per_message": round((c1 - c0) / messages * 1e6, 1),
            "broker_us_per_delivery": round((c1 - c0) / (messages * queues) * 1e6, 1)}


def fit(rows: list[dict]) -> dict:
    xs = [r["queues"] for r in rows]
    ys = [r["broker_us_per_message"] for r in rows]
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")
    return {"fit": "broker us per message = a + b x queues", "a_us": round(my - slope * mx, 1),
            "b_us": round(slope, 1), "points": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queues", default="1,4,16")
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--payload", type=int, default=200)
    ap.add_argument("--port", type=int, default=5699)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    if not os.access(rabbit_bin("rabbitmq-server"), os.X_OK):
        sys.exit("error: rabbitmq-server not found (Debian's rabbitmq-server package)")
    counts = [int(x) for x in a.queues.split(",")]
    node = Node(a.port)
    try:
        print(f"rabbitmq node {node.name} pid {node.pid}, {os.cpu_count()} cores", flush=True)
        rows = []
        for _ in range(a.runs):
            for q in counts:
                row = one_run(node, q, a.messages, a.payload)
                print(json.dumps(row), flush=True)
                rows.append(row)
        print(json.dumps(fit(rows)))
    finally:
        node.stop()


if __name__ == "__main__":
    main()
