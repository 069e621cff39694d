// The client over a fake socket and a manual clock: handshake, dispatch,
// resume on reconnect, gaps, the token refresh hook, fatal refusals, close,
// heart-beats, the uid hint and SockJS options.

import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';

import { connect, RECENT_IDS } from '../src/herald.js';
import { FakeClock, FakeSocket, flush } from '../testing/fakes.js';

let clock;

beforeEach(() => {
  FakeSocket.reset();
  clock = new FakeClock();
});

/** A client over FakeSocket; `states` and `errors` record what it emitted. */
async function client(options = {}, url = 'ws://gw.test/ws') {
  const h = connect(url, {
    token: 'jwt-1',
    WebSocket: FakeSocket,
    clock,
    random: () => 0.5,
    backoff: { initialMs: 1000, maxMs: 8000 },
    heartbeatMs: 0,
    ...options,
  });
  const rec = { states: [], errors: [], gaps: [], messages: [] };
  h.on('state', (s) => rec.states.push(s));
  h.on('error', (e) => rec.errors.push(e));
  h.on('gap', (g) => rec.gaps.push(g));
  h.on('*', (m) => rec.messages.push(m));
  await flush();
  return { h, rec };
}

/** Run the pending reconnect timer (the earliest timer), let getToken settle. */
async function nextAttempt() {
  clock.runNext();
  await flush();
  return FakeSocket.last;
}

test('connects: CONNECT with passcode and heart-beat, SUBSCRIBE with receipt, then connected', async () => {
  const { h, rec } = await client({ events: ['chat.*', 'order.created'], heartbeatMs: 5000 });
  const sock = FakeSocket.last;
  assert.equal(FakeSocket.all.length, 1);
  assert.equal(sock.url, 'ws://gw.test/ws');
  assert.deepEqual(sock.protocols, ['v12.stomp']);
  assert.equal(sock.binaryType, 'arraybuffer');
  assert.deepEqual(rec.states, ['connecting']);

  const connectFrame = sock.handshake({ epoch: '77', seq: '4' });
  assert.deepEqual({ ...connectFrame.headers }, {
    'accept-version': '1.2', host: 'gw.test', 'heart-beat': '5000,5000', passcode: 'jwt-1',
  });
  const [sub] = sock.sentFrames('SUBSCRIBE');
  assert.equal(sub.headers.destination, '/user/notifications');
  assert.equal(sub.headers.ack, 'auto');
  assert.equal(sub.headers.events, 'chat.*,order.created');
  assert.ok(sub.headers.receipt);
  assert.deepEqual(rec.states, ['connecting', 'connected']);
  assert.equal(h.state, 'connected');
  assert.equal(h.epoch, '77');
  assert.equal(h.lastSeq, 4);
  assert.equal(h.userName, 'alice');
  assert.equal(h.transport, 'websocket-raw');
});

