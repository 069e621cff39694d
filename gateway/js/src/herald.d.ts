// Types of @herald/client (src/herald.js). Checked by `npm run typecheck`
// against typecheck/usage.ts.

/** Destination of the user's whole stream. */
export declare const DESTINATION: '/user/notifications';
/** Event name of the gap marker. */
export declare const GAP_EVENT: 'herald.gap';
/** How many message ids the client remembers to drop a repeat of. */
export declare const RECENT_IDS: number;
/** Value of `transports` that selects a native WebSocket (no SockJS). */
export declare const RAW_WEBSOCKET: 'websocket-raw';

export declare const DEFAULTS: Readonly<{
  backoff: Readonly<BackoffOptions>;
  heartbeatMs: number;
  connectTimeoutMs: number;
  closeTimeoutMs: number;
  maxFrameBytes: number;
}>;

export type State = 'connecting' | 'connected' | 'reconnecting' | 'closed';

/** SockJS transport names sockjs-client knows, or a native WebSocket. */
export type TransportName =
  | 'websocket'
  | 'xhr-streaming'
  | 'xdr-streaming'
  | 'eventsource'
  | 'iframe-eventsource'
  | 'htmlfile'
  | 'iframe-htmlfile'
  | 'xhr-polling'
  | 'xdr-polling'
  | 'iframe-xhr-polling'
  | 'jsonp-polling'
  | 'websocket-raw';

export interface BackoffOptions {
  /** Cap of the first retry's delay (ms). Default 1000. */
  initialMs: number;
  /** Largest cap (ms). Default 30000. */
  maxMs: number;
}

