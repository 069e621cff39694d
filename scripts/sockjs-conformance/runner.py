# -*- coding: utf-8 -*-
"""Run the SockJS protocol test suite and report every test's outcome.

Python 2.7 (the suite is Python 2 code). Started by scripts/sockjs-conformance.sh inside the
virtualenv it prepares; it can also be run by hand:

    SOCKJS_URL=http://127.0.0.1:8081 python runner.py /path/to/sockjs-protocol-0.3.3.py
    SOCKJS_URL=http://127.0.0.1:8081 python runner.py /path/to/sockjs-protocol.py

The suite file is not part of Herald: pass the path of a copy, either v0.3.3's
`sockjs-protocol-0.3.3.py` (its `utils_03.py` and `httplib_fork.py` beside it) or the single-file
`sockjs-protocol.py` of the repository's HEAD (its `utils.py` and `httplib_fork.py` beside it).
This runner:

- loads the suite as a module and runs every test (or those named with --only) with a per-test
  time limit, through a result object that records pass / fail / error and the failing line;
- replaces the suite's `WebSocket8Client` (in `utils_03` or `utils`) with an equivalent built on
  ws4py 0.5.1 from PyPI (see `CompatWebSocket8Client`); v0.3.3's was written against a fork of
  ws4py 0.1 that is not on PyPI, with which its close detection never fires, and both lose the
  frames that arrive with the 101 response;
- records the bytes of every TCP connection a test opens, and prints them for each failing test
  (the requests and responses that reproduce the failure);
- prints a table and totals, and exits 1 if a test outside the not-applicable list did not pass,
  or a test on the superseded list (an answer the protocol changed later) did not fail exactly
  on that answer.
"""

from __future__ import print_function

import argparse
import fnmatch
import hashlib
import imp
import json
import os
import Queue
import re
import signal
import socket
import sys
import threading

# Bytes kept per connection and direction for the failure transcripts, and characters printed
# per run of bytes in one direction.
TRACE_KEEP_BYTES = 8192
TRACE_PRINT_CHARS = 1500
# The git blob ids of the suite files the not-applicable and superseded lists were written for,
# by file name: sockjs-protocol-0.3.3.py at tag v0.3.3 (commit 18ba798) and as PyPI's
# pyramid_sockjs 0.3.9 bundles it (upstream commit 47ad873 with one indentation fix), and
# sockjs-protocol.py at the repository's HEAD (commit fdf5b7d).
PINNED_SUITE_BLOBS = {
    'sockjs-protocol-0.3.3.py': {
        'c272b31162dcc57ac7eaad999c0d76a0f904726c': 'v0.3.3',
        '2fd53d212a812d03b714a687a61126de964e5cb5': 'pyramid_sockjs 0.3.9 copy',
    },
    'sockjs-protocol.py': {
        '5e8438eedfe43b0f4fca9b9db175ac5a0863fa6d': 'HEAD fdf5b7d',
    },
}


def die(message):
    """A setup problem, not a test result: exit 2."""
    sys.stderr.write('runner: %s\n' % message)
    sys.exit(2)


def git_blob_id(data):
    return hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()


# Connection tracing
# ==================

class Trace(object):
    """Every connection opened during one test, with the bytes each way, in order."""

    def __init__(self):
        self.lock = threading.Lock()
        self.connections = []

    def reset(self):
        with self.lock:
            self.connections = []

    def new_connection(self):
        with self.lock:
            conn = {'id': len(self.connections) + 1, 'peer': None, 'chunks': [],
                    'kept': {'>': 0, '<': 0}, 'dropped': {'>': 0, '<': 0}}
            self.connections.append(conn)
            return conn

    def record(self, conn, direction, data):
        if not data:
            if direction == '<':
                with self.lock:
                    conn['chunks'].append(('<', None))  # EOF seen by the client
            return
        with self.lock:
            room = TRACE_KEEP_BYTES - conn['kept'][direction]
            kept = data[:max(room, 0)]
            conn['kept'][direction] += len(kept)
            conn['dropped'][direction] += len(data) - len(kept)
            if not kept:
                return
            chunks = conn['chunks']
            if chunks and chunks[-1][0] == direction and chunks[-1][1] is not None:
                chunks[-1] = (direction, chunks[-1][1] + kept)
            else:
                chunks.append((direction, kept))

    def render(self):
        lines = []
        with self.lock:
            connections = list(self.connections)
        for conn in connections:
            lines.append('    connection %d to %s' % (conn['id'], conn['peer']))
            for direction, data in conn['chunks']:
                if data is None:
                    lines.append('      < (connection closed by the server)')
                    continue
                text = printable(data)
                if len(text) > TRACE_PRINT_CHARS:
                    text = text[:TRACE_PRINT_CHARS] + '... (cut)'
                lines.append('      %s %s' % (direction, text))
            for direction in '><':
                if conn['dropped'][direction]:
                    lines.append('      (%d further bytes %s not kept)' % (
                        conn['dropped'][direction], 'sent' if direction == '>' else 'received'))
        return '\n'.join(lines)


