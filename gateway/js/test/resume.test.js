// Resume after a page reload (the `resume` option) over a fake socket, clock
// and storage: what is stored and when, a new page resuming from it on its
// SUBSCRIBE, and every case where a stored position must not be used
// (another user, corrupt, past the head, another filter), storage failures.

import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';

import { connect, parsePosition, positionKey } from '../src/herald.js';
import { FakeClock, FakeSocket, FakeStorage, flush } from '../testing/fakes.js';

let clock;

beforeEach(() => {
  FakeSocket.reset();
  clock = new FakeClock();
});

const KEY = positionKey('default', null);
const stored = (user, epoch, seq) => JSON.stringify({ v: 1, user, epoch, seq });

/** A client over FakeSocket with `resume`; `rec` records what it emitted. */
async function client(options = {}) {
  const h = connect('ws://gw.test/ws', {
    token: 'jwt-1',
    WebSocket: FakeSocket,
    clock,
    random: () => 0.5,
    heartbeatMs: 0,
    ...options,
  });
  const rec = { errors: [], gaps: [], messages: [] };
  h.on('error', (e) => rec.errors.push(e));
  h.on('gap', (g) => rec.gaps.push(g));
  h.on('*', (m) => rec.messages.push(m));
  await flush();
  return { h, rec, sock: FakeSocket.last };
}

const subscribe = (sock) => sock.sentFrames('SUBSCRIBE').at(-1).headers;

/** The position stored, without when it was last heard (the tests of that say so). */
function position(storage) {
  const p = parsePosition(storage.getItem(KEY));
  if (p !== null) delete p.heard;
  return p;
}

test('parsePosition accepts a stored position and nothing else, without throwing', () => {
  assert.deepEqual(parsePosition(stored('alice', '18446744073709551615', 42)),
    { user: 'alice', epoch: '18446744073709551615', seq: 42 });
  assert.deepEqual(parsePosition(stored('é'.repeat(128), '0', 0)), { user: 'é'.repeat(128), epoch: '0', seq: 0 });
  const bad = [
    null, undefined, 42, '', 'not json', '{', 'null', '[]', '"x"', '{"__proto__":{"v":1}}',
    JSON.stringify({ v: 2, user: 'alice', epoch: '1', seq: 1 }),
    JSON.stringify({ user: 'alice', epoch: '1', seq: 1 }),
    stored('', '1', 1),
    stored(7, '1', 1),
    stored('é'.repeat(129), '1', 1), // 258 bytes: over the gateway's 256-byte sub
    stored('alice', 1, 1),
    stored('alice', '', 1),
    stored('alice', '-1', 1),
    stored('alice', '1e3', 1),
    stored('alice', '18446744073709551616', 1), // u64::MAX + 1: the gateway would refuse it
    stored('alice', '1'.repeat(21), 1),
    stored('alice', '1', -1),
    stored('alice', '1', 1.5),
    stored('alice', '1', '3'),
    stored('alice', '1', 2 ** 53),
    stored('alice', '1', null),
    JSON.stringify({ v: 1, user: 'alice', epoch: '1', seq: 1, pad: 'x'.repeat(2048) }), // too long
  ];
  for (const text of bad) assert.equal(parsePosition(text), null, `accepted ${String(text).slice(0, 80)}`);
});

test('positionKey: one entry per key and event filter, the filter in a stable order', () => {
  assert.equal(positionKey('default', null), 'herald.resume:default:*');
  assert.equal(positionKey('default', []), 'herald.resume:default:*');
  assert.equal(positionKey('inbox', ['order.*', 'chat.*']), 'herald.resume:inbox:chat.*,order.*');
  assert.equal(positionKey('inbox', ['chat.*', 'order.*']), positionKey('inbox', ['order.*', 'chat.*']));
});

test('the resume option is checked up front', () => {
  const base = { token: 'jwt', WebSocket: FakeSocket };
  for (const resume of ['session', true, 1, {}, { storage: 'local' }, { storage: {} }, { storage: { getItem() {} } },
    { storage: 'session', key: '' }, { storage: 'session', key: 'k'.repeat(65) }, { storage: 'session', key: 7 }]) {
    assert.throws(() => connect('ws://gw.test/ws', { ...base, resume }), TypeError, JSON.stringify(resume));
  }
  for (const resume of [undefined, null, false, { storage: 'session' }, { storage: new FakeStorage(), key: 'k'.repeat(64) }]) {
    assert.doesNotThrow(() => connect('ws://gw.test/ws', { ...base, resume }).close());
  }
});

