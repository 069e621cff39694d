#!/usr/bin/env python3
"""Redis CPU per inserted entry for the store's insert and candidate layouts.

A scratch measurement, not part of Herald: each variant starts its own
redis-server (AOF everysec, rewrites off unless REWRITES=1) on PORT, inserts
N entries with values of 230 bytes in calls of BATCH entries (16 calls per
pipeline), and prints the server's main-thread CPU per entry. It answers
"what would this layout cost" before any script or router code changes.

Variants:
  current   what lua/insert.lua does for an all-new batch: MSETNX, ZADD to
            `due` (score due, member id), ZADD to the topic's list
            (score 0, member due as 8 bytes big-endian ++ id)
  byscore   the list keyed like `due` (score due, member id)
  shared    byscore, the two ZADDs reading the same arguments
  nolist    no list index at all (what the list endpoint needs it for)
  plain     current's three commands in MULTI/EXEC, without Lua
  multi     MSETNX in MULTI/EXEC, the two ZADDs in a script after it
  onlyset   the MSETNX alone

Usage: pip install redis; N=500000 ORDER=random python3 bench/redis_layouts.py current byscore
ORDER is seq (due times rising, the indexes' best case) or random.
"""

import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import redis

PORT = int(os.environ.get("PORT", "6392"))
N = int(os.environ.get("N", "200000"))
BATCH = int(os.environ.get("BATCH", "64"))
ORDER = os.environ.get("ORDER", "seq")
REWRITES = os.environ.get("REWRITES", "0") == "1"
PIPE = 16


def msetnx_then(*zadds):
    """A script storing n values with MSETNX, then making each ZADD given
    (Lua source over `dues`, the first `due` argument, and `lists`)."""
    body = "\n  ".join(zadds)
    return f"""
local n = tonumber(ARGV[1])
local dues = 2 + 2 * n
local lists = dues + 2 * n
if redis.call('MSETNX', unpack(ARGV, 2, dues - 1)) == 1 then
  {body}
  return n
end
return 0
"""


DUE = "redis.call('ZADD', KEYS[1], unpack(ARGV, dues, lists - 1))"
LIST_OWN = "redis.call('ZADD', KEYS[2], unpack(ARGV, lists, lists + 2 * n - 1))"
LIST_SHARED = "redis.call('ZADD', KEYS[2], unpack(ARGV, dues, lists - 1))"

SCRIPTS = {
    "current": msetnx_then(DUE, LIST_OWN),
    "byscore": msetnx_then(DUE, LIST_OWN),
    "shared": msetnx_then(DUE, LIST_SHARED),
    "nolist": msetnx_then(DUE),
    "multi": """
if redis.call('DEL', KEYS[3]) == 1 then
  local n = tonumber(ARGV[1])
  redis.call('ZADD', KEYS[1], unpack(ARGV, 2, 1 + 2 * n))
  redis.call('ZADD', KEYS[2], unpack(ARGV, 2 + 2 * n, 1 + 4 * n))
  return n
end
return -1
""",
    "onlyset": """
local n = tonumber(ARGV[1])
return redis.call('MSETNX', unpack(ARGV, 2, 1 + 2 * n))
""",
}

# Sorted sets each variant makes besides the entries' keys (`due` and the list, unless named).
INDEXES = {"nolist": 1, "onlyset": 0}


def start(workdir):
    args = ["redis-server", "--port", str(PORT), "--bind", "127.0.0.1", "--dir", workdir,
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    if not REWRITES:
        args += ["--auto-aof-rewrite-percentage", "0"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    r = redis.Redis(port=PORT)
    deadline = time.monotonic() + 10
    while True:
        try:
            r.ping()
            return proc, r
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def cpu(r):
    info = r.info("cpu")
    return info["used_cpu_sys_main_thread"] + info["used_cpu_user_main_thread"]


def calls(name):
    base = 1_900_000_000_000
    dues = [base + i for i in range(N)]
    if ORDER == "random":
        random.Random(7).shuffle(dues)
    value = os.urandom(230)
    rng = random.Random(11)
    for b in range(0, N, BATCH):
        ids = [f"n-{i:012d}-{rng.randrange(1 << 30):x}" for i in range(b, min(N, b + BATCH))]
        kv, due, lst = [], [], []
        for i, d in zip(ids, dues[b:b + len(ids)]):
            kv += [f"h:{{3}}:e:{i}", value]
            due += [d, i]
            lst += [d, i] if name in ("byscore", "shared") else [0, struct.pack(">Q", d) + i.encode()]
        yield b, len(ids), kv, due, lst


def run(name):
    workdir = tempfile.mkdtemp(prefix="redis-layouts-")
    proc, r = start(workdir)
    try:
        sha = r.script_load(SCRIPTS[name]) if name in SCRIPTS else None
        work = list(calls(name))
        due_key, list_key = "h:{3}:due", "h:{3}:l:scheduled:t"
        c0, t0 = cpu(r), time.monotonic()
        pipe = r.pipeline(transaction=False)
        for k, (b, n, kv, due, lst) in enumerate(work):
            if name in ("current", "byscore"):
                pipe.evalsha(sha, 2, due_key, list_key, n, *kv, *due, *lst)
            elif name in ("shared", "nolist"):
                pipe.evalsha(sha, 2, due_key, list_key, n, *kv, *due)
            elif name == "onlyset":
                pipe.evalsha(sha, 0, n, *kv)
            elif name == "plain":
                pipe.execute_command("MULTI")
                pipe.execute_command("MSETNX", *kv)
                pipe.execute_command("ZADD", due_key, *due)
                pipe.execute_command("ZADD", list_key, *lst)
                pipe.execute_command("EXEC")
            elif name == "multi":
                marker = f"h:{{3}}:m:{b}"
                pipe.execute_command("MULTI")
                pipe.execute_command("MSETNX", marker, 1, *kv)
                pipe.evalsha(sha, 3, due_key, list_key, marker, n, *due, *lst)
                pipe.execute_command("EXEC")
            else:
                sys.exit(f"unknown variant {name}")
            if k % PIPE == PIPE - 1:
                pipe.execute()
        pipe.execute()
        c1, t1 = cpu(r), time.monotonic()
        stored = r.dbsize()
        expect = N + INDEXES.get(name, 2)
        if stored != expect:
            sys.exit(f"{name}: {stored} keys, expected {expect}")
        mem = r.info("memory")["used_memory"]
        print(f"{name:8s} order={ORDER} batch={BATCH} n={N}: {1e6 * (c1 - c0) / N:5.2f} us of Redis CPU "
              f"per entry, {N / (t1 - t0):8.0f}/s, {mem / N:4.0f} B per entry", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for variant in sys.argv[1:]:
        run(variant)