def printable(data):
    """Bytes as one readable line: printable ASCII as is, CR/LF/NUL and the rest escaped, and
    runs of one byte (the 2048 `h` of a prelude) shortened to `[2048 x 'h']`."""
    out = []
    i = 0
    while i < len(data):
        ch = data[i]
        run = 1
        while i + run < len(data) and data[i + run] == ch:
            run += 1
        if run >= 16:
            out.append("[%d x '%s']" % (run, escape_byte(ch)))
        else:
            out.append(escape_byte(ch) * run)
        i += run
    return ''.join(out)


def escape_byte(ch):
    o = ord(ch)
    if ch == '\r':
        return '\\r'
    if ch == '\n':
        return '\\n'
    if ch == '\\':
        return '\\\\'
    if 32 <= o < 127:
        return ch
    return '\\x%02x' % o


TRACE = Trace()


def install_socket_tracing():
    """Makes every socket created from now on record what it sends and receives in TRACE.

    `socket.create_connection`, ws4py and websocket-client all build `socket.socket`, so
    replacing that name reaches them. `makefile()` is left alone (it reads the raw socket), so
    the responses read by the suite's `old_POST_async` through httplib are not recorded.
    """
    base = socket.socket

    class TracingSocket(base):
        def __init__(self, *args, **kwargs):
            base.__init__(self, *args, **kwargs)
            conn = TRACE.new_connection()
            self._trace_conn = conn
            raw_recv, raw_send, raw_recv_into = self.recv, self.send, self.recv_into

            def recv(*a, **k):
                data = raw_recv(*a, **k)
                TRACE.record(conn, '<', data)
                return data

            def send(data, *a, **k):
                n = raw_send(data, *a, **k)
                TRACE.record(conn, '>', data[:n])
                return n

            def recv_into(buf, *a, **k):
                n = raw_recv_into(buf, *a, **k)
                TRACE.record(conn, '<', bytes(buf[:n]))
                return n

            self.recv, self.send, self.recv_into = recv, send, recv_into

        def connect(self, address):
            self._trace_conn['peer'] = '%s:%s' % address[:2]
            return base.connect(self, address)

        def sendall(self, data, *a, **k):
            result = base.sendall(self, data, *a, **k)
            TRACE.record(self._trace_conn, '>', data)
            return result

    socket.socket = TracingSocket
    socket.SocketType = TracingSocket


# WebSocket8Client on ws4py 0.5.1
# ===============================

