/**
 * @herald/client: the browser client of Herald, a real-time notification gateway.
 *
 * One self-contained ES module, no imports, no runtime dependencies (the
 * gateway serves this very file at `GET /js/herald.js`).
 *
 * # Layout
 * - STOMP 1.2 framing: {@link encodeFrame} and the incremental
 *   {@link FrameDecoder} (content-length, header escaping, heart-beat EOLs).
 * - Pure helpers: {@link matchEvent} (`*` wildcards, the gateway's rule),
 *   {@link backoffDelay} (exponential backoff with full jitter),
 *   {@link withUserHint} (`?uid=` on every request URL), {@link isAuthError}.
 * - Resume after a page reload (opt-in, the `resume` option): the position
 *   (user, epoch, last seq) kept in sessionStorage or a given storage,
 *   {@link positionKey}, {@link parsePosition} (bounded, validated).
 * - {@link HeraldClient}, made by {@link connect}: one STOMP session over a
 *   raw WebSocket or a SockJS object, one subscription to the user's stream,
 *   reconnect with backoff, resume from the last seen `seq` + `epoch`.
 *
 * # Contract with the gateway (docs/browser-protocol.md)
 * CONNECT carries `passcode` (the JWT), `heart-beat`, and on every reconnect
 * `last-seq` + `epoch` + `offline-ms` (how long ago the previous session was
 * last heard from: if its edge died, the routers re-send to the new edge
 * what went to the old one since then); CONNECTED answers with the mailbox
 * `epoch` and `seq`.
 * SUBSCRIBE `/user/notifications` (optional `events` filter) with a receipt:
 * the client is `connected` once the receipt arrives. A reconnect that
 * presents the same token as the session its position comes from sends
 * SUBSCRIBE in the same message as CONNECT (the gateway answers CONNECTED,
 * then the RECEIPT); otherwise SUBSCRIBE waits for CONNECTED. It carries `last-seq` +
 * `epoch` when they differ from the CONNECT's (a position restored from
 * storage once CONNECTED's `user-name` showed whose session it is; with
 * `offline-ms` from the time stored with it). MESSAGE
 * frames carry `message-id`, `seq`, `epoch`, `event`, `scope`,
 * `content-type`; a MESSAGE with `event:herald.gap` means the replay could
 * not cover the reconnect: the app reloads its state, and the stream goes on
 * from the marker's `seq`. A message whose `message-id` was among the last
 * {@link RECENT_IDS} handed to the app is not handed again (what the routers
 * re-send after a move to another edge may include the last second before
 * it).
 * Over SockJS (text only) a binary payload comes base64-encoded with
 * `content-transfer-encoding: base64`; `msg.bytes` is always the original.
 *
 * @module @herald/client
 */

/** Destination of the user's whole stream. */
export const DESTINATION = '/user/notifications';
/** Event name of the gap marker. */
export const GAP_EVENT = 'herald.gap';
/** How many message ids the client remembers to drop a repeat of. */
export const RECENT_IDS = 1024;
/** Value of `transports` that selects a native WebSocket (no SockJS). */
export const RAW_WEBSOCKET = 'websocket-raw';

/** Default options of {@link connect}. */
export const DEFAULTS = Object.freeze({
  backoff: Object.freeze({ initialMs: 1000, maxMs: 30000 }),
  heartbeatMs: 10000,
  /** From opening a transport to the subscription's receipt. */
  connectTimeoutMs: 15000,
  /** How long close() waits for the DISCONNECT receipt before it cuts. */
  closeTimeoutMs: 2000,
  /** Largest frame the decoder buffers (the gateway's payload limit is 1 MiB). */
  maxFrameBytes: 16 * 1024 * 1024,
});

const SUBSCRIPTION_ID = 'sub-0';
const DISCONNECT_RECEIPT = 'herald-disconnect';
const encoder = new TextEncoder();
const decoder = new TextDecoder();

// ---------------------------------------------------------------------------
// STOMP 1.2 framing
// ---------------------------------------------------------------------------

/** A frame that breaks STOMP framing, or exceeds a decoder limit. */
export class StompProtocolError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'StompProtocolError';
  }
}

/** STOMP 1.2: CONNECT and CONNECTED headers are not escaped. */
function escapes(command) {
  return command !== 'CONNECT' && command !== 'CONNECTED';
}

const ESCAPE = { '\\': '\\\\', '\r': '\\r', '\n': '\\n', ':': '\\c' };
const UNESCAPE = { '\\': '\\', r: '\r', n: '\n', c: ':' };

function escapeHeader(s) {
  return s.replace(/[\\\r\n:]/g, (c) => ESCAPE[c]);
}

function unescapeHeader(s) {
  if (!s.includes('\\')) return s;
  return s.replace(/\\(.?)/gs, (all, c) => {
    const u = UNESCAPE[c];
    if (u === undefined) throw new StompProtocolError(`undefined header escape ${JSON.stringify(all)}`);
    return u;
  });
}

/**
 * Encode one STOMP 1.2 frame as a string (what WebSocket and SockJS send).
 * A non-empty body gets a `content-length` (its UTF-8 byte count) unless the
 * caller gave one. Header names and values are escaped, except in
 * CONNECT/CONNECTED where STOMP 1.2 forbids escaping: there a CR, LF or (in a
 * name) colon is refused rather than sent.
 *
 * @param {string} command
 * @param {Record<string, string | number | boolean | null | undefined>} [headers] absent values are skipped
 * @param {string} [body]
 * @returns {string}
 */
export function encodeFrame(command, headers = {}, body = '') {
  const esc = escapes(command);
  let out = command + '\n';
  let hasLength = false;
  for (const [name, raw] of Object.entries(headers)) {
    if (raw === undefined || raw === null) continue;
    const value = String(raw);
    if (name === 'content-length') hasLength = true;
    if (esc) {
      out += escapeHeader(name) + ':' + escapeHeader(value) + '\n';
    } else {
      if (/[\r\n:]/.test(name) || /[\r\n]/.test(value)) {
        throw new StompProtocolError(`${command} header ${JSON.stringify(name)} cannot hold CR, LF or (in its name) ':'`);
      }
      out += name + ':' + value + '\n';
    }
  }
  if (body && !hasLength) out += 'content-length:' + encoder.encode(body).length + '\n';
  return out + '\n' + body + '\0';
}

