// STOMP 1.2 framing: encode/decode round trips, escaping, content-length,
// heart-beats, frames split at every byte, limits.

import { test } from 'node:test';
import assert from 'node:assert/strict';

import { encodeFrame, FrameDecoder, StompProtocolError } from '../src/herald.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

function decodeAll(...chunks) {
  const d = new FrameDecoder();
  const frames = [];
  for (const c of chunks) frames.push(...d.push(c));
  return { frames, decoder: d };
}

function plain(frame) {
  return { command: frame.command, headers: { ...frame.headers }, body: dec.decode(frame.body) };
}

test('a frame round-trips through encode and decode', () => {
  const text = encodeFrame('SEND', { destination: '/queue/a', 'x-n': 3 }, 'hello');
  assert.equal(text, 'SEND\ndestination:/queue/a\nx-n:3\ncontent-length:5\n\nhello\0');
  const { frames } = decodeAll(text);
  assert.deepEqual(frames.map(plain), [
    { command: 'SEND', headers: { destination: '/queue/a', 'x-n': '3', 'content-length': '5' }, body: 'hello' },
  ]);
});

test('a frame without body has no content-length; absent headers are skipped', () => {
  assert.equal(encodeFrame('DISCONNECT', { receipt: 'r1', skipped: undefined, nothing: null }), 'DISCONNECT\nreceipt:r1\n\n\0');
});

test('header escaping round-trips colons, newlines, CRs and backslashes', () => {
  const tricky = 'a:b\nc\\d\re';
  const text = encodeFrame('MESSAGE', { [tricky]: tricky, plain: 'x' });
  assert.ok(text.includes('a\\cb\\nc\\\\d\\re:a\\cb\\nc\\\\d\\re\n'));
  const { frames } = decodeAll(text);
  assert.equal(frames[0].headers[tricky], tricky);
  assert.equal(frames[0].headers.plain, 'x');
});

test('CONNECT and CONNECTED headers are not escaped (STOMP 1.2), and CR/LF are refused there', () => {
  assert.equal(encodeFrame('CONNECT', { passcode: 'a:b\\c' }), 'CONNECT\npasscode:a:b\\c\n\n\0');
  assert.throws(() => encodeFrame('CONNECT', { passcode: 'a\nb' }), StompProtocolError);
  const { frames } = decodeAll('CONNECTED\nserver:x\\c1\n\n\0');
  assert.equal(frames[0].headers.server, 'x\\c1');
});

test('an undefined escape is a protocol error', () => {
  assert.throws(() => decodeAll('MESSAGE\nk:\\t\n\n\0'), StompProtocolError);
});

test('content-length is in UTF-8 bytes and the body may hold NULs', () => {
  const body = 'héllo ✓ 🎉';
  const text = encodeFrame('MESSAGE', { seq: 1 }, body);
  assert.ok(text.includes(`content-length:${enc.encode(body).length}\n`));
  assert.equal(dec.decode(decodeAll(text).frames[0].body), body);

  const bytes = new Uint8Array([...enc.encode('MESSAGE\ncontent-length:3\n\n'), 1, 0, 2, 0]);
  const f = decodeAll(bytes.buffer).frames[0];
  assert.deepEqual([...f.body], [1, 0, 2]);
});

test('without content-length the body ends at the first NUL', () => {
  const { frames } = decodeAll('MESSAGE\nseq:1\n\nab\0MESSAGE\nseq:2\n\ncd\0');
  assert.deepEqual(frames.map((f) => [f.headers.seq, dec.decode(f.body)]), [['1', 'ab'], ['2', 'cd']]);
});

test('heart-beat EOLs between frames are skipped and counted; CRLF lines are accepted', () => {
  const { frames, decoder } = decodeAll('\n', '\r\n\n', 'RECEIPT\r\nreceipt-id:r1\r\n\r\n\0\n\nERROR\nmessage:m\n\n\0', '\n');
  assert.deepEqual(frames.map((f) => f.command), ['RECEIPT', 'ERROR']);
  assert.equal(frames[0].headers['receipt-id'], 'r1');
  assert.equal(decoder.heartbeats, 6);
});

test('a repeated header keeps its first value', () => {
  const { frames } = decodeAll('MESSAGE\nk:first\nk:second\n\n\0');
  assert.equal(frames[0].headers.k, 'first');
});

test('frames split at every byte boundary decode the same', () => {
  const stream = enc.encode(
    encodeFrame('MESSAGE', { seq: 1, event: 'chat.message' }, '{"text":"héllo"}') +
    '\n' +
    'MESSAGE\nseq:2\n\nno length\0' +
    encodeFrame('RECEIPT', { 'receipt-id': 'x:y' }),
  );
  const whole = decodeAll(stream).frames.map(plain);
  assert.equal(whole.length, 3);
  for (let cut = 1; cut < stream.length; cut++) {
    const parts = decodeAll(stream.slice(0, cut), stream.slice(cut)).frames.map(plain);
    assert.deepEqual(parts, whole, `split at ${cut}`);
  }
  // One byte at a time.
  const d = new FrameDecoder();
  const frames = [];
  for (const b of stream) frames.push(...d.push(new Uint8Array([b])));
  assert.deepEqual(frames.map(plain), whole);
});

test('string, ArrayBuffer and Uint8Array chunks are all accepted', () => {
  const text = encodeFrame('MESSAGE', { seq: 9 }, 'x');
  const a = decodeAll(text).frames.map(plain);
  const b = decodeAll(enc.encode(text).buffer).frames.map(plain);
  const c = decodeAll(enc.encode(text)).frames.map(plain);
  assert.deepEqual(a, b);
  assert.deepEqual(a, c);
});

test('limits: an oversized frame and a missing NUL after content-length are errors', () => {
  const d = new FrameDecoder({ maxFrameBytes: 64 });
  assert.throws(() => d.push('MESSAGE\ncontent-length:1000\n\n'.padEnd(80, 'x')), /larger than 64/);
  const e = new FrameDecoder({ maxFrameBytes: 64 });
  assert.throws(() => e.push('MESSAGE\n' + 'k:v\n'.repeat(30)), /larger than 64/);
  assert.throws(() => decodeAll('MESSAGE\ncontent-length:2\n\nabc\0'), /not followed by NUL/);
  assert.throws(() => decodeAll('MESSAGE\ncontent-length:-1\n\n\0'), /bad content-length/);
  assert.throws(() => decodeAll('bad command\n\n\0'), /bad command/);
});