def make_compat_websocket8_client():
    """The suite's `utils_03.WebSocket8Client`, on a ws4py release from PyPI.

    Same interface and behaviour as the original: `recv()` returns the next text message or,
    once the connection has ended, raises `ConnectionClosedException` (with `code` and
    `reason`); it waits at most one second; `close()` closes and joins the reader thread.
    The original learned about the close by overriding `read_from_connection` of its ws4py
    fork; ws4py 0.3 and later report it through `closed(code, reason)` instead, which is what
    this class uses (as the suite itself did later, in its single-file version).

    Differences from the fork, none of which a test checks: ws4py offers
    `Sec-WebSocket-Version: 13` (the fork offered 8; the suite checks versions 7, 8 and 13
    with raw requests in WebsocketHybi10.test_headersSanity), and it wants a ws:// URL, so
    the http:// URLs the suite passes are rewritten.
    """
    from ws4py.client.threadedclient import WebSocketClient
    from ws4py.exc import HandshakeError

    class CompatWebSocket8Client(object):
        class ConnectionClosedException(Exception):
            pass

        def __init__(self, url):
            if url.startswith('http://'):
                url = 'ws://' + url[len('http://'):]
            elif url.startswith('https://'):
                url = 'wss://' + url[len('https://'):]
            queue = Queue.Queue()
            self.queue = queue

            class IntWebSocketClient(WebSocketClient):
                def received_message(self, m):
                    queue.put(unicode(str(m), 'utf-8'))

                def closed(self, code, reason=None):
                    queue.put((code, reason or ''))

                def connect(self):
                    # ws4py's own connect() hands the bytes that arrived with the 101 response
                    # to the parser in one piece, which delivers only the first of several
                    # frames (a server that sends `o` and `c[...]` at once would look broken),
                    # and it starts the reader thread first. The fork fixed this (its commit
                    # f690ae7); here the bytes go to the reader's buffer, which feeds the
                    # parser one frame at a time, before the reader starts.
                    self.sock.connect(self.bind_addr)
                    self._write(self.handshake_request)
                    response = b''
                    while b'\r\n\r\n' not in response:
                        chunk = self.sock.recv(128)
                        if not chunk:
                            break
                        response += chunk
                    if b'\r\n\r\n' not in response:
                        self.close_connection()
                        raise HandshakeError('Invalid response')
                    head, _, body = response.partition(b'\r\n\r\n')
                    response_line, _, headers = head.partition(b'\r\n')
                    try:
                        self.process_response_line(response_line)
                        self.protocols, self.extensions = self.process_handshake_header(headers)
                    except HandshakeError:
                        self.close_connection()
                        raise
                    self.buf = body
                    self.handshake_ok()

            self.client = IntWebSocketClient(url)
            self.client.connect()

        def close(self):
            if self.client:
                client, self.client = self.client, None
                try:
                    client.close()
                except Exception:
                    pass  # The connection may already be gone.
                client._th.join(2.0)
                if client._th.is_alive():
                    client.close_connection()

        def send(self, data):
            self.client.send(data)

        def recv(self):
            try:
                r = self.queue.get(timeout=1.0)
                if isinstance(r, tuple):
                    ce = self.ConnectionClosedException()
                    (ce.code, ce.reason) = r
                    raise ce
                return r
            except:
                self.close()
                raise

    return CompatWebSocket8Client


# Running the tests
# =================

class TestTimeout(Exception):
    pass


class RecordingResult(object):
    """Collects one record per test; wraps a unittest2 TestResult."""

    def __init__(self, unittest, suite_file, test_timeout, trace):
        self.unittest = unittest
        self.suite_file = os.path.realpath(suite_file)
        self.test_timeout = test_timeout
        self.trace = trace
        self.records = []

    def run(self, test):
        result = self.unittest.TestResult()
        TRACE.reset()
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(self.test_timeout)
        try:
            test(result)
        except TestTimeout:
            result.errors.append((test, 'TestTimeout: no result after %d s\n' % self.test_timeout))
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        record = {'test': test_name(test), 'status': 'pass', 'message': '', 'location': ''}
        outcomes = [('fail', result.failures), ('error', result.errors)]
        for status, items in outcomes:
            for _, tb in items:
                record['status'] = status
                record['message'] = exception_text(tb)
                record['location'] = self.suite_line(tb)
                record['traceback'] = tb
                break
            if record['status'] != 'pass':
                break
        if result.skipped:
            record['status'] = 'skip'
            record['message'] = result.skipped[0][1]
        if record['status'] in ('fail', 'error') and self.trace:
            record['transcript'] = TRACE.render()
        self.records.append(record)
        return record

    def suite_line(self, tb):
        """The last `File "<suite>", line N` of a traceback, with the source line after it."""
        lines = tb.splitlines()
        found = ''
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith('File "') and self.suite_file_matches(stripped):
                number = stripped.split(', line ', 1)[1].split(',', 1)[0]
                source = lines[i + 1].strip() if i + 1 < len(lines) else ''
                found = 'line %s: %s' % (number, source)
        return found

    def suite_file_matches(self, frame_line):
        path = frame_line[len('File "'):].split('"', 1)[0]
        return os.path.realpath(path) == self.suite_file


def _on_alarm(signum, frame):
    raise TestTimeout()


def test_name(test):
    """`Class.test_method`, the name the suite's README uses to select one test."""
    return '%s.%s' % (test.__class__.__name__, test._testMethodName)


def exception_text(tb):
    """The exception part of a formatted traceback (all lines after the last frame)."""
    lines = tb.rstrip().splitlines()
    last_frame = max([i for i, l in enumerate(lines) if l.startswith('  File ')] or [-2])
    text = [l for l in lines[last_frame + 2:] if l.strip()]
    return '\n'.join(text) if text else (lines[-1] if lines else '')


def iter_tests(suite):
    for item in suite:
        if hasattr(item, '__iter__'):
            for test in iter_tests(item):
                yield test
        else:
            yield item