/**
 * @typedef {object} Frame
 * @property {string} command
 * @property {Record<string, string>} headers first occurrence of a repeated header wins
 * @property {Uint8Array} body
 */

function toBytes(chunk) {
  if (typeof chunk === 'string') return encoder.encode(chunk);
  if (chunk instanceof Uint8Array) return chunk;
  if (chunk instanceof ArrayBuffer) return new Uint8Array(chunk);
  if (ArrayBuffer.isView(chunk)) return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError('frame data must be a string, ArrayBuffer or Uint8Array');
}

/** Index of the blank line that ends a frame head starting at `from`, and its length. */
function findHeadEnd(b, from) {
  for (let i = from; i < b.length; i++) {
    if (b[i] !== 10) continue;
    if (b[i + 1] === 10) return [i, 2];
    if (b[i + 1] === 13 && b[i + 2] === 10) return [i, 3];
  }
  return null;
}

/**
 * Incremental STOMP decoder: push chunks as they arrive (a frame may span
 * chunks, a chunk may hold several frames); heart-beats (bare EOLs between
 * frames) are skipped. Throws {@link StompProtocolError} on broken framing or
 * a frame larger than `maxFrameBytes`; the connection is then unusable.
 */
export class FrameDecoder {
  /** @param {{ maxFrameBytes?: number }} [options] */
  constructor({ maxFrameBytes = DEFAULTS.maxFrameBytes } = {}) {
    this.maxFrameBytes = maxFrameBytes;
    /** @type {Uint8Array} */
    this.buffer = new Uint8Array(0);
    /** Heart-beat EOLs seen so far. */
    this.heartbeats = 0;
    /** Parsed head of the frame in progress: {command, headers, bodyStart, length}. */
    this.head = null;
    this.scanned = 0; // bytes of the buffer already searched for the head end / NUL
  }

  /**
   * @param {string | ArrayBuffer | ArrayBufferView} chunk
   * @returns {Frame[]} the frames completed by this chunk
   */
  push(chunk) {
    const bytes = toBytes(chunk);
    if (this.buffer.length === 0) {
      this.buffer = bytes.slice();
    } else {
      const joined = new Uint8Array(this.buffer.length + bytes.length);
      joined.set(this.buffer);
      joined.set(bytes, this.buffer.length);
      this.buffer = joined;
    }
    const frames = [];
    let frame;
    while ((frame = this.next()) !== null) frames.push(frame);
    if (this.buffer.length > this.maxFrameBytes) {
      throw new StompProtocolError(`frame larger than ${this.maxFrameBytes} bytes`);
    }
    return frames;
  }

  /** @returns {Frame | null} */
  next() {
    const b = this.buffer;
    if (this.head === null) {
      let i = 0;
      while (i < b.length && (b[i] === 10 || (b[i] === 13 && b[i + 1] === 10))) {
        i += b[i] === 13 ? 2 : 1;
        this.heartbeats++;
      }
      if (i > 0) this.consume(i);
      const buf = this.buffer;
      const end = findHeadEnd(buf, Math.max(0, this.scanned - 2));
      if (end === null) {
        this.scanned = buf.length;
        return null;
      }
      this.head = this.parseHead(buf.subarray(0, end[0]), end[0] + end[1]);
      this.scanned = this.head.bodyStart;
    }
    const buf = this.buffer;
    const { command, headers, bodyStart, length } = this.head;
    let bodyEnd;
    if (length !== null) {
      bodyEnd = bodyStart + length;
      if (buf.length < bodyEnd + 1) {
        if (bodyEnd + 1 > this.maxFrameBytes) {
          throw new StompProtocolError(`frame larger than ${this.maxFrameBytes} bytes`);
        }
        return null;
      }
      if (buf[bodyEnd] !== 0) throw new StompProtocolError('frame body not followed by NUL');
    } else {
      bodyEnd = buf.indexOf(0, this.scanned);
      if (bodyEnd < 0) {
        this.scanned = buf.length;
        return null;
      }
    }
    const body = buf.slice(bodyStart, bodyEnd);
    this.head = null;
    this.consume(bodyEnd + 1);
    return { command, headers, body };
  }

  /** @private */
  consume(n) {
    this.buffer = n >= this.buffer.length ? new Uint8Array(0) : this.buffer.subarray(n);
    this.scanned = 0;
  }

  /** @private */
  parseHead(bytes, bodyStart) {
    const lines = decoder.decode(bytes).split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
    const command = lines[0];
    if (!/^[A-Z]+$/.test(command)) throw new StompProtocolError(`bad command ${JSON.stringify(command.slice(0, 32))}`);
    const esc = escapes(command);
    /** @type {Record<string, string>} */
    const headers = Object.create(null);
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i];
      const at = line.indexOf(':');
      if (at < 0) throw new StompProtocolError(`header line without ':' in ${command}`);
      const name = esc ? unescapeHeader(line.slice(0, at)) : line.slice(0, at);
      if (name in headers) continue;
      headers[name] = esc ? unescapeHeader(line.slice(at + 1)) : line.slice(at + 1);
    }
    let length = null;
    if (headers['content-length'] !== undefined) {
      const text = headers['content-length'].trim();
      if (!/^\d+$/.test(text)) throw new StompProtocolError(`bad content-length ${JSON.stringify(text)}`);
      length = Number(text);
    }
    return { command, headers, bodyStart, length };
  }
}

// ---------------------------------------------------------------------------
// Pure helpers
// ---------------------------------------------------------------------------

/**
 * Whether `event` matches `pattern`, where `*` matches any run of characters
 * (dots included, possibly empty): `chat.*` matches `chat.message` and
 * `chat.room.join`. The same rule as the gateway's `events` filter.
 *
 * @param {string} pattern
 * @param {string} event
 */