test('messages reach the handlers whose pattern matches; off() removes them', async () => {
  const { h, rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake();
  const chat = [];
  const orders = [];
  const stopChat = h.on('chat.*', (m) => chat.push(m));
  h.on('order.created', (m) => orders.push(m));

  sock.message(1, { event: 'chat.message', body: '{"text":"hi"}', topic: 'room-1' });
  sock.message(2, { event: 'order.created', body: '{"id":7}' });
  stopChat();
  sock.message(3, { event: 'chat.room.join', body: '{}' });
  h.off('order.created');
  sock.message(4, { event: 'order.created', body: '{}' });

  assert.deepEqual(chat.map((m) => m.seq), [1]);
  assert.deepEqual(orders.map((m) => m.seq), [2]);
  assert.deepEqual(rec.messages.map((m) => m.seq), [1, 2, 3, 4]);
  const m = chat[0];
  assert.equal(m.event, 'chat.message');
  assert.equal(m.scope, 'user');
  assert.equal(m.id, 'id-1');
  assert.equal(m.epoch, '77');
  assert.equal(m.topic, 'room-1');
  assert.equal(m.contentType, 'application/json');
  assert.equal(m.body, '{"text":"hi"}');
  assert.deepEqual(m.json(), { text: 'hi' });
  assert.equal(h.lastSeq, 4);
});

test('a binary WebSocket message (ArrayBuffer) is decoded; bytes are kept as is', async () => {
  const { rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake();
  const head = new TextEncoder().encode(
    'MESSAGE\nseq:1\nepoch:77\nevent:file.ready\ncontent-type:application/octet-stream\ncontent-length:3\n\n');
  sock.deliver(new Uint8Array([...head, 0xff, 0x00, 0xfe, 0]).buffer);
  assert.equal(rec.messages.length, 1);
  assert.deepEqual([...rec.messages[0].bytes], [0xff, 0x00, 0xfe]);
  assert.equal(rec.messages[0].contentType, 'application/octet-stream');
});

test('a base64 payload (SockJS carries text only) is decoded into bytes', async () => {
  const { rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake();
  sock.message(1, {
    event: 'file.ready', body: Buffer.from([0xff, 0x00, 0xfe, 0x41]).toString('base64'),
    'content-type': 'application/octet-stream', 'content-transfer-encoding': 'base64',
  });
  assert.deepEqual([...rec.messages[0].bytes], [0xff, 0x00, 0xfe, 0x41]);
  assert.equal(rec.messages[0].contentType, 'application/octet-stream');
});

test('a thrown handler does not break dispatch', async () => {
  const { h, rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake();
  const reported = [];
  const saved = globalThis.reportError;
  globalThis.reportError = (e) => reported.push(e);
  try {
    h.on('chat.*', () => { throw new Error('app bug'); });
    sock.message(1);
    sock.message(2);
  } finally {
    globalThis.reportError = saved;
  }
  assert.equal(reported.length, 2);
  assert.deepEqual(rec.messages.map((m) => m.seq), [1, 2]);
  assert.equal(h.state, 'connected');
});

test('reconnect after a drop resumes with last-seq and epoch, after a jittered backoff', async () => {
  const { h, rec } = await client();
  const first = FakeSocket.last;
  const c1 = first.handshake({ epoch: '900719925474099312', seq: '10' });
  assert.equal(c1.headers['last-seq'], undefined, 'no resume on the first CONNECT');
  first.message(11, { epoch: '900719925474099312' });
  first.message(12, { epoch: '900719925474099312' });

  first.serverClose(1006);
  assert.equal(h.state, 'reconnecting');
  assert.deepEqual(clock.pending(), [500], 'random 0.5 of the first cap (1000)');
  clock.advance(499);
  assert.equal(FakeSocket.all.length, 1);
  clock.advance(1);
  await flush();
  const second = FakeSocket.last;
  assert.equal(FakeSocket.all.length, 2);
  const c2 = second.handshake({ epoch: '900719925474099312', seq: '12' });
  assert.equal(c2.headers['last-seq'], '12');
  assert.equal(c2.headers.epoch, '900719925474099312', 'the epoch is kept as a string, exactly');

  // Replay, with a duplicate (at-least-once) that is dropped.
  second.message(12, { epoch: '900719925474099312' });
  second.message(13, { epoch: '900719925474099312' });
  assert.deepEqual(rec.messages.map((m) => m.seq), [11, 12, 13]);
  assert.deepEqual(rec.states, ['connecting', 'connected', 'reconnecting', 'connected']);

  // The attempt counter grows while attempts fail, and resets on success.
  second.serverClose();
  assert.deepEqual(clock.pending(), [500]);
  let s = await nextAttempt();
  s.serverClose(); // refused before open
  assert.deepEqual(clock.pending(), [1000]);
  s = await nextAttempt();
  s.serverClose();
  assert.deepEqual(clock.pending(), [2000]);
  s = await nextAttempt();
  s.serverClose();
  assert.deepEqual(clock.pending(), [4000]);
  s = await nextAttempt();
  s.serverClose();
  assert.deepEqual(clock.pending(), [4000], 'capped at maxMs 8000 * 0.5');
  s = await nextAttempt();
  const c3 = s.handshake({ epoch: '900719925474099312', seq: '13' });
  assert.equal(c3.headers['last-seq'], '13');
  s.serverClose();
  assert.deepEqual(clock.pending(), [500]);
});

test('a gap marker fires "gap", moves lastSeq to its seq, and is not a message', async () => {
  const { h, rec } = await client();
  const first = FakeSocket.last;
  first.handshake({ epoch: '5', seq: '3' });
  first.serverClose();
  const second = await nextAttempt();
  second.handshake({ epoch: '6', seq: '0' });
  assert.equal(second.sentFrames('CONNECT')[0].headers['last-seq'], '3');
  second.frame('MESSAGE', {
    subscription: 'sub-0', destination: '/user/notifications', 'message-id': 'gap-6-0', seq: '0', epoch: '6',
    event: 'herald.gap', reason: 'epoch-changed', 'content-length': '0',
  });
  assert.equal(rec.gaps.length, 1);
  assert.equal(rec.gaps[0].reason, 'epoch-changed');
  assert.equal(rec.gaps[0].seq, 0);
  assert.equal(rec.gaps[0].epoch, '6');
  assert.equal(rec.messages.length, 0);
  assert.equal(h.lastSeq, 0);
  assert.equal(h.epoch, '6');

  second.message(1, { epoch: '6' });
  assert.deepEqual(rec.messages.map((m) => m.seq), [1]);
  second.serverClose();
  const third = await nextAttempt();
  third.open();
  const c = third.sentFrames('CONNECT')[0];
  assert.equal(c.headers['last-seq'], '1');
  assert.equal(c.headers.epoch, '6');
});

test('getToken is called before every connect; an expired-token ERROR makes the next attempt use a fresh one', async () => {
  let n = 0;
  const calls = [];
  const { h, rec } = await client({
    token: undefined,
    getToken: async () => {
      calls.push(clock.now());
      return `jwt-${++n}`;
    },
  });
  const first = FakeSocket.last;
  first.handshake();
  assert.equal(first.sentFrames('CONNECT')[0].headers.passcode, 'jwt-1');
  first.serverClose();

  const second = await nextAttempt();
  second.open();
  assert.equal(second.sentFrames('CONNECT')[0].headers.passcode, 'jwt-2');
  second.frame('ERROR', { message: 'token expired' });
  assert.equal(rec.errors.length, 1);
  assert.equal(rec.errors[0].message, 'token expired');
  assert.equal(rec.errors[0].auth, true);
  assert.equal(rec.errors[0].fatal, false);
  assert.ok(second.closed, 'the client closes the refused transport');
  assert.equal(h.state, 'reconnecting');

  const third = await nextAttempt();
  third.handshake();
  assert.equal(third.sentFrames('CONNECT')[0].headers.passcode, 'jwt-3');
  assert.equal(h.state, 'connected');
  assert.equal(calls.length, 3);
});

test('a live session ended by "token expired" reconnects at once with a fresh token and resumes', async () => {
  let n = 0;
  const { h, rec } = await client({ token: undefined, getToken: async () => `jwt-${++n}` });
  const first = FakeSocket.last;
  first.handshake();
  first.message(1, { event: 'e', body: 'one' });
  // The server ends the session at the token's exp.
  first.frame('ERROR', { message: 'token expired' });
  assert.equal(rec.errors.length, 1);
  assert.equal(rec.errors[0].auth, true);
  assert.equal(rec.errors[0].fatal, false);
  await flush();
  // No backoff: nothing is wrong, the token just ran out.
  assert.equal(FakeSocket.all.length, 2, 'a new transport without waiting for a timer');
  const second = FakeSocket.last;
  second.handshake({ seq: '1' });
  const connect = second.sentFrames('CONNECT')[0].headers;
  assert.equal(connect.passcode, 'jwt-2');
  assert.equal(connect['last-seq'], '1');
  assert.equal(connect.epoch, '77');
  assert.equal(h.state, 'connected');
  assert.deepEqual(rec.states, ['connecting', 'connected', 'reconnecting', 'connected']);
});

test('a getToken that throws is reported and retried with backoff', async () => {
  let fail = true;
  const { h, rec } = await client({
    token: undefined,
    getToken: () => {
      if (fail) throw new Error('auth server down');
      return 'jwt-ok';
    },
  });
  assert.equal(FakeSocket.all.length, 0);
  assert.match(rec.errors[0].message, /getToken failed: auth server down/);
  assert.equal(h.state, 'reconnecting');
  fail = false;
  const s = await nextAttempt();
  s.handshake();
  assert.equal(s.sentFrames('CONNECT')[0].headers.passcode, 'jwt-ok');
  assert.equal(h.state, 'connected');
});

test('a static token that is refused stops the client: error, then closed, no retry', async () => {
  const { h, rec } = await client();
  const sock = FakeSocket.last;
  sock.open();
  sock.frame('ERROR', { message: 'token signature is invalid' }, 'bad token');
  assert.equal(rec.errors[0].auth, true);
  assert.equal(rec.errors[0].fatal, true);
  assert.equal(rec.errors[0].body, 'bad token');
  assert.deepEqual(rec.states, ['connecting', 'closed']);
  assert.deepEqual(clock.pending(), []);
  clock.advance(120_000);
  await flush();
  assert.equal(FakeSocket.all.length, 1);
  await h.close(); // idempotent
});

test('other ERRORs (slow consumer, shutdown) reconnect and resume', async () => {
  const { h, rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake({ seq: '2' });
  sock.message(3);
  sock.frame('ERROR', { message: 'slow consumer' });
  assert.equal(rec.errors[0].auth, false);
  assert.equal(h.state, 'reconnecting');
  const next = await nextAttempt();
  next.open();
  assert.equal(next.sentFrames('CONNECT')[0].headers['last-seq'], '3');
});

test('a refused subscription (ERROR with its receipt-id) is fatal', async () => {
  const { h, rec } = await client({ events: ['bad pattern!'] });
  const sock = FakeSocket.last;
  sock.open();
  sock.frame('CONNECTED', { version: '1.2', epoch: '1', seq: '0' });
  const [sub] = sock.sentFrames('SUBSCRIBE');
  sock.frame('ERROR', { message: 'events pattern "bad pattern!" is not valid', 'receipt-id': sub.headers.receipt });
  assert.equal(rec.errors[0].fatal, true);
  assert.equal(h.state, 'closed');
});

test('close() sends DISCONNECT, waits for its receipt, and never reconnects', async () => {
  const { h, rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake();
  const done = h.close();
  assert.equal(h.state, 'closed');
  const [disc] = sock.sentFrames('DISCONNECT');
  assert.ok(disc.headers.receipt);
  assert.equal(sock.closed, null, 'waits for the receipt');
  sock.frame('RECEIPT', { 'receipt-id': disc.headers.receipt });
  await done;
  assert.equal(sock.closed.code, 1000);
  assert.deepEqual(rec.states, ['connecting', 'connected', 'closed']);
  clock.advance(120_000);
  await flush();
  assert.equal(FakeSocket.all.length, 1);
});

test('close() without a receipt cuts after closeTimeoutMs; before CONNECTED it closes at once', async () => {
  const { h } = await client({ closeTimeoutMs: 300 });
  const sock = FakeSocket.last;
  sock.handshake();
  const done = h.close();
  clock.advance(300);
  await done;
  assert.ok(sock.closed);

  FakeSocket.reset();
  const { h: h2 } = await client();
  await h2.close();
  assert.ok(FakeSocket.last.closed);
  assert.equal(FakeSocket.last.sentFrames('DISCONNECT').length, 0);
});

test('heart-beats: EOLs at the negotiated interval; a silent server is cut and the client reconnects', async () => {
  const { h } = await client({ heartbeatMs: 1000 });
  const sock = FakeSocket.last;
  sock.handshake({ heartBeat: '3000,2000' }); // server sends every 3000, wants ours every 2000
  // Beat every 2000; watch for 2 x 3000 of silence. (The connect timer is gone.)
  assert.deepEqual(clock.pending().sort((a, b) => a - b), [2000, 6000]);
  clock.advance(2000);
  assert.equal(sock.sent.filter((d) => d === '\n').length, 1);
  sock.deliver('\n'); // the server's heart-beat at t=2000
  clock.advance(2000);
  assert.equal(sock.sent.filter((d) => d === '\n').length, 2);
  assert.equal(h.state, 'connected');
  assert.deepEqual(h._stats, { heartbeatsReceived: 1, heartbeatsSent: 2, connects: 1 });
  // Silent since t=2000: cut at t=8000, once 2 x 3000 ms have passed.
  clock.advance(3900);
  assert.equal(h.state, 'connected');
  clock.advance(100);
  assert.equal(h.state, 'reconnecting');
  assert.ok(sock.closed);
});

test('no CONNECTED within connectTimeoutMs: the attempt is abandoned and retried', async () => {
  const { h } = await client({ connectTimeoutMs: 5000 });
  const sock = FakeSocket.last;
  sock.open();
  clock.advance(5000);
  assert.ok(sock.closed);
  assert.equal(h.state, 'reconnecting');
  const next = await nextAttempt();
  assert.notEqual(next, sock);
});

test('_dropTransport({hold}) drops without DISCONNECT and waits for _release()', async () => {
  const { h, rec } = await client();
  const sock = FakeSocket.last;
  sock.handshake({ seq: '1' });
  sock.message(2);
  h._dropTransport({ hold: true });
  assert.ok(sock.closed);
  assert.equal(sock.sentFrames('DISCONNECT').length, 0);
  assert.equal(h.state, 'reconnecting');
  clock.advance(120_000);
  await flush();
  assert.equal(FakeSocket.all.length, 1, 'held');
  h._release();
  await flush();
  const next = FakeSocket.last;
  assert.equal(FakeSocket.all.length, 2);
  next.handshake({ seq: '4' });
  assert.equal(next.sentFrames('CONNECT')[0].headers['last-seq'], '2');
  next.message(3);
  next.message(4);
  assert.deepEqual(rec.messages.map((m) => m.seq), [2, 3, 4]);
});

test('the uid hint goes on the raw WebSocket URL and on the SockJS base URL', async () => {
  await client({ user: 'al ice' }, 'ws://gw.test/ws?v=1');
  assert.equal(FakeSocket.last.url, 'ws://gw.test/ws?v=1&uid=al%20ice');

  FakeSocket.reset();
  const { h } = await client({ user: 'bob', SockJS: FakeSocket, transports: ['xhr-streaming'], sockjsOptions: { timeout: 900 } },
    'http://gw.test:8080/sockjs');
  const sock = FakeSocket.last;
  assert.equal(sock.url, 'http://gw.test:8080/sockjs?uid=bob');
  assert.equal(sock.protocols, null);
  assert.deepEqual(sock.options, { timeout: 900, transports: ['xhr-streaming'] });
  sock.handshake();
  assert.equal(sock.sentFrames('CONNECT')[0].headers.host, 'gw.test');
  assert.equal(h.transport, 'xhr-streaming');
});

test('websocket-raw with a SockJS base URL opens <base>/websocket natively', async () => {
  await client({ transports: 'websocket-raw', user: 'u1' }, 'http://gw.test/sockjs');
  assert.equal(FakeSocket.last.url, 'ws://gw.test/sockjs/websocket?uid=u1');
  assert.deepEqual(FakeSocket.last.protocols, ['v12.stomp']);
});

test('options are checked up front', () => {
  assert.throws(() => connect('ws://x/ws', {}), /token/);
  assert.throws(() => connect('http://x/sockjs', { token: 't' }), /SockJS/);
});

test('a reconnect says how long ago the last session was heard from, and copies re-sent after a move are dropped', async () => {
  const { rec } = await client();
  const first = FakeSocket.last;
  first.handshake({ epoch: '5', seq: '0' });
  clock.advance(1000);
  first.message(1, { epoch: '5', 'message-id': 'n-a' });
  clock.advance(1500);
  first.message(2, { epoch: '5', 'message-id': 'n-b' });
  clock.advance(700);
  first.serverClose(1006); // its edge died 700 ms after the last frame
  const second = await nextAttempt(); // after the backoff (500 ms)
  const c = second.handshake({ epoch: '9', seq: '0' });
  assert.equal(c.headers['last-seq'], '2');
  assert.equal(c.headers.epoch, '5');
  assert.equal(c.headers['offline-ms'], '1200', 'from the last frame to this CONNECT');

  // The new edge's mailbox: a gap, then what the routers re-send, which
  // may include the last second before the move.
  second.frame('MESSAGE', {
    subscription: 'sub-0', destination: '/user/notifications', 'message-id': 'gap-9-0', seq: '0', epoch: '9',
    event: 'herald.gap', reason: 'epoch-changed', 'content-length': '0',
  });
  second.message(1, { epoch: '9', 'message-id': 'n-b' });
  second.message(2, { epoch: '9', 'message-id': 'n-c' });
  assert.deepEqual(rec.messages.map((m) => m.id), ['n-a', 'n-b', 'n-c']);

  // The position moved past the copy all the same.
  second.serverClose();
  const third = await nextAttempt();
  const again = third.handshake({ epoch: '9', seq: '2' });
  assert.equal(again.headers['last-seq'], '2');
  assert.equal(again.headers.epoch, '9');
});

test('a first CONNECT says nothing of offline-ms; the ids remembered are bounded', async () => {
  const { rec } = await client();
  const sock = FakeSocket.last;
  const c = sock.handshake({ epoch: '5', seq: '0' });
  assert.equal(c.headers['offline-ms'], undefined);
  for (let i = 1; i <= RECENT_IDS + 1; i++) sock.message(i, { epoch: '5', 'message-id': `m-${i}` });
  assert.equal(rec.messages.length, RECENT_IDS + 1);
  // m-1 was forgotten: a message with its id (in a new epoch) is handed on;
  // the newest one is still known.
  sock.message(1, { epoch: '6', 'message-id': 'm-1' });
  sock.message(2, { epoch: '6', 'message-id': `m-${RECENT_IDS + 1}` });
  assert.equal(rec.messages.length, RECENT_IDS + 2);
  assert.equal(rec.messages.at(-1).id, 'm-1');
});

test('a first session and a reconnect with the same token send SUBSCRIBE in the same message as CONNECT', async () => {
  const { h, rec } = await client({ events: ['chat.*'] });
  const first = FakeSocket.last;
  first.open();
  assert.equal(first.sent.length, 1, 'one message');
  assert.deepEqual(first.frames.map((f) => f.command), ['CONNECT', 'SUBSCRIBE'], 'nothing stored to wait for CONNECTED about');
  const [firstSub] = first.sentFrames('SUBSCRIBE');
  assert.equal(firstSub.headers['last-seq'], undefined, 'live from the head');
  assert.equal(firstSub.headers.events, 'chat.*');
  first.frame('CONNECTED', { version: '1.2', 'heart-beat': '0,0', epoch: '77', seq: '4', 'user-name': 'alice' });
  assert.equal(first.sent.length, 1, 'nothing more at CONNECTED');
  assert.equal(h.epoch, '77');
  assert.equal(h.lastSeq, 4);
  first.frame('RECEIPT', { 'receipt-id': firstSub.headers.receipt });
  assert.equal(h.state, 'connected');
  first.message(5);
  first.serverClose();

  const second = await nextAttempt();
  second.open();
  assert.equal(second.sent.length, 1, 'one message');
  assert.deepEqual(second.frames.map((f) => f.command), ['CONNECT', 'SUBSCRIBE']);
  const [connectFrame, sub] = second.frames;
  assert.equal(connectFrame.headers['last-seq'], '5');
  assert.equal(connectFrame.headers.epoch, '77');
  assert.equal(sub.headers['last-seq'], undefined, 'the CONNECT carries the position');
  assert.equal(sub.headers.events, 'chat.*');
  assert.equal(sub.headers.destination, '/user/notifications');
  second.frame('CONNECTED', { version: '1.2', 'heart-beat': '0,0', epoch: '77', seq: '6', 'user-name': 'alice' });
  assert.equal(second.sent.length, 1, 'nothing more at CONNECTED');
  assert.equal(h.state, 'reconnecting');
  second.message(6);
  second.frame('RECEIPT', { 'receipt-id': sub.headers.receipt });
  assert.equal(h.state, 'connected');
  assert.deepEqual(rec.messages.map((m) => m.seq), [5, 6]);
  assert.deepEqual(rec.errors, []);
});

test('a reconnect with another token waits for CONNECTED to subscribe', async () => {
  const tokens = ['jwt-a', 'jwt-b', 'jwt-b'];
  const { h } = await client({ token: undefined, getToken: async () => tokens.shift() });
  const first = FakeSocket.last;
  first.handshake({ seq: '1' });
  first.serverClose();

  // A fresh token: whose it is shows only in CONNECTED.
  const second = await nextAttempt();
  second.open();
  assert.deepEqual(second.frames.map((f) => f.command), ['CONNECT']);
  assert.equal(second.frames[0].headers['last-seq'], '1');
  second.frame('CONNECTED', { version: '1.2', 'heart-beat': '0,0', epoch: '77', seq: '1', 'user-name': 'alice' });
  assert.deepEqual(second.frames.map((f) => f.command), ['CONNECT', 'SUBSCRIBE']);
  second.frame('RECEIPT', { 'receipt-id': second.sentFrames('SUBSCRIBE')[0].headers.receipt });
  assert.equal(h.state, 'connected');
  second.serverClose();

  // The same token again: it was shown to be alice's.
  const third = await nextAttempt();
  third.open();
  assert.deepEqual(third.frames.map((f) => f.command), ['CONNECT', 'SUBSCRIBE']);
});

test('a pipelined SUBSCRIBE answered for another user is abandoned: the client reconnects at once without a position', async () => {
  const { h, rec } = await client();
  const first = FakeSocket.last;
  first.handshake({ epoch: '77', seq: '3', user: 'alice' });
  first.serverClose();

  const second = await nextAttempt();
  second.open();
  assert.deepEqual(second.frames.map((f) => f.command), ['CONNECT', 'SUBSCRIBE']);
  // The gateway's user for this token is now another one (its claims changed).
  second.frame('CONNECTED', { version: '1.2', 'heart-beat': '0,0', epoch: '12', seq: '40', 'user-name': 'bob' });
  second.message(38, { epoch: '12' });
  assert.ok(second.closed, 'the session with the wrong position is closed');
  assert.deepEqual(rec.messages, [], 'nothing from it reaches the app');
  await flush();
  assert.equal(FakeSocket.all.length, 3, 'a new transport without waiting for a timer');
  const third = FakeSocket.last;
  third.open();
  assert.deepEqual(third.frames.map((f) => f.command), ['CONNECT', 'SUBSCRIBE'], 'no position: a first session again');
  assert.equal(third.frames[0].headers['last-seq'], undefined);
  assert.equal(third.frames[1].headers['last-seq'], undefined);
  third.frame('CONNECTED', { version: '1.2', 'heart-beat': '0,0', epoch: '12', seq: '40', 'user-name': 'bob' });
  const [sub] = third.sentFrames('SUBSCRIBE');
  third.frame('RECEIPT', { 'receipt-id': sub.headers.receipt });
  assert.equal(h.state, 'connected');
  assert.equal(h.epoch, '12');
  assert.equal(h.lastSeq, 40);
  assert.equal(h.userName, 'bob');
});