def load_not_applicable(path):
    """`pattern reason...` lines (fnmatch patterns on `Class.test`); # starts a comment."""
    entries = []
    if not path:
        return entries
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith('#'):
                continue
            parts = line.split(None, 1)
            entries.append((parts[0], parts[1].strip() if len(parts) > 1 else ''))
    return entries


def load_superseded(path):
    """`Class.test | regex | reason` lines (the regex must match the failure message's first
    line in full); # starts a comment."""
    entries = []
    if not path:
        return entries
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith('#'):
                continue
            parts = [p.strip() for p in line.split(' | ')]
            if len(parts) != 3:
                die('%s:%d: want `Class.test | message regex | reason`' % (path, number))
            entries.append((parts[0], re.compile(parts[1] + r'\Z'), parts[2]))
    return entries


def superseded_verdict(record, entries):
    """None if the test is not on the list; else (ok, reason, why)."""
    for name, pattern, reason in entries:
        if record['test'] != name:
            continue
        # unittest adds a diff of two strings after the first line.
        first = record['message'].splitlines()[0] if record['message'] else ''
        if record['status'] == 'fail' and pattern.match(first):
            return True, reason, ''
        if record['status'] == 'pass':
            return False, reason, 'passes: the gateway gives the answer v0.3.3 wanted'
        return False, reason, 'expected to fail with %r, got %s: %s' % (
            pattern.pattern[:-2], record['status'], record['message'])
    return None