/** What the client needs of a WebSocket or SockJS object. */
export interface SocketLike {
  readonly readyState?: number;
  /** SockJS: the transport it settled on. */
  readonly transport?: string;
  binaryType?: string;
  onopen: ((ev?: unknown) => void) | null;
  onmessage: ((ev: { data: string | ArrayBuffer | Uint8Array }) => void) | null;
  onclose: ((ev?: { code?: number; reason?: string }) => void) | null;
  onerror: ((ev?: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** The part of the Web Storage API (`sessionStorage`) the client uses. */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/**
 * Resume after a page reload. The client stores where the user's stream was
 * left off (the user id the gateway authenticated, the mailbox epoch, the
 * last sequence) after every message and gap marker, and on the next page
 * load resumes from it: the mailbox replays what was missed, nothing is
 * shown twice. A position is only used for the user it was stored for: a
 * token of another user starts live.
 */
export interface ResumeOptions {
  /**
   * Where the position is kept: `'session'` for `sessionStorage` (per tab,
   * survives reloads, ends with the tab: the right scope, since every tab
   * has its own stream position), or any object with `getItem`/`setItem`.
   */
  storage: 'session' | StorageLike;
  /**
   * Names the stored entry (`herald.resume:<key>:<events filter>`): give
   * each client on one page its own. 1 to 64 characters. Default `'default'`.
   */
  key?: string;
}

/** A stored position. */
export interface Position {
  /** The user id the gateway authenticated (CONNECTED `user-name`). */
  user: string;
  /** The mailbox epoch, a u64 in decimal. */
  epoch: string;
  /** The last sequence seen. */
  seq: number;
  /** When the session last sent a frame (ms since the Unix epoch); absent in older positions. */
  heard?: number;
}

export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => SocketLike;
export type SockJSConstructor = new (url: string, reserved?: null, options?: Record<string, unknown>) => SocketLike;

export interface ConnectOptions {
  /** The JWT. Give this or `getToken`. */
  token?: string;
  /** A fresh JWT; called before every (re)connect (the token refresh hook). */
  getToken?: () => string | Promise<string>;
  /** SockJS transport names, or 'websocket-raw' for a native WebSocket. */
  transports?: TransportName | TransportName[];
  /** The SockJS constructor (`import SockJS from 'sockjs-client'`); required for http(s) URLs unless `globalThis.SockJS` exists. */
  SockJS?: SockJSConstructor | (new (...args: any[]) => any);
  /** More options for the SockJS constructor (`transports` is set from `transports`). */
  sockjsOptions?: Record<string, unknown>;
  /** WebSocket constructor; default `globalThis.WebSocket`. */
  WebSocket?: WebSocketConstructor | (new (...args: any[]) => any);
  /** User-id hint: `?uid=<user>` on every request URL, so a proxy can hash by user. */
  user?: string;
  /** Server-side event filter, e.g. `['chat.*']` (at most 16 patterns). */
  events?: string[];
  /** Exponential backoff with full jitter between reconnects. */
  backoff?: Partial<BackoffOptions>;
  /** STOMP heart-beat interval both ways (ms); 0 disables. Default 10000. */
  heartbeatMs?: number;
  /** From opening a transport to the subscription receipt (ms). Default 15000. */
  connectTimeoutMs?: number;
  /** How long `close()` waits for the DISCONNECT receipt (ms). Default 2000. */
  closeTimeoutMs?: number;
  /** Largest frame the decoder buffers (bytes). Default 16 MiB. */
  maxFrameBytes?: number;
  /** Time source and timers (tests). */
  clock?: {
    now?: () => number;
    setTimeout?: (fn: () => void, ms: number) => unknown;
    clearTimeout?: (id: any) => void;
  };
  /** Uniform random in [0, 1) (tests). */
  random?: () => number;
  /** Opt-in: keep the position in storage and resume from it after a page reload. Default off. */
  resume?: ResumeOptions | null | false;
}

/** A notification as handlers receive it. */
export declare class HeraldMessage {
  constructor(headers: Record<string, string>, bytes: Uint8Array);
  readonly event: string;
  readonly scope: string;
  /** The notification id (`message-id`). */
  readonly id: string;
  readonly seq: number | null;
  /** The mailbox epoch, opaque (a u64 may exceed 2^53). */
  readonly epoch: string | null;
  readonly topic: string | null;
  readonly contentType: string;
  /** Every header of the MESSAGE frame. */
  readonly headers: Record<string, string>;
  /** The payload, byte for byte. */
  readonly bytes: Uint8Array;
  /** The payload decoded as UTF-8. */
  readonly body: string;
  /** The body parsed as JSON; throws if it is not JSON. */
  json<T = unknown>(): T;
}

export interface GapInfo {
  /** `buffer-exceeded` | `epoch-changed` | `queue-overflow`. */
  reason: string;
  /** The stream continues after this sequence. */
  seq: number | null;
  epoch: string | null;
  headers: Record<string, string>;
}

export interface HeraldError {
  message: string;
  /** The server refused the token. */
  auth?: boolean;
  /** The client stops after this error (state `closed`). */
  fatal?: boolean;
  /** Headers of the ERROR frame, when it came from one. */
  headers?: Record<string, string>;
  body?: string;
  cause?: unknown;
}

export declare class HeraldClient {
  constructor(url: string, options: ConnectOptions);
  /** The URL the transport opens (with the uid hint). */
  readonly url: string;
  readonly state: State;
  /** Sequence of the last message seen (or of the last gap marker). */
  readonly lastSeq: number | null;
  /** The mailbox epoch. */
  readonly epoch: string | null;
  /** The user id the server authenticated (CONNECTED `user-name`); null before. */
  readonly userName: string | null;
  /** 'websocket-raw', or the SockJS transport in use; null when disconnected. */
  readonly transport: string | null;

  on(name: 'state', handler: (state: State) => void): () => void;
  on(name: 'gap', handler: (info: GapInfo) => void): () => void;
  on(name: 'error', handler: (error: HeraldError) => void): () => void;
  /** An event pattern: `*` matches any run of characters. */
  on(pattern: string, handler: (msg: HeraldMessage) => void): () => void;
  off(name: string, handler?: (...args: any[]) => void): this;
  /** DISCONNECT, then close; no reconnect. Settles once the transport is closed. */
  close(): Promise<void>;

  /** Counters for tests and debugging, over every transport so far. */
  readonly _stats: { heartbeatsReceived: number; heartbeatsSent: number; connects: number };
  /** Test hook: drop the transport without DISCONNECT; `hold` waits for `_release()` before reconnecting. */
  _dropTransport(options?: { hold?: boolean }): void;
  /** Test hook: end a held drop and reconnect now. */
  _release(): void;
}

/** Connect to Herald: `ws(s)://host/ws` (raw WebSocket) or `http(s)://host/sockjs` (SockJS). */
export declare function connect(url: string, options: ConnectOptions): HeraldClient;
export default connect;

// ---- framing and helpers ----

export interface Frame {
  command: string;
  headers: Record<string, string>;
  body: Uint8Array;
}

export declare class StompProtocolError extends Error {}

/** Encode one STOMP 1.2 frame; a non-empty body gets a content-length. */
export declare function encodeFrame(
  command: string,
  headers?: Record<string, string | number | boolean | null | undefined>,
  body?: string,
): string;

/** Incremental STOMP decoder; heart-beat EOLs are counted and skipped. */
export declare class FrameDecoder {
  constructor(options?: { maxFrameBytes?: number });
  readonly maxFrameBytes: number;
  /** Heart-beat EOLs seen so far. */
  readonly heartbeats: number;
  /** Feed a chunk; returns the frames it completed. Throws StompProtocolError. */
  push(chunk: string | ArrayBuffer | ArrayBufferView): Frame[];
}

/** `*` wildcard match, the gateway's `events` rule. */
export declare function matchEvent(pattern: string, event: string): boolean;
/** Full-jitter backoff: uniform in [0, min(maxMs, initialMs * 2^attempt)). */
export declare function backoffDelay(attempt: number, backoff: BackoffOptions, random?: () => number): number;
/** `url` with `uid=<user>` in its query. */
export declare function withUserHint(url: string, user: string | null | undefined): string;
/** ws(s) URL as is; an http(s) SockJS base becomes `ws(s)://…/<base>/websocket`. */
export declare function rawWebSocketUrl(url: string): string;
/** Whether an ERROR message means the token was refused. */
export declare function isAuthError(message: string): boolean;
/** The storage key of a position: `herald.resume:<key>:<sorted events, or *>`. */
export declare function positionKey(key: string, events?: string[] | null): string;
/** A stored position's text, or null for anything that is not a valid one (never throws). */
export declare function parsePosition(text: unknown): Position | null;
