// A small program against the published types: `npm run typecheck` (tsc
// --noEmit) fails if herald.d.ts stops describing how the client is used.
import connect, {
  backoffDelay,
  encodeFrame,
  FrameDecoder,
  HeraldClient,
  HeraldMessage,
  matchEvent,
  parsePosition,
  positionKey,
  withUserHint,
  type ConnectOptions,
  type GapInfo,
  type HeraldError,
  type Position,
  type ResumeOptions,
  type State,
  type StorageLike,
} from '../src/herald.js';

declare const SockJS: new (url: string, reserved?: null, options?: object) => WebSocket;

const options: ConnectOptions = {
  getToken: async () => 'jwt',
  transports: ['xhr-streaming', 'eventsource'],
  SockJS,
  user: 'alice',
  events: ['chat.*'],
  backoff: { initialMs: 500 },
  heartbeatMs: 10000,
  resume: { storage: 'session' },
};
const memory = new Map<string, string>();
const storage: StorageLike = {
  getItem: (k) => memory.get(k) ?? null,
  setItem: (k, v) => void memory.set(k, v),
};
const resume: ResumeOptions = { storage, key: 'inbox' };
const stored: Position | null = parsePosition(memory.get(positionKey('inbox', ['chat.*'])));
void [stored?.user, stored?.epoch, stored?.seq];
connect('wss://example.test/ws', { token: 'jwt', resume });
const h: HeraldClient = connect('https://example.test/sockjs', options);
const raw = connect('wss://example.test/ws', { token: 'jwt', transports: 'websocket-raw' });

const stop: () => void = h.on('chat.*', (msg: HeraldMessage) => {
  const seq: number | null = msg.seq;
  const epoch: string | null = msg.epoch;
  const data = msg.json<{ text: string }>();
  const text: string = data.text + msg.body + msg.event + msg.scope + msg.id + msg.contentType;
  void [seq, epoch, text, msg.bytes.byteLength, msg.topic];
});
h.on('gap', (info: GapInfo) => void [info.reason, info.seq]);
h.on('state', (s: State) => {
  if (s === 'closed') void h.lastSeq;
});
h.on('error', (e: HeraldError) => void [e.message, e.auth, e.fatal]);
h.off('chat.*');
stop();
raw._dropTransport({ hold: true });
raw._release();
const done: Promise<void> = h.close();
void done;

const frames = new FrameDecoder({ maxFrameBytes: 1024 }).push(encodeFrame('SEND', { destination: '/x' }, 'hi'));
const first: string = frames[0].command + new TextDecoder().decode(frames[0].body);
const ok: boolean = matchEvent('chat.*', 'chat.message');
const ms: number = backoffDelay(3, { initialMs: 1000, maxMs: 30000 });
const url: string = withUserHint('http://x/sockjs', 'bob');
void [first, ok, ms, url, h.state, h.epoch, h.transport, h.url];
