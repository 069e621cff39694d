"""A root's RabbitMQ restarted, or a router killed, in the middle of a
stream loses nothing a publisher got a confirm for, and the edge delivers
each id once."""

import json
import threading

import pika.exceptions

from herald_dist import (RECOVERY, TIMEOUT, ResumingSubscriber, amqp_publish, confirmed_channel,
                         duplicates, unique)

# Published before the restart, and again after it.
BEFORE = 100
AFTER = 100
# The publisher stays at most this many messages ahead of what the browser
# received: a flow-control window, so the stomp.py consumer is never a slow
# consumer the edge has to cut.
WINDOW = 40


class StreamPublisher(threading.Thread):
    """Publishes {"n": 0, 1, 2, ...} to one user through one root with
    publisher confirms; whatever was not confirmed (the connection died
    under it) is published again, with the same message id, once the root
    is back."""

    def __init__(self, dep, root, uid, run, sub: ResumingSubscriber):
        super().__init__(daemon=True)
        self.dep, self.root, self.uid, self.run_id, self.sub = dep, root, uid, run, sub
        self.confirmed: list[int] = []
        self.resent: list[int] = []  # numbers published again after a failure
        self.failures: list[str] = []  # why a publish or a connect failed
        self.connects = 0
        self.error: BaseException | None = None
        self.stop_now = threading.Event()
        self.progress = threading.Condition()

    def mid(self, n: int) -> str:
        return f"{self.run_id}-{n}"

    def run(self):
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
            with self.progress:
                self.progress.notify_all()

    def _run(self):
        conn = ch = None
        n = 0
        failed_at = None
        while not self.stop_now.is_set():
            self.sub.wait_for(f"the window to open for #{n}",
                              lambda: self.sub_count() >= n - WINDOW, RECOVERY)
            if ch is None:
                try:
                    conn = self.dep.amqp(self.root)
                    ch = confirmed_channel(conn)
                    self.connects += 1
                except (pika.exceptions.AMQPError, OSError) as e:
                    self.failures.append(f"connect: {e!r}")
                    self.stop_now.wait(0.1)  # retry interval while the root is down
                    continue
            try:
                amqp_publish(ch, json.dumps({"n": n}), {"users": [self.uid], "event": "stream.n"},
                             message_id=self.mid(n))
            except (pika.exceptions.AMQPError, OSError) as e:
                self.failures.append(f"publish #{n}: {e!r}")
                failed_at = n
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - it is broken already
                    pass
                conn = ch = None
                continue
            if failed_at == n:
                self.resent.append(n)
            with self.progress:
                self.confirmed.append(n)
                self.progress.notify_all()
            n += 1
        if conn is not None:
            conn.close()

    def sub_count(self) -> int:
        return len(self.sub.messages)  # called with the subscriber's lock held

    def wait_confirmed(self, count: int, timeout: float) -> None:
        with self.progress:
            ok = self.progress.wait_for(lambda: self.error or len(self.confirmed) >= count,
                                        timeout=timeout)
        if self.error:
            raise AssertionError(f"the publisher failed: {self.error!r}") from self.error
        assert ok, (f"only {len(self.confirmed)} of {count} publications confirmed after "
                    f"{timeout}s; failures: {self.failures[-5:]}")


def check_stream(pub: StreamPublisher, sub: ResumingSubscriber) -> None:
    """Stop the publisher; the browser must get every confirmed number, each
    id once, with no gap."""
    pub.stop_now.set()
    pub.join(TIMEOUT)
    assert not pub.is_alive()
    assert pub.error is None, repr(pub.error)
    want = {pub.mid(n) for n in pub.confirmed}
    sub.wait_for(f"all {len(want)} confirmed publications",
                 lambda: want <= {m.headers["message-id"] for m in sub.messages}, RECOVERY)
    ids = sub.ids()
    # Redeliveries (router or edge acks lost in the disruption) and the
    # publisher's own resends carry the same id: the edge drops them.
    assert not duplicates(ids), f"delivered twice: {duplicates(ids)}"
    assert set(ids) == want
    assert not sub.gaps, f"gaps: {[g.headers for g in sub.gaps]}"
    # Sequences stay consecutive within the mailbox's epoch.
    seqs = [int(m.headers["seq"]) for m in sub.messages]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    # A dropped browser session (not expected: the edge stays up) reconnects
    # with the resume headers.
    for resume in sub.reconnects:
        assert resume["last-seq"] and resume["epoch"], resume
    print(f"confirmed {len(pub.confirmed)}, publisher failures {len(pub.failures)}, "
          f"resent {pub.resent}, browser reconnects {len(sub.reconnects)}")


def test_a_root_restarted_mid_stream_loses_no_confirmed_publication(dep):
    root = "root1"
    sub = ResumingSubscriber(dep, unique("stream-user"))
    pub = StreamPublisher(dep, root, sub.uid, unique("stream"), sub)
    stopped = False
    try:
        pub.start()
        pub.wait_confirmed(BEFORE, TIMEOUT)
        # The restart, while the publisher keeps going.
        stopped = True
        dep.rabbitmqctl(root, "stop_app")
        assert dep.amqp_refused(root), "root1 still accepts AMQP connections after stop_app"
        dep.rabbitmqctl(root, "start_app")
        stopped = False
        pub.wait_confirmed(len(pub.confirmed) + AFTER, RECOVERY)
        check_stream(pub, sub)
        # The broker closed the publisher's connection: it saw a failure and
        # connected again.
        assert pub.failures and pub.connects >= 2, (pub.failures, pub.connects)
    finally:
        pub.stop_now.set()
        if stopped:
            dep.rabbitmqctl(root, "start_app")
        sub.stop()
    # The router and every edge are back on root1.
    dep.wait_ready(RECOVERY)


def test_a_router_killed_mid_stream_loses_no_confirmed_publication(dep):
    """The router acks a publication only once its forward is confirmed: a
    router that dies leaves the rest in herald.publications for the next."""
    sub = ResumingSubscriber(dep, unique("stream-user"))
    pub = StreamPublisher(dep, "root1", sub.uid, unique("stream"), sub)
    killed = False
    try:
        pub.start()
        pub.wait_confirmed(BEFORE, TIMEOUT)
        # The publisher runs a window ahead of the browser: up to WINDOW
        # publications are somewhere between the exchange and the browser,
        # some of them taken but not yet acked by router1.
        dep.kill("router1")
        killed = True
        out = dep.up_again()  # starts only what is not running: router1
        killed = False
        assert "started router1" in out, out
        pub.wait_confirmed(len(pub.confirmed) + AFTER, RECOVERY)
        check_stream(pub, sub)
    finally:
        pub.stop_now.set()
        if killed:
            dep.up_again()
        sub.stop()
    dep.wait_ready(RECOVERY)