test('a first page starts live at the head and stores its position after every message and gap', async () => {
  const storage = new FakeStorage();
  const { h, rec, sock } = await client({ resume: { storage } });
  const c = sock.handshake({ epoch: '77', seq: '4' });
  assert.equal(sock.sent.length, 1, 'nothing stored: SUBSCRIBE went in the message with CONNECT');
  assert.equal(c.headers['last-seq'], undefined, 'a fresh page has nothing to resume');
  assert.equal(subscribe(sock)['last-seq'], undefined);
  assert.deepEqual(position(storage), { user: 'alice', epoch: '77', seq: 4 });

  sock.message(5);
  sock.message(6);
  assert.deepEqual(rec.messages.map((m) => m.seq), [5, 6]);
  assert.deepEqual(position(storage), { user: 'alice', epoch: '77', seq: 6 });

  // The gap is stored before the app hears of it (a handler may reload the page).
  let seen = null;
  h.on('gap', () => { seen = position(storage); });
  sock.message(9, { event: 'herald.gap', reason: 'queue-overflow', body: '' });
  assert.deepEqual(seen, { user: 'alice', epoch: '77', seq: 9 });
  assert.deepEqual(rec.errors, []);
  assert.deepEqual([...storage.map.keys()], [KEY], 'one entry');
});

test('a reloaded page resumes from the stored position on its SUBSCRIBE: the missed ones once, in order', async () => {
  const storage = new FakeStorage();
  // The first page: sees 1..3, then goes away (a reload: no DISCONNECT).
  const first = await client({ resume: { storage } });
  first.sock.handshake({ epoch: '77', seq: '0' });
  for (const seq of [1, 2, 3]) first.sock.message(seq);
  first.h._dropTransport({ hold: true });

  // The new page: 4 and 5 were published meanwhile (head 5).
  const { h, rec, sock } = await client({ resume: { storage } });
  const c = sock.handshake({ epoch: '77', seq: '5' });
  assert.equal(sock.sent.length, 2, 'a stored position: SUBSCRIBE waited for CONNECTED to say whose token it is');
  assert.equal(c.headers['last-seq'], undefined, 'the CONNECT does not know whose token it is');
  const sub = subscribe(sock);
  assert.equal(sub['last-seq'], '3');
  assert.equal(sub.epoch, '77');
  assert.equal(h.lastSeq, 3);
  assert.equal(h.epoch, '77');
  // The replay (at-least-once: 3 again), then live.
  for (const seq of [3, 4, 5, 6]) sock.message(seq);
  assert.deepEqual(rec.messages.map((m) => m.seq), [4, 5, 6], 'each once');
  assert.deepEqual(position(storage), { user: 'alice', epoch: '77', seq: 6 });

  // A reconnect of this page resumes from memory on the CONNECT, as always.
  h._dropTransport();
  clock.runNext();
  await flush();
  const again = FakeSocket.last;
  assert.equal(again.handshake({ epoch: '77', seq: '6' }).headers['last-seq'], '6');
  assert.equal(subscribe(again)['last-seq'], undefined);
  assert.deepEqual(rec.errors, []);
});

test("another user's token never resumes the stored position; the entry becomes theirs", async () => {
  const storage = new FakeStorage({ [KEY]: stored('alice', '77', 3) });
  const { h, rec, sock } = await client({ resume: { storage } });
  sock.handshake({ epoch: '78', seq: '10', user: 'bob' });
  assert.equal(subscribe(sock)['last-seq'], undefined);
  assert.equal(subscribe(sock).epoch, undefined);
  assert.equal(h.lastSeq, 10);
  assert.equal(h.epoch, '78');
  sock.message(11, { epoch: '78' });
  assert.deepEqual(rec.messages.map((m) => m.seq), [11]);
  assert.deepEqual(position(storage), { user: 'bob', epoch: '78', seq: 11 });
});

