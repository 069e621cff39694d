// The sockjs-node peer of `herald-bench compare`: the sockjs package's server under /sockjs
// in one Node.js process. Subscribers open any SockJS transport, the bench's the websocket one,
// `/sockjs/{server}/{session}/websocket?channel={channel}`, and are subscribed to {channel} once
// the session is open (the `o` frame); `POST /pub/{channel}` writes the body to every session
// subscribed to it, one `a["..."]` frame each (see http-side.js). Its defaults otherwise: a
// heartbeat `h` every 25 s, nothing kept for a session that is away.
'use strict';

const sockjs = require('sockjs');
const { createServer, channelOf, listenAddress } = require('./http-side');

// channel -> the open sessions subscribed to it.
const channels = new Map();

const service = sockjs.createServer({
  prefix: '/sockjs',
  log: (severity, message) => {
    if (severity === 'error') process.stderr.write(`${message}\n`);
  },
});

service.on('connection', (conn) => {
  if (conn === null) return;
  const channel = channelOf(conn.url);
  if (channel === null) {
    conn.close(4400, 'the query needs channel=[A-Za-z0-9_.~-]{1,200}');
    return;
  }
  let subscribers = channels.get(channel);
  if (!subscribers) {
    subscribers = new Set();
    channels.set(channel, subscribers);
  }
  subscribers.add(conn);
  conn.on('close', () => {
    subscribers.delete(conn);
    if (subscribers.size === 0 && channels.get(channel) === subscribers) {
      channels.delete(channel);
    }
  });
});

const server = createServer((channel, text) => {
  const subscribers = channels.get(channel);
  if (!subscribers) return 0;
  for (const conn of subscribers) conn.write(text);
  return subscribers.size;
}, null);
service.installHandlers(server);

const { host, port } = listenAddress();
server.listen({ host, port, backlog: 4096 }, () => {
  process.stdout.write(`sockjs ${require('sockjs/package.json').version} on ${host}:${port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