export function matchEvent(pattern, event) {
  let p = 0;
  let t = 0;
  let starP = -1;
  let starT = 0;
  while (t < event.length) {
    if (p < pattern.length && pattern[p] === '*') {
      starP = p++;
      starT = t;
    } else if (p < pattern.length && pattern[p] === event[t]) {
      p++;
      t++;
    } else if (starP >= 0) {
      p = starP + 1;
      t = ++starT;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === '*') p++;
  return p === pattern.length;
}

/**
 * Delay before reconnect attempt `attempt` (0 for the first): exponential
 * backoff with full jitter, uniformly in [0, min(maxMs, initialMs * 2^attempt)).
 *
 * @param {number} attempt
 * @param {{ initialMs: number, maxMs: number }} backoff
 * @param {() => number} [random] uniform in [0, 1)
 */
export function backoffDelay(attempt, { initialMs, maxMs }, random = Math.random) {
  const cap = Math.min(maxMs, initialMs * 2 ** Math.max(0, attempt));
  return Math.floor(random() * cap);
}

/**
 * `url` with `uid=<user>` in its query (replacing any uid there), so that a
 * proxy can route every request of a user to the same gateway. sockjs-client
 * keeps the base URL's query on every request it makes (info, sends,
 * receives), so the hint reaches all of them.
 *
 * @param {string} url
 * @param {string | null | undefined} user
 */
export function withUserHint(url, user) {
  if (user === undefined || user === null || user === '') return url;
  const hashAt = url.indexOf('#');
  const hash = hashAt >= 0 ? url.slice(hashAt) : '';
  const base = hashAt >= 0 ? url.slice(0, hashAt) : url;
  const q = base.indexOf('?');
  const path = q >= 0 ? base.slice(0, q) : base;
  const query = q >= 0 ? base.slice(q + 1).split('&').filter((p) => p && !/^uid(=|$)/.test(p)) : [];
  query.push('uid=' + encodeURIComponent(user));
  return path + '?' + query.join('&') + hash;
}

/**
 * The native WebSocket URL for `url`: a ws(s) URL as is; an http(s) SockJS
 * base URL becomes the SockJS raw WebSocket endpoint `ws(s)://…/<base>/websocket`.
 *
 * @param {string} url
 */
export function rawWebSocketUrl(url) {
  if (/^wss?:/i.test(url)) return url;
  const m = /^(https?):\/\/([^?#]*?)\/?([?#].*)?$/i.exec(url);
  if (!m) throw new TypeError(`not an http(s) or ws(s) URL: ${url}`);
  const scheme = m[1].toLowerCase() === 'https' ? 'wss' : 'ws';
  return `${scheme}://${m[2]}/websocket${m[3] || ''}`;
}

/** Whether an ERROR message says the session's token expired. */
function isExpiry(message) {
  return /\btoken expired\b/i.test(message || '');
}

/**
 * Whether an ERROR message means the token was refused (missing, expired,
 * invalid): retrying with the same token cannot succeed.
 *
 * @param {string} message
 */
export function isAuthError(message) {
  return /\btoken\b|\bexpired\b|unauthori[sz]ed|authenticat|access refused|\bjwt\b/i.test(message || '');
}

// ---------------------------------------------------------------------------
// Resume after a page reload (opt-in: the `resume` option)
// ---------------------------------------------------------------------------

/** Longest stored position read back, in characters (a user id is at most 256 bytes). */
const MAX_POSITION_CHARS = 2048;
/** Longest user id (the gateway's `sub` limit), in UTF-8 bytes. */
const MAX_USER_BYTES = 256;
/** Longest `resume.key`. */
const MAX_RESUME_KEY_CHARS = 64;
const U64_MAX = (1n << 64n) - 1n;

/**
 * @typedef {object} Position where a user's stream was left off
 * @property {string} user the user id the gateway authenticated (CONNECTED `user-name`)
 * @property {string} epoch the mailbox epoch, a u64 in decimal
 * @property {number} seq the last sequence seen
 * @property {number} [heard] when the session last sent a frame (the client's
 *   clock, ms since the Unix epoch): a reloaded page says how long it was
 *   away (`offline-ms`)
 */

/**
 * The storage key of a position: one entry per `key` and event filter (a
 * filtered subscription sees part of the stream, so its position is its
 * own). The user is inside the entry, not in its key: a tab keeps one entry
 * per client configuration however many users sign in.
 *
 * @param {string} key `resume.key`
 * @param {string[] | null | undefined} events the `events` filter
 */
export function positionKey(key, events) {
  const filter = events && events.length ? [...events].sort().join(',') : '*';
  return `herald.resume:${key}:${filter}`;
}

/**
 * A stored position's text, or null for anything that is not one: absent,
 * longer than 2048 characters, not JSON, another format version, a user id
 * that is empty or over 256 bytes, an epoch that is not a u64 in decimal, a
 * seq that is not a non-negative safe integer. Never throws.
 *
 * @param {unknown} text
 * @returns {Position | null}
 */
export function parsePosition(text) {
  if (typeof text !== 'string' || text.length > MAX_POSITION_CHARS) return null;
  let v;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  if (v === null || typeof v !== 'object' || v.v !== 1) return null;
  const { user, epoch, seq } = v;
  if (typeof user !== 'string' || user === '' || encoder.encode(user).length > MAX_USER_BYTES) return null;
  if (typeof epoch !== 'string' || !/^\d{1,20}$/.test(epoch) || BigInt(epoch) > U64_MAX) return null;
  if (!Number.isSafeInteger(seq) || seq < 0) return null;
  // Optional (positions stored before it existed have none): left out when
  // missing or not a time.
  if (Number.isSafeInteger(v.heard) && v.heard >= 0) return { user, epoch, seq, heard: v.heard };
  return { user, epoch, seq };
}

/** @param {Position} p */
function encodePosition({ user, epoch, seq, heard }) {
  return JSON.stringify(heard === undefined ? { v: 1, user, epoch, seq } : { v: 1, user, epoch, seq, heard });
}

/**
 * The `resume` option, checked: null when off, else the storage key and a
 * function returning the storage (`sessionStorage` is looked up when used:
 * reading it can throw where storage is blocked).
 *
 * @param {unknown} resume
 * @param {string[] | null} events
 * @returns {{ key: string, storage: () => StorageLike } | null}
 */
function resumeOption(resume, events) {
  if (resume === undefined || resume === null || resume === false) return null;
  const usage = "resume: give { storage: 'session' } or { storage: <an object with getItem and setItem> }";
  if (typeof resume !== 'object') throw new TypeError(usage);
  const { storage, key = 'default' } = /** @type {{storage?: unknown, key?: unknown}} */ (resume);
  if (typeof key !== 'string' || key === '' || key.length > MAX_RESUME_KEY_CHARS) {
    throw new TypeError(`resume.key must be a non-empty string of at most ${MAX_RESUME_KEY_CHARS} characters`);
  }
  if (storage === 'session') {
    return { key: positionKey(key, events), storage: () => globalThis.sessionStorage };
  }
  const s = /** @type {any} */ (storage);
  if (s && typeof s.getItem === 'function' && typeof s.setItem === 'function') {
    return { key: positionKey(key, events), storage: () => s };
  }
  throw new TypeError(usage);
}

/**
 * @typedef {object} StorageLike the part of the Web Storage API the client uses
 * @property {(key: string) => string | null} getItem
 * @property {(key: string, value: string) => void} setItem
 */

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

const RESERVED = new Set(['state', 'gap', 'error']);

/**
 * @typedef {'connecting' | 'connected' | 'reconnecting' | 'closed'} State
 */

/**
 * Options of {@link connect} (herald.d.ts has the full types).
 *
 * @typedef {object} ConnectOptions
 * @property {string} [token] the JWT; or give getToken
 * @property {() => string | Promise<string>} [getToken] a fresh JWT, called before every (re)connect
 * @property {string | string[]} [transports] SockJS transport names, or 'websocket-raw' for a native WebSocket
 * @property {Function} [SockJS] the SockJS constructor (required for http(s) URLs unless globalThis.SockJS)
 * @property {object} [sockjsOptions] more options for the SockJS constructor
 * @property {Function} [WebSocket] WebSocket constructor (default globalThis.WebSocket)
 * @property {string} [user] user-id hint, appended as ?uid= to every request URL
 * @property {string[]} [events] server-side event filter patterns
 * @property {{initialMs?: number, maxMs?: number}} [backoff] full-jitter exponential backoff
 * @property {number} [heartbeatMs] STOMP heart-beat both ways (0: none)
 * @property {number} [connectTimeoutMs] transport open to subscription receipt
 * @property {number} [closeTimeoutMs] close(): wait for the DISCONNECT receipt
 * @property {number} [maxFrameBytes] decoder limit
 * @property {{now?: () => number, setTimeout?: Function, clearTimeout?: Function}} [clock] for tests
 * @property {() => number} [random] uniform [0, 1), for tests
 * @property {{storage: 'session' | StorageLike, key?: string} | null | false} [resume]
 *   keep the position in storage and resume from it after a page reload
 */

/**
 * A notification as handlers receive it.
 */
export class HeraldMessage {
  /**
   * @param {Record<string, string>} headers
   * @param {Uint8Array} bytes
   */
  constructor(headers, bytes) {
    /** @type {string} */ this.event = headers.event ?? '';
    /** @type {string} */ this.scope = headers.scope ?? '';
    /** @type {string} */ this.id = headers['message-id'] ?? '';
    /** @type {number | null} */ this.seq = headers.seq !== undefined ? Number(headers.seq) : null;
    /** @type {string | null} mailbox epoch, opaque (a u64 can exceed 2^53) */
    this.epoch = headers.epoch ?? null;
    /** @type {string | null} */ this.topic = headers.topic ?? null;
    /** @type {string} */ this.contentType = headers['content-type'] ?? '';
    /** @type {Record<string, string>} every header of the MESSAGE frame */
    this.headers = headers;
    // SockJS carries text only: the gateway sends a binary payload there in
    // base64, saying so with `content-transfer-encoding: base64`.
    if ((headers['content-transfer-encoding'] || '').toLowerCase() === 'base64') bytes = fromBase64(bytes);
    /** @type {Uint8Array} the payload, byte for byte */
    this.bytes = bytes;
    /** @type {string} the payload decoded as UTF-8 */
    this.body = decoder.decode(bytes);
  }

  /** The body parsed as JSON (throws if it is not JSON). */
  json() {
    return JSON.parse(this.body);
  }
}

/**
 * One Herald connection: connects, subscribes to the user's stream, and
 * keeps reconnecting (with resume) until {@link HeraldClient#close}.
 */
export class HeraldClient {
  /**
   * @param {string} url
   * @param {ConnectOptions} options
   */
  constructor(url, options = {}) {
    if (typeof url !== 'string' || url === '') throw new TypeError('connect(url): url must be a string');
    const o = options;
    if (typeof o.token !== 'string' && typeof o.getToken !== 'function') {
      throw new TypeError('connect(): give a token string or a getToken function');
    }
    this.options = {
      backoff: { ...DEFAULTS.backoff, ...(o.backoff || {}) },
      heartbeatMs: o.heartbeatMs ?? DEFAULTS.heartbeatMs,
      connectTimeoutMs: o.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs,
      closeTimeoutMs: o.closeTimeoutMs ?? DEFAULTS.closeTimeoutMs,
      maxFrameBytes: o.maxFrameBytes ?? DEFAULTS.maxFrameBytes,
      events: o.events ? [...o.events] : null,
    };
    this._resume = resumeOption(o.resume, this.options.events);
    this._token = o.token ?? null;
    this._getToken = o.getToken ?? null;
    const transports = o.transports;
    const raw = /^wss?:/i.test(url) || transports === RAW_WEBSOCKET
      || (Array.isArray(transports) && transports.length === 1 && transports[0] === RAW_WEBSOCKET);
    this._raw = raw;
    /** The URL the transport opens (with the uid hint). */
    this.url = withUserHint(raw ? rawWebSocketUrl(url) : url, o.user);
    if (raw) {
      /** @type {any} */
      this._WebSocket = o.WebSocket ?? globalThis.WebSocket;
      if (typeof this._WebSocket !== 'function') throw new TypeError('no WebSocket constructor: pass options.WebSocket');
    } else {
      /** @type {any} */
      this._SockJS = o.SockJS ?? globalThis.SockJS;
      if (typeof this._SockJS !== 'function') {
        throw new TypeError(`${url} is a SockJS URL: pass options.SockJS (import SockJS from 'sockjs-client'), or a ws:// URL`);
      }
      this._sockjsOptions = { ...(o.sockjsOptions || {}) };
      if (Array.isArray(transports)) this._sockjsOptions.transports = [...transports];
      else if (typeof transports === 'string') this._sockjsOptions.transports = [transports];
    }
    this._host = hostOf(this.url);
    const clock = o.clock || {};
    this._now = clock.now ?? (() => Date.now());
    this._setTimeout = clock.setTimeout ?? ((fn, ms) => setTimeout(fn, ms));
    this._clearTimeout = clock.clearTimeout ?? ((id) => clearTimeout(id));
    this._random = o.random ?? Math.random;

    /** @type {Map<string, Set<Function>>} */
    this._handlers = new Map();
    /** @type {State | null} null until the first attempt starts */
    this._state = null;
    /** @type {number | null} */
    this._lastSeq = null;
    /** @type {string | null} */
    this._epoch = null;
    /** @type {string | null} */
    this._userName = null;
    /** @type {string | null} whose position _epoch/_lastSeq are (CONNECTED `user-name`) */
    this._positionUser = null;
    /** @type {string | null} the token a CONNECTED last showed to be _positionUser's */
    this._positionToken = null;
    /** @type {number | null} when a frame last came from a session (this._now()) */
    this._lastHeard = null;
    /** @type {Set<string>} the last RECENT_IDS message ids, oldest first */
    this._recentIds = new Set();
    this._storageFailed = false;
    /** Counters for tests and debugging (every transport so far). */
    this._stats = { heartbeatsReceived: 0, heartbeatsSent: 0, connects: 0 };
    this._attempt = 0;
    this._everConnected = false;
    this._closed = false;
    this._hold = false;
    this._generation = 0;
    this._sock = null;
    this._session = null; // per-transport state, see _open
    this._retryTimer = null;
    this._closedPromise = null;
    this._onOnline = () => {
      if (this._retryTimer !== null && !this._hold) {
        this._clearTimeout(this._retryTimer);
        this._retryTimer = null;
        this._attempt = 0;
        this._open();
      }
    };
    if (typeof globalThis.addEventListener === 'function') globalThis.addEventListener('online', this._onOnline);
    // Start after the caller had a chance to attach handlers.
    queueMicrotask(() => this._open());
  }

  /** @returns {State} */
  get state() { return this._state ?? 'connecting'; }
  /** Sequence of the last message seen (or of the last gap marker). */
  get lastSeq() { return this._lastSeq; }
  /** Epoch of the user's mailbox, as a string. */
  get epoch() { return this._epoch; }
  /** The user id the server authenticated (CONNECTED `user-name`); null before. */
  get userName() { return this._userName; }
  /** The transport in use: 'websocket-raw', or SockJS's name for it ('xhr-streaming', …); null when none. */
  get transport() {
    if (!this._sock) return null;
    return this._raw ? RAW_WEBSOCKET : (this._sock.transport ?? null);
  }

  /**
   * Listen. `name` is an event pattern (`*` wildcards) or one of `state`,
   * `gap`, `error`. Returns a function that removes the handler.
   *
   * @param {string} name
   * @param {Function} handler
   * @returns {() => void}
   */
  on(name, handler) {
    if (typeof handler !== 'function') throw new TypeError('on(name, handler): handler must be a function');
    let set = this._handlers.get(name);
    if (!set) this._handlers.set(name, (set = new Set()));
    set.add(handler);
    return () => this.off(name, handler);
  }

  /**
   * Stop listening: one handler, or every handler of `name` when none given.
   *
   * @param {string} name
   * @param {Function} [handler]
   */
  off(name, handler) {
    const set = this._handlers.get(name);
    if (!set) return this;
    if (handler) set.delete(handler);
    if (!handler || set.size === 0) this._handlers.delete(name);
    return this;
  }

  /**
   * Disconnect for good: DISCONNECT (waiting up to closeTimeoutMs for its
   * receipt), then close the transport. No reconnect follows.
   *
   * @returns {Promise<void>} settles when the transport is closed
   */
  close() {
    if (this._closedPromise) return this._closedPromise;
    this._closed = true;
    this._cancelRetry();
    if (typeof globalThis.removeEventListener === 'function') globalThis.removeEventListener('online', this._onOnline);
    const sock = this._sock;
    const s = this._session;
    this._closedPromise = new Promise((resolve) => {
      if (!sock) return resolve();
      this._stopTimers(s);
      const finish = () => {
        this._clearTimeout(s.closeTimer);
        detach(sock);
        try { sock.close(1000, 'bye'); } catch { /* already closed */ }
        this._sock = null;
        resolve();
      };
      if (s.stomp && isOpen(sock)) {
        s.onDisconnected = finish;
        sock.onclose = finish;
        s.closeTimer = this._setTimeout(finish, this.options.closeTimeoutMs);
        try { sock.send(encodeFrame('DISCONNECT', { receipt: DISCONNECT_RECEIPT })); } catch { finish(); }
      } else {
        finish();
      }
    });
    this._setState('closed');
    return this._closedPromise;
  }

  /**
   * Test hook: drop the transport without DISCONNECT, as a network failure
   * would. The client reconnects (with resume) after its backoff; with
   * `{hold: true}` it waits for {@link HeraldClient#_release} instead.
   *
   * @param {{ hold?: boolean }} [options]
   */
  _dropTransport({ hold = false } = {}) {
    if (this._closed) return;
    this._hold = hold;
    this._lose('dropped by _dropTransport', false);
  }

  /** Test hook: end a `_dropTransport({hold: true})` and reconnect now. */
  _release() {
    if (!this._hold) return;
    this._hold = false;
    if (!this._closed && !this._sock) {
      this._cancelRetry();
      this._open();
    }
  }

  // ---- internals ----

  _emit(name, value) {
    const set = this._handlers.get(name);
    if (!set) return;
    for (const fn of [...set]) callSafely(fn, value);
  }

  _setState(state) {
    if (this._state === state) return;
    this._state = state;
    this._emit('state', state);
  }

  _error(message, extra = {}) {
    this._emit('error', { message, ...extra });
  }

  async _open() {
    if (this._closed || this._hold || this._sock) return;
    const generation = ++this._generation;
    this._setState(this._everConnected || this._attempt > 0 ? 'reconnecting' : 'connecting');
    let token = this._token;
    if (this._getToken) {
      try {
        token = await this._getToken();
      } catch (e) {
        if (this._closed || this._hold || generation !== this._generation) return;
        this._error('getToken failed: ' + (e && e.message ? e.message : String(e)), { cause: e });
        this._scheduleRetry();
        return;
      }
      if (this._closed || this._hold || generation !== this._generation) return;
      if (typeof token !== 'string' || token === '') {
        this._error('getToken returned no token');
        this._scheduleRetry();
        return;
      }
      this._token = token;
    }
    let sock;
    try {
      if (this._raw) {
        sock = new this._WebSocket(this.url, ['v12.stomp']);
        sock.binaryType = 'arraybuffer';
      } else {
        sock = new this._SockJS(this.url, null, this._sockjsOptions);
      }
    } catch (e) {
      this._error('cannot open ' + this.url + ': ' + (e && e.message ? e.message : String(e)), { cause: e });
      this._scheduleRetry();
      return;
    }
    const s = {
      decoder: new FrameDecoder({ maxFrameBytes: this.options.maxFrameBytes }),
      stomp: false, // CONNECTED received
      subscribed: false, // subscription receipt received
      fatal: false, // stop after this transport closes
      lastRecv: this._now(),
      beatTimer: null,
      watchTimer: null,
      connectTimer: null,
      closeTimer: null,
      onDisconnected: null,
      receipt: `herald-sub-${generation}`,
      token,
      pipelined: false, // SUBSCRIBE sent with CONNECT
    };
    this._sock = sock;
    this._session = s;
    s.connectTimer = this._setTimeout(() => this._lose('no connection within ' + this.options.connectTimeoutMs + ' ms', false),
      this.options.connectTimeoutMs);
    sock.onopen = () => {
      if (sock !== this._sock) return;
      const hb = this.options.heartbeatMs;
      const headers = {
        'accept-version': '1.2',
        host: this._host,
        'heart-beat': `${hb},${hb}`,
        passcode: token,
      };
      if (this._epoch !== null && this._lastSeq !== null) {
        headers['last-seq'] = this._lastSeq;
        headers.epoch = this._epoch;
        if (this._lastHeard !== null) {
          headers['offline-ms'] = Math.max(0, Math.round(this._now() - this._lastHeard));
        }
      }
      let text = encodeFrame('CONNECT', headers);
      // A SUBSCRIBE that needs nothing from CONNECTED goes in the same
      // message, one round trip less (the gateway answers both in order):
      // a reconnect with the token that last showed whose position this is
      // (the CONNECT carries the position), and a first session with no
      // stored position to look at (it starts live at the head).
      const resumes = this._epoch !== null && this._lastSeq !== null && this._positionUser !== null && token === this._positionToken;
      const fresh = this._epoch === null && !this._hasStoredPosition();
      if (resumes || fresh) {
        s.pipelined = true;
        text += encodeFrame('SUBSCRIBE', this._subscribeHeaders(s));
      }
      this._send(text);
    };
    sock.onmessage = (ev) => {
      if (sock !== this._sock) return;
      s.lastRecv = this._now();
      if (s.stomp) this._lastHeard = s.lastRecv;
      let frames;
      const beats = s.decoder.heartbeats;
      try {
        frames = s.decoder.push(ev.data);
        this._stats.heartbeatsReceived += s.decoder.heartbeats - beats;
      } catch (e) {
        this._error('protocol error: ' + e.message, { cause: e });
        this._lose('protocol error', false);
        return;
      }
      for (const f of frames) {
        if (sock !== this._sock) return; // a frame closed it
        this._onFrame(f, s);
      }
    };
    sock.onerror = () => { /* a close event follows */ };
    sock.onclose = (ev) => {
      if (sock !== this._sock) return;
      this._lose(`transport closed (${ev && ev.code})`, s.fatal);
    };
  }

  _send(text) {
    try {
      this._sock.send(text);
    } catch (e) {
      this._lose('send failed: ' + e.message, false);
    }
  }

  _onFrame(f, s) {
    const h = f.headers;
    switch (f.command) {
      case 'CONNECTED': {
        s.stomp = true;
        this._lastHeard = this._now();
        this._stats.connects++;
        const user = h['user-name'];
        if (user !== undefined) this._userName = user;
        if (s.pipelined && this._positionUser !== null && user !== undefined && user !== this._positionUser) {
          // The SUBSCRIBE went out with another user's position: forget it
          // and come back at once without one (the next CONNECTED then
          // starts this user's stream as a first session would).
          this._forgetPosition();
          this._lose('the token names another user than the position resumed', false, true);
          break;
        }
        const sub = this._subscribeHeaders(s);
        this._startPosition(user, h, sub, s.pipelined);
        this._positionToken = this._positionUser !== null ? s.token : null;
        this._startHeartbeats(h['heart-beat'], s);
        if (!s.pipelined) this._send(encodeFrame('SUBSCRIBE', sub));
        break;
      }
      case 'RECEIPT':
        if (h['receipt-id'] === s.receipt) {
          s.subscribed = true;
          this._clearTimeout(s.connectTimer);
          s.connectTimer = null;
          this._attempt = 0;
          this._everConnected = true;
          this._setState('connected');
        } else if (h['receipt-id'] === DISCONNECT_RECEIPT && s.onDisconnected) {
          s.onDisconnected();
        }
        break;
      case 'MESSAGE':
        this._onMessage(h, f.body);
        break;
      case 'ERROR': {
        const message = h.message || decoder.decode(f.body) || 'ERROR frame';
        const auth = isAuthError(message);
        // A refused token without a way to get another, or a refused
        // subscription (bad filter, ...), will not get better by retrying.
        s.fatal = (auth && !this._getToken) || (h['receipt-id'] !== undefined && h['receipt-id'] === s.receipt);
        // The server ends a live session when its token expires. With a
        // getToken to ask, come back at once (nothing is wrong, no backoff)
        // and resume; a token refused at CONNECT still backs off.
        const refresh = !s.fatal && s.stomp && !!this._getToken && isExpiry(message);
        this._error(message, { auth, fatal: s.fatal, headers: h, body: decoder.decode(f.body) });
        this._lose('ERROR: ' + message, s.fatal, refresh);
        break;
      }
      default:
        break;
    }
  }

  _onMessage(h, body) {
    if (this._closed) return;
    const seq = h.seq !== undefined && /^\d+$/.test(h.seq) ? Number(h.seq) : null;
    if (h.event === GAP_EVENT) {
      if (h.epoch !== undefined) this._epoch = h.epoch;
      if (seq !== null) this._lastSeq = seq;
      // Stored before the app hears of it: a gap handler that reloads the
      // page must not meet the same gap again.
      this._savePosition();
      this._emit('gap', { reason: h.reason ?? 'unknown', seq, epoch: this._epoch, headers: h });
      return;
    }
    if (seq !== null && this._lastSeq !== null && h.epoch === this._epoch && seq <= this._lastSeq) {
      return; // seen already (delivery is at-least-once)
    }
    if (h.epoch !== undefined) this._epoch = h.epoch;
    if (seq !== null) this._lastSeq = seq;
    const id = h['message-id'];
    if (id !== undefined && id !== '') {
      if (this._recentIds.has(id)) {
        this._savePosition();
        return; // handed to the app already (a copy re-sent after a move)
      }
      this._recentIds.add(id);
      if (this._recentIds.size > RECENT_IDS) this._recentIds.delete(this._recentIds.values().next().value);
    }
    const msg = new HeraldMessage(h, body);
    for (const [pattern, set] of [...this._handlers]) {
      if (RESERVED.has(pattern) || !matchEvent(pattern, msg.event)) continue;
      for (const fn of [...set]) callSafely(fn, msg);
    }
    this._savePosition();
  }

  /**
   * The SUBSCRIBE of session `s`, without resume headers (the CONNECT's
   * position applies unless {@link HeraldClient#_startPosition} adds them).
   *
   * @param {{receipt: string}} s
   * @returns {Record<string, string | number>}
   */
  _subscribeHeaders(s) {
    /** @type {Record<string, string | number>} */
    const sub = { id: SUBSCRIPTION_ID, destination: DESTINATION, ack: 'auto', receipt: s.receipt };
    if (this.options.events && this.options.events.length) sub.events = this.options.events.join(',');
    return sub;
  }

  /** Forgets the position in memory (another user's session begins). */
  _forgetPosition() {
    this._epoch = null;
    this._lastSeq = null;
    this._positionUser = null;
    this._positionToken = null;
    this._recentIds.clear();
  }

  /**
   * At CONNECTED: where this session's stream starts, setting the SUBSCRIBE's
   * resume headers when they differ from the CONNECT's.
   * - A reconnect of the same user resumes from the position in memory (the
   *   CONNECT carried it).
   * - A first session, or one whose token is now another user's (a getToken
   *   that switched users), takes the position stored for this very user
   *   (`resume` option), checked against the mailbox: a stored seq past the
   *   head of the same epoch is not one this mailbox gave, and is ignored.
   *   Without one it starts live at the head the CONNECTED gives. A changed
   *   epoch is left to the gateway, which answers with an epoch-changed gap.
   *
   *   A first session whose SUBSCRIBE went with its CONNECT (nothing was
   *   stored when it opened) starts live at the head: its SUBSCRIBE is sent.
   *
   * @param {string | undefined} user CONNECTED `user-name`
   * @param {Record<string, string>} h CONNECTED headers
   * @param {Record<string, string | number>} sub the SUBSCRIBE's headers, amended
   * @param {boolean} subscribed whether the SUBSCRIBE went with the CONNECT
   */
  _startPosition(user, h, sub, subscribed) {
    const switched = this._epoch !== null && user !== undefined && this._positionUser !== null && user !== this._positionUser;
    if (switched) {
      // The CONNECT carried the previous user's position: never resume it,
      // nor drop the new user's messages as repeats of the old one's.
      this._forgetPosition();
    }
    if (this._epoch !== null) return;
    const head = h.epoch !== undefined && /^\d+$/.test(h.seq ?? '') ? { epoch: h.epoch, seq: Number(h.seq) } : null;
    if (head === null) return; // not a Herald mailbox: nothing to resume from
    const stored = user !== undefined && !subscribed ? this._storedPosition(user) : null;
    const usable = stored !== null && !(stored.epoch === head.epoch && stored.seq > head.seq);
    const from = usable ? stored : head;
    this._epoch = from.epoch;
    this._lastSeq = from.seq;
    this._positionUser = user ?? null;
    if (usable || switched) {
      sub['last-seq'] = from.seq;
      sub.epoch = from.epoch;
    }
    if (usable && stored.heard !== undefined) {
      // If the page's edge died, the routers re-send what went to it since.
      sub['offline-ms'] = Math.max(0, Math.round(this._now() - stored.heard));
    }
    this._savePosition();
  }

  /**
   * The position stored for `user`, or null (no `resume` option, nothing
   * stored, not a position, another user's).
   *
   * @param {string} user
   * @returns {Position | null}
   */
  _storedPosition(user) {
    if (!this._resume) return null;
    let p;
    try {
      p = this._readPosition();
    } catch (e) {
      this._storageError(e);
      return null;
    }
    return p !== null && p.user === user ? p : null;
  }

  /**
   * The position stored under the `resume` key, whoever's, or null; throws
   * what the storage throws.
   *
   * @returns {Position | null}
   */
  _readPosition() {
    return parsePosition(this._resume.storage().getItem(this._resume.key));
  }

  /**
   * Whether a position is stored at all (whoever's): without the `resume`
   * option, or with nothing (or nothing readable) stored, a first session
   * has nothing to wait for CONNECTED about. Reading the storage fails
   * quietly here; `_storedPosition` reports it when it is asked.
   *
   * @returns {boolean}
   */
  _hasStoredPosition() {
    if (!this._resume) return false;
    try {
      return this._readPosition() !== null;
    } catch {
      return true;
    }
  }

  /** Store the current position (with `resume`), for the next page load. */
  _savePosition() {
    if (!this._resume || this._positionUser === null || this._epoch === null || this._lastSeq === null) return;
    /** @type {Position} */
    const position = { user: this._positionUser, epoch: this._epoch, seq: this._lastSeq };
    if (this._lastHeard !== null) position.heard = Math.round(this._lastHeard);
    const text = encodePosition(position);
    try {
      this._resume.storage().setItem(this._resume.key, text);
    } catch (e) {
      this._storageError(e);
    }
  }

  /** Storage blocked or full: said once; the client goes on, resuming from memory only. */
  _storageError(e) {
    if (this._storageFailed) return;
    this._storageFailed = true;
    this._error('resume storage unavailable: ' + (e && e.message ? e.message : String(e)), { cause: e });
  }

  _startHeartbeats(header, s) {
    const [sx, sy] = String(header || '0,0').split(',').map((v) => Number(v) || 0);
    const hb = this.options.heartbeatMs;
    const out = hb > 0 && sy > 0 ? Math.max(hb, sy) : 0;
    const inc = hb > 0 && sx > 0 ? Math.max(hb, sx) : 0;
    if (out > 0) {
      const beat = () => {
        if (this._session !== s) return;
        this._stats.heartbeatsSent++;
        this._send('\n');
        s.beatTimer = this._setTimeout(beat, out);
      };
      s.beatTimer = this._setTimeout(beat, out);
    }
    if (inc > 0) {
      // Silent for twice the server's interval: the connection is dead.
      const limit = 2 * inc;
      const watch = () => {
        if (this._session !== s) return;
        const silent = this._now() - s.lastRecv;
        if (silent >= limit) {
          this._lose('heart-beat timeout', false);
          return;
        }
        s.watchTimer = this._setTimeout(watch, limit - silent);
      };
      s.watchTimer = this._setTimeout(watch, limit);
    }
  }

  _stopTimers(s) {
    if (!s) return;
    for (const t of ['beatTimer', 'watchTimer', 'connectTimer']) {
      if (s[t] !== null) this._clearTimeout(s[t]);
      s[t] = null;
    }
  }

  /**
   * The transport is gone (or must go): clean up, then retry (at once when
   * `now`, else after a backoff) or stop.
   */
  _lose(why, fatal, now = false) {
    const sock = this._sock;
    const s = this._session;
    if (!sock) return;
    this._sock = null;
    this._session = null;
    this._stopTimers(s);
    detach(sock);
    try { sock.close(4000, 'herald: ' + (fatal ? 'stop' : 'reconnect')); } catch { /* gone already */ }
    if (s && s.onDisconnected) s.onDisconnected(); // close() was waiting for a receipt
    if (this._closed) return;
    if (fatal) {
      this._closed = true;
      if (typeof globalThis.removeEventListener === 'function') globalThis.removeEventListener('online', this._onOnline);
      this._closedPromise = Promise.resolve();
      this._setState('closed');
      return;
    }
    if (now && !this._hold) {
      this._cancelRetry();
      this._setState('reconnecting');
      this._open();
      return;
    }
    this._scheduleRetry();
  }

  _scheduleRetry() {
    if (this._closed) return;
    this._setState('reconnecting');
    if (this._hold) return;
    this._cancelRetry();
    const delay = backoffDelay(this._attempt, this.options.backoff, this._random);
    this._attempt++;
    this._retryTimer = this._setTimeout(() => {
      this._retryTimer = null;
      this._open();
    }, delay);
  }

  _cancelRetry() {
    if (this._retryTimer !== null) this._clearTimeout(this._retryTimer);
    this._retryTimer = null;
  }
}

/** Base64 text (as bytes) to bytes; input that is not base64 is kept as is. */
function fromBase64(bytes) {
  try {
    const bin = atob(decoder.decode(bytes).replace(/\s+/g, ''));
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  } catch {
    return bytes;
  }
}

function hostOf(url) {
  const m = /^[a-z][a-z0-9+.-]*:\/\/(\[[^\]]*\]|[^/:?#]*)/i.exec(url);
  if (m) return m[1];
  return (globalThis.location && globalThis.location.hostname) || 'localhost';
}

function isOpen(sock) {
  return sock.readyState === 1 || sock.readyState === undefined;
}

function detach(sock) {
  sock.onopen = null;
  sock.onmessage = null;
  sock.onclose = null;
  sock.onerror = () => {};
}

function callSafely(fn, value) {
  try {
    fn(value);
  } catch (e) {
    // A handler's bug must not break the connection; surface it as the
    // platform surfaces uncaught errors.
    if (typeof globalThis.reportError === 'function') globalThis.reportError(e);
    else console.error(e);
  }
}

/**
 * Connect to Herald. Returns at once; the connection starts on the next
 * microtask, so handlers attached right after this call see every state.
 *
 * @param {string} url `ws(s)://host/ws` (raw WebSocket) or `http(s)://host/sockjs` (SockJS)
 * @param {ConnectOptions} options
 * @returns {HeraldClient}
 */
export function connect(url, options) {
  return new HeraldClient(url, options);
}

export default connect;
