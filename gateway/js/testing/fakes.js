// Shared by test/*.test.js; lives outside test/ so that `node --test test/` does not run it as a test file.
// Test doubles for the client: a socket the test drives by hand, a server
// side that decodes what the client sent, a manual clock, and a Web Storage.

import { encodeFrame, FrameDecoder } from '../src/herald.js';

/** A manual clock: timers fire only when the test advances time. */
export class FakeClock {
  constructor() {
    this.time = 0;
    this.nextId = 1;
    /** @type {Map<number, {at: number, fn: Function, ms: number}>} */
    this.timers = new Map();
  }

  now = () => this.time;

  setTimeout = (fn, ms) => {
    const id = this.nextId++;
    this.timers.set(id, { at: this.time + ms, fn, ms });
    return id;
  };

  clearTimeout = (id) => {
    this.timers.delete(id);
  };

  /** Pending timer delays, in the order they were set. */
  pending() {
    return [...this.timers.values()].map((t) => t.ms);
  }

  /** Run the earliest timer only (and move time to it). */
  runNext() {
    let next = null;
    for (const [id, t] of this.timers) {
      if (next === null || t.at < next[1].at) next = [id, t];
    }
    if (next === null) throw new Error('no timer pending');
    this.timers.delete(next[0]);
    this.time = Math.max(this.time, next[1].at);
    next[1].fn();
  }

  /** Run every timer due within `ms`, in deadline order. */
  advance(ms) {
    const end = this.time + ms;
    for (;;) {
      let next = null;
      for (const [id, t] of this.timers) {
        if (t.at <= end && (next === null || t.at < next[1].at)) next = [id, t];
      }
      if (next === null) break;
      this.timers.delete(next[0]);
      this.time = next[1].at;
      next[1].fn();
    }
    this.time = end;
  }
}

/** Wait for queued microtasks and promise continuations. */
export function flush() {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * A fake WebSocket/SockJS. Every instance is recorded in `FakeSocket.all`;
 * the test plays the server: `open()`, `deliver(frame)`, `serverClose()`.
 */
export class FakeSocket {
  /** @type {FakeSocket[]} */
  static all = [];

  static reset() {
    FakeSocket.all = [];
  }

  static get last() {
    return FakeSocket.all[FakeSocket.all.length - 1];
  }

  constructor(url, protocolsOrReserved, options) {
    this.url = url;
    this.protocols = protocolsOrReserved;
    this.options = options;
    this.readyState = 0;
    this.sent = [];
    this.closed = null;
    this.onopen = null;
    this.onmessage = null;
    this.onclose = null;
    this.onerror = null;
    this.decoder = new FrameDecoder();
    /** Frames the client sent, decoded. */
    this.frames = [];
    this.transport = options && options.transports ? options.transports[0] : undefined;
    FakeSocket.all.push(this);
  }

  send(data) {
    if (this.readyState !== 1) throw new Error('send on a socket that is not open');
    this.sent.push(data);
    this.frames.push(...this.decoder.push(data));
  }

  close(code, reason) {
    this.closed = { code, reason };
    this.readyState = 3;
  }

  // ---- the server side ----

  open() {
    this.readyState = 1;
    this.onopen && this.onopen({});
  }

  deliver(data) {
    this.onmessage && this.onmessage({ data });
  }

  frame(command, headers = {}, body = '') {
    this.deliver(encodeFrame(command, headers, body));
  }

  serverClose(code = 1006) {
    this.readyState = 3;
    this.onclose && this.onclose({ code, reason: '' });
  }

  /** The decoded frames the client sent with this command. */
  sentFrames(command) {
    return this.frames.filter((f) => f.command === command);
  }

  /**
   * Open, answer CONNECT with CONNECTED (epoch/seq), answer the SUBSCRIBE's
   * receipt. Returns the CONNECT frame the client sent.
   */
  handshake({ epoch = '77', seq = '0', heartBeat = '0,0', user = 'alice' } = {}) {
    this.open();
    const [connect] = this.sentFrames('CONNECT');
    if (!connect) throw new Error('client sent no CONNECT');
    this.frame('CONNECTED', { version: '1.2', 'heart-beat': heartBeat, epoch, seq, 'user-name': user });
    const [sub] = this.sentFrames('SUBSCRIBE');
    if (!sub) throw new Error('client sent no SUBSCRIBE');
    this.frame('RECEIPT', { 'receipt-id': sub.headers.receipt });
    return connect;
  }

  message(seq, { event = 'chat.message', epoch = '77', body = '{"n":1}', ...rest } = {}) {
    this.frame('MESSAGE', {
      subscription: 'sub-0',
      destination: '/user/notifications',
      'message-id': `id-${seq}`,
      seq: String(seq),
      epoch,
      event,
      scope: 'user',
      'content-type': 'application/json',
      ...rest,
    }, body);
  }
}

/** An in-memory Web Storage (what `sessionStorage` offers the client). */
export class FakeStorage {
  /** @param {Record<string, string>} [entries] */
  constructor(entries = {}) {
    this.map = new Map(Object.entries(entries));
    this.writes = 0;
  }

  getItem(key) {
    return this.map.has(key) ? this.map.get(key) : null;
  }

  setItem(key, value) {
    this.writes++;
    this.map.set(key, String(value));
  }

  removeItem(key) {
    this.map.delete(key);
  }
}
