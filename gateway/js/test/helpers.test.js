// The pure helpers: backoff, wildcard matching, URLs, auth classification.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { backoffDelay, isAuthError, matchEvent, rawWebSocketUrl, withUserHint } from '../src/herald.js';

const B = { initialMs: 1000, maxMs: 30000 };

test('backoff: the cap doubles per attempt up to maxMs', () => {
  const almostOne = () => 1 - Number.EPSILON;
  const caps = [0, 1, 2, 3, 4, 5, 6, 10, 60, 2000].map((a) => backoffDelay(a, B, almostOne));
  assert.deepEqual(caps, [999, 1999, 3999, 7999, 15999, 29999, 29999, 29999, 29999, 29999]);
});

test('backoff: full jitter, the bounds are [0, cap)', () => {
  for (const a of [0, 3, 9]) assert.equal(backoffDelay(a, B, () => 0), 0);
  assert.equal(backoffDelay(2, B, () => 0.5), 2000);
  assert.equal(backoffDelay(0, { initialMs: 0, maxMs: 0 }, Math.random), 0);
});

test('backoff: Math.random spreads delays over the whole range', () => {
  for (const attempt of [0, 2, 8]) {
    const cap = Math.min(B.maxMs, B.initialMs * 2 ** attempt);
    const samples = Array.from({ length: 2000 }, () => backoffDelay(attempt, B));
    for (const d of samples) {
      assert.ok(Number.isInteger(d) && d >= 0 && d < cap, `${d} outside [0, ${cap})`);
    }
    // Full jitter, not "cap +- 20%": both ends of the range are reached.
    assert.ok(Math.min(...samples) < cap * 0.05, 'nothing near 0');
    assert.ok(Math.max(...samples) > cap * 0.95, 'nothing near the cap');
    const tenths = new Set(samples.map((d) => Math.floor((d / cap) * 10)));
    assert.equal(tenths.size, 10, 'every tenth of the range is hit');
  }
});

test('wildcards: * matches any run of characters, dots included', () => {
  const yes = [
    ['chat.*', 'chat.message'],
    ['chat.*', 'chat.room.join'],
    ['chat.*', 'chat.'],
    ['*', 'anything.at.all'],
    ['*', ''],
    ['order.created', 'order.created'],
    ['*.created', 'order.created'],
    ['a*b*c', 'aXXbYYc'],
    ['a*b*c', 'abc'],
    ['*a*', 'banana'],
    ['**', 'x'],
    ['a*a*a', 'aaaa'],
  ];
  const no = [
    ['chat.*', 'chat'],
    ['chat.*', 'chatter.x'],
    ['order.created', 'order.created.v2'],
    ['order.created', 'order'],
    ['*.created', 'order.updated'],
    ['a*b*c', 'aXXbYY'],
    ['a*a*a', 'aa'],
    ['', 'x'],
  ];
  for (const [p, e] of yes) assert.ok(matchEvent(p, e), `${p} should match ${e}`);
  for (const [p, e] of no) assert.ok(!matchEvent(p, e), `${p} should not match ${e}`);
});

test('uid hint: added to the query, existing query kept, uid replaced, value encoded', () => {
  assert.equal(withUserHint('http://h:1/sockjs', 'alice'), 'http://h:1/sockjs?uid=alice');
  assert.equal(withUserHint('ws://h/ws?token=t', 'alice'), 'ws://h/ws?token=t&uid=alice');
  assert.equal(withUserHint('ws://h/ws?uid=old&x=1', 'bob'), 'ws://h/ws?x=1&uid=bob');
  assert.equal(withUserHint('ws://h/ws#frag', 'a b&c'), 'ws://h/ws?uid=a%20b%26c#frag');
  assert.equal(withUserHint('ws://h/ws', undefined), 'ws://h/ws');
  assert.equal(withUserHint('ws://h/ws', ''), 'ws://h/ws');
});

test('raw WebSocket URLs: ws as is; a SockJS base maps to <base>/websocket', () => {
  assert.equal(rawWebSocketUrl('ws://h/ws'), 'ws://h/ws');
  assert.equal(rawWebSocketUrl('wss://h/ws?x=1'), 'wss://h/ws?x=1');
  assert.equal(rawWebSocketUrl('http://h:8/sockjs'), 'ws://h:8/sockjs/websocket');
  assert.equal(rawWebSocketUrl('https://h/sockjs/?x=1'), 'wss://h/sockjs/websocket?x=1');
  assert.throws(() => rawWebSocketUrl('/sockjs'), TypeError);
});

test('auth errors are told apart from others', () => {
  for (const m of ['token expired', 'token signature is invalid', 'token is malformed: x',
    'no token: send a JWT as the CONNECT passcode', 'token algorithm not accepted']) {
    assert.ok(isAuthError(m), m);
  }
  for (const m of ['slow consumer', 'server shutting down', 'heart-beat timeout', 'frame too large', '']) {
    assert.ok(!isAuthError(m), m);
  }
});