test('a getToken that switches users: the CONNECT carried the old position, the SUBSCRIBE overrides it', async () => {
  const storage = new FakeStorage();
  const tokens = ['alice-jwt', 'bob-jwt'];
  let calls = 0;
  const { h, rec, sock } = await client({ token: undefined, getToken: () => tokens[Math.min(calls++, 1)], resume: { storage } });
  sock.handshake({ epoch: '77', seq: '5' });
  sock.message(6);
  h._dropTransport();
  clock.runNext();
  await flush();
  const next = FakeSocket.last;
  const c = next.handshake({ epoch: '90', seq: '2', user: 'bob' });
  assert.equal(c.headers.passcode, 'bob-jwt');
  assert.equal(c.headers['last-seq'], '6', "the CONNECT is sent before the gateway says whose token it is");
  const sub = subscribe(next);
  assert.equal(sub['last-seq'], '2', "bob's head, not alice's position");
  assert.equal(sub.epoch, '90');
  assert.equal(h.lastSeq, 2);
  next.message(3, { epoch: '90' });
  // A notification to both: bob's copy is his, not a repeat of alice's.
  next.message(4, { epoch: '90', 'message-id': 'id-6' });
  assert.deepEqual(rec.messages.map((m) => [m.seq, m.epoch]), [[6, '77'], [3, '90'], [4, '90']]);
  assert.deepEqual(position(storage), { user: 'bob', epoch: '90', seq: 4 });
});

test('the same switch without the resume option also starts the new user live', async () => {
  let calls = 0;
  const { h, sock } = await client({ token: undefined, getToken: () => ['a', 'b'][Math.min(calls++, 1)] });
  sock.handshake({ epoch: '77', seq: '5' });
  h._dropTransport();
  clock.runNext();
  await flush();
  const next = FakeSocket.last;
  next.handshake({ epoch: '90', seq: '2', user: 'bob' });
  assert.deepEqual([subscribe(next)['last-seq'], subscribe(next).epoch], ['2', '90']);
  assert.equal(h.userName, 'bob');
});

test('corrupt or foreign entries are ignored without an error, then overwritten', async () => {
  for (const text of ['{', 'null', '{"v":1,"user":"alice","epoch":"x","seq":1}', 'x'.repeat(5000), stored('alice', '77', -3)]) {
    FakeSocket.reset();
    const storage = new FakeStorage({ [KEY]: text });
    const { h, rec, sock } = await client({ resume: { storage } });
    sock.handshake({ epoch: '77', seq: '4' });
    assert.equal(subscribe(sock)['last-seq'], undefined, text.slice(0, 40));
    assert.equal(h.lastSeq, 4);
    assert.deepEqual(rec.errors, []);
    assert.deepEqual(position(storage), { user: 'alice', epoch: '77', seq: 4 });
    h._dropTransport({ hold: true }); // this page is done
  }
});

test('a stored seq past the head of the same epoch is not one this mailbox gave: ignored', async () => {
  const storage = new FakeStorage({ [KEY]: stored('alice', '77', 50) });
  const { h, rec, sock } = await client({ resume: { storage } });
  sock.handshake({ epoch: '77', seq: '4' });
  assert.equal(subscribe(sock)['last-seq'], undefined);
  assert.equal(h.lastSeq, 4);
  sock.message(5);
  assert.deepEqual(rec.messages.map((m) => m.seq), [5], 'not dropped as seen');
});

test("a stored position of an older epoch is sent; the gateway's epoch-changed gap moves it on", async () => {
  const storage = new FakeStorage({ [KEY]: stored('alice', '70', 50) });
  const { h, rec, sock } = await client({ resume: { storage } });
  sock.handshake({ epoch: '77', seq: '4' });
  assert.deepEqual([subscribe(sock)['last-seq'], subscribe(sock).epoch], ['50', '70']);
  sock.message(4, { event: 'herald.gap', reason: 'epoch-changed', epoch: '77', body: '' });
  sock.message(5, { epoch: '77' });
  assert.deepEqual(rec.gaps.map((g) => [g.reason, g.seq, g.epoch]), [['epoch-changed', 4, '77']]);
  assert.deepEqual(rec.messages.map((m) => m.seq), [5]);
  assert.equal(h.epoch, '77');
  assert.deepEqual(position(storage), { user: 'alice', epoch: '77', seq: 5 });
});

test('positions are per key and event filter', async () => {
  const storage = new FakeStorage({
    [positionKey('default', ['chat.*'])]: stored('alice', '77', 2),
    [positionKey('other', null)]: stored('alice', '77', 3),
  });
  const { sock } = await client({ resume: { storage } });
  sock.handshake({ epoch: '77', seq: '9' });
  assert.equal(subscribe(sock)['last-seq'], undefined, "the chat.* client's and the other key's are not ours");

  FakeSocket.reset();
  const chat = await client({ resume: { storage }, events: ['chat.*'] });
  chat.sock.handshake({ epoch: '77', seq: '9' });
  assert.equal(subscribe(chat.sock)['last-seq'], '2');

  FakeSocket.reset();
  const other = await client({ resume: { storage, key: 'other' } });
  other.sock.handshake({ epoch: '77', seq: '9' });
  assert.equal(subscribe(other.sock)['last-seq'], '3');
});