def not_applicable_reason(name, entries):
    for pattern, reason in entries:
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def selected(name, only):
    if not only:
        return True
    return any(name == o or name.startswith(o + '.') or fnmatch.fnmatchcase(name, o)
               for o in only)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('suite', help='path to sockjs-protocol-0.3.3.py or sockjs-protocol.py')
    parser.add_argument('--not-applicable', help='file of `pattern reason` lines')
    parser.add_argument('--superseded',
                        help='file of `Class.test | message regex | reason` lines: tests whose '
                             'answer the protocol changed later, which must fail on it')
    parser.add_argument('--json', help='also write the results to this file')
    parser.add_argument('--only', action='append', default=[],
                        help='run only these tests (Class, Class.test or a glob); repeatable')
    parser.add_argument('--test-timeout', type=int, default=60,
                        help='seconds one test may take (default 60)')
    parser.add_argument('--retries', type=int, default=0,
                        help='run a failing test up to this many more times (default 0); a '
                             'pass on a retry is reported as such')
    parser.add_argument('--no-trace', action='store_true',
                        help='do not record connections for the failure transcripts')
    args = parser.parse_args()

    suite_file = os.path.abspath(args.suite)
    suite_dir = os.path.dirname(suite_file)
    with open(suite_file, 'rb') as f:
        source = f.read()
    blob = git_blob_id(source)
    # v0.3.3 imports its helpers from utils_03; the later single-file suite from utils.
    helpers = re.search(r'^from (\w+) import .*WebSocket8Client', source, re.M)
    if not helpers:
        die('%s does not look like the SockJS protocol suite' % suite_file)
    helpers = helpers.group(1)
    for helper in (helpers + '.py', 'httplib_fork.py'):
        if not os.path.exists(os.path.join(suite_dir, helper)):
            die('%s is not beside %s (use a checkout of sockjs-protocol)' % (helper, suite_file))
    url = os.environ.get('SOCKJS_URL', 'http://localhost:8081')
    known = PINNED_SUITE_BLOBS.get(os.path.basename(suite_file), {})
    print('suite   %s (git blob %s: %s)' % (
        suite_file, blob, known.get(blob) or
        'NOT a pinned revision, the not-applicable and superseded lists may not fit'))
    print('server  %s' % url)
    sys.stdout.flush()

    if not args.no_trace:
        install_socket_tracing()
    sys.path.insert(0, suite_dir)
    import unittest2
    # websocket-client: 0.4.1 for v0.3.3 (hixie-76, as its Makefile pins it); 0.59.0 for HEAD.
    import websocket
    websocket.setdefaulttimeout(5)  # its default is no timeout: a silent server would hang
    utils = __import__(helpers)
    utils.WebSocket8Client = make_compat_websocket8_client()
    module = imp.load_source('sockjs_protocol_suite', suite_file)

    entries = load_not_applicable(args.not_applicable)
    superseded = load_superseded(args.superseded)
    tests = [t for t in iter_tests(unittest2.TestLoader().loadTestsFromModule(module))
             if selected(test_name(t), args.only)]
    if not tests:
        die('no test matches %s' % ', '.join(args.only))

    recorder = RecordingResult(unittest2, suite_file, args.test_timeout, not args.no_trace)
    width = max(len(test_name(t)) for t in tests)
    print('\n%-*s  %s' % (width, 'test', 'result'))
    print('%s  %s' % ('-' * width, '-' * 6))
    retried = []
    for test in tests:
        record = recorder.run(test)
        reason = not_applicable_reason(record['test'], entries)
        # Several tests rely on sleeps of 0.25 s (a receiver must be registered by then) or on
        # an aborted request being noticed before the next one arrives; on a loaded machine they
        # can miss. Such a test is run again (--retries) and reported as passing on a retry;
        # a test that fails every time fails the run.
        tries = 1
        while (record['status'] in ('fail', 'error') and reason is None
               and superseded_verdict(record, superseded) is None and tries <= args.retries):
            first_try = record
            recorder.records.pop()
            record = recorder.run(test)
            record['retried_after'] = '%s: %s' % (
                first_try['status'], (first_try['message'].splitlines() or [''])[0])
            tries += 1
        if tries > 1 and record['status'] == 'pass':
            retried.append(record)
        record['not_applicable'] = reason
        verdict = superseded_verdict(record, superseded)
        record['superseded'] = None
        shown = record['status'].upper() if record['status'] in ('fail', 'error') else record['status']
        detail = ''
        if reason is not None:
            shown = 'n/a (%s)' % record['status']
        elif verdict is not None:
            ok, record['superseded'], why = verdict
            if ok:
                shown = 'superseded (fails on the later answer)'
            else:
                # Counted below as a failure of the run.
                record['status'], record['message'] = 'fail', 'superseded test ' + why
                shown = 'FAIL'
        if record['status'] in ('fail', 'error') and reason is None and not (
                verdict is not None and verdict[0]):
            first = record['message'].splitlines()[0] if record['message'] else ''
            detail = '  ' + (first if len(first) <= 100 else first[:97] + '...')
        if tries > 1:
            detail += '  (try %d of %d; first: %s)' % (tries, args.retries + 1,
                                                    record['retried_after'][:80])
        print('%-*s  %s%s' % (width, record['test'], shown, detail))
        sys.stdout.flush()

    records = recorder.records
    sup = [r for r in records if r['not_applicable'] is None and r['superseded'] is not None
           and r['status'] == 'fail' and not r['message'].startswith('superseded test ')]
    counted = [r for r in records if r['not_applicable'] is None and r not in sup]
    totals = dict((s, sum(1 for r in counted if r['status'] == s))
                  for s in ('pass', 'fail', 'error', 'skip'))
    na = [r for r in records if r['not_applicable'] is not None]
    print('\ntotal   %d tests: %d passed (%d on a retry), %d failed, %d errors, %d skipped; '
          '%d not applicable; %d superseded' % (
              len(records), totals['pass'], len(retried), totals['fail'], totals['error'],
              totals['skip'], len(na), len(sup)))

    bad = [r for r in counted if r['status'] in ('fail', 'error')]
    if bad:
        print('\nfailures (%d):' % len(bad))
        for r in bad:
            print('\n%s  %s' % (r['test'], r['status'].upper()))
            if r['location']:
                print('  at %s' % r['location'])
            print('  ' + r['message'].replace('\n', '\n  '))
            if r.get('transcript'):
                print('  connections:')
                print(r['transcript'])
    if na:
        print('\nnot applicable (%d):' % len(na))
        for r in na:
            print('  %-*s  %s: %s' % (width, r['test'], r['status'], r['not_applicable']))
    if retried:
        print('\npassed on a retry (%d):' % len(retried))
        for r in retried:
            print('  %-*s  first %s' % (width, r['test'], r['retried_after']))
    if sup:
        print('\nsuperseded by the later protocol, failing on the later answer (%d):' % len(sup))
        for r in sup:
            print('  %-*s  %s' % (width, r['test'], r['superseded']))

    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'suite': suite_file, 'suite_blob': blob, 'url': url,
                       'totals': totals, 'not_applicable': len(na), 'superseded': len(sup),
                       'passed_on_retry': len(retried),
                       'tests': records},
                      f, indent=1, sort_keys=True)
    sys.stdout.flush()
    # ws4py reader threads are daemons; don't wait for them.
    os._exit(1 if bad else 0)


if __name__ == '__main__':
    main()