test('a storage that throws (blocked, full): one error, the client goes on from memory', async () => {
  const storage = new FakeStorage();
  storage.setItem = () => { throw new Error('QuotaExceededError'); };
  const { h, rec, sock } = await client({ resume: { storage } });
  sock.handshake({ epoch: '77', seq: '0' });
  sock.message(1);
  sock.message(2);
  assert.deepEqual(rec.messages.map((m) => m.seq), [1, 2]);
  assert.equal(rec.errors.length, 1);
  assert.match(rec.errors[0].message, /^resume storage unavailable: QuotaExceededError/);
  assert.ok(!rec.errors[0].fatal);
  assert.equal(h.state, 'connected');
});

test("{storage: 'session'} where there is no sessionStorage (node): one error, live from the head", async () => {
  assert.equal(globalThis.sessionStorage, undefined);
  const { h, rec, sock } = await client({ resume: { storage: 'session' } });
  sock.handshake({ epoch: '77', seq: '4' });
  sock.message(5);
  assert.equal(h.state, 'connected');
  assert.equal(h.lastSeq, 5);
  assert.equal(rec.errors.length, 1);
  assert.match(rec.errors[0].message, /^resume storage unavailable/);
});

test('without the resume option sessionStorage is neither read nor written', async () => {
  const storage = new FakeStorage({ [KEY]: stored('alice', '77', 1) });
  let reads = 0;
  const getItem = storage.getItem.bind(storage);
  storage.getItem = (k) => { reads++; return getItem(k); };
  globalThis.sessionStorage = storage;
  try {
    const { rec, sock } = await client();
    sock.handshake({ epoch: '77', seq: '4' });
    sock.message(5);
    assert.equal(subscribe(sock)['last-seq'], undefined);
    assert.deepEqual(rec.messages.map((m) => m.seq), [5]);
    assert.deepEqual(rec.errors, []);
  } finally {
    delete globalThis.sessionStorage;
  }
  assert.deepEqual([reads, storage.writes], [0, 0]);
});

test("{storage: 'session'} uses globalThis.sessionStorage", async () => {
  const storage = new FakeStorage({ [KEY]: stored('alice', '77', 1) });
  globalThis.sessionStorage = storage;
  try {
    const { sock } = await client({ resume: { storage: 'session' } });
    sock.handshake({ epoch: '77', seq: '4' });
    assert.equal(subscribe(sock)['last-seq'], '1');
    sock.message(2);
  } finally {
    delete globalThis.sessionStorage;
  }
  assert.deepEqual(position(storage), { user: 'alice', epoch: '77', seq: 2 });
});

test('a reloaded page says how long it was away: offline-ms on its SUBSCRIBE, from the stored heard time', async () => {
  const storage = new FakeStorage();
  clock.time = 1_795_000_000_000;
  const first = await client({ resume: { storage } });
  first.sock.handshake({ epoch: '77', seq: '0' });
  clock.advance(500);
  first.sock.message(1);
  assert.deepEqual(parsePosition(storage.getItem(KEY)), { user: 'alice', epoch: '77', seq: 1, heard: 1_795_000_000_500 });
  first.h._dropTransport({ hold: true });

  // Its edge died; the page is reloaded 4 s after the last frame.
  clock.advance(4000);
  const { sock } = await client({ resume: { storage } });
  sock.handshake({ epoch: '90', seq: '0' });
  const sub = subscribe(sock);
  assert.equal(sub['last-seq'], '1');
  assert.equal(sub.epoch, '77');
  assert.equal(sub['offline-ms'], '4000');

  // A position stored before `heard` existed resumes without it.
  const old = new FakeStorage({ [KEY]: stored('alice', '77', 1) });
  const again = await client({ resume: { storage: old } });
  again.sock.handshake({ epoch: '77', seq: '1' });
  assert.equal(subscribe(again.sock)['offline-ms'], undefined);
  assert.equal(parsePosition(JSON.stringify({ v: 1, user: 'a', epoch: '1', seq: 1, heard: -5 })).heard, undefined,
    'a bad heard is left out, the position kept');
});
