// The Socket.IO peer of `herald-bench compare`: Socket.IO 4 with its default in-memory adapter,
// in one Node.js process (the adapter cannot span processes without Redis or a cluster
// adapter). Subscribers connect with the websocket transport only,
// `/socket.io/?EIO=4&transport=websocket&channel={channel}`, and join the room {channel} once
// connected to the main namespace; `POST /pub/{channel}` emits the body to that room as the
// event `n` (see http-side.js). Its defaults otherwise: a ping every 25 s, no connection-state
// recovery (nothing is kept for a subscriber that is away), no per-message compression.
'use strict';

const { Server } = require('socket.io');
const { createServer, channelOf, listenAddress } = require('./http-side');

let io;
const server = createServer((channel, text) => {
  const room = io.sockets.adapter.rooms.get(channel);
  io.to(channel).emit('n', text);
  return room ? room.size : 0;
}, null);

io = new Server(server, {
  transports: ['websocket'],
  serveClient: false,
  // The bench's subscribers send nothing but pongs and the namespace connect.
  maxHttpBufferSize: 4096,
});

io.use((socket, next) => {
  const channel = channelOf(socket.request.url);
  if (channel === null) {
    return next(new Error('the query needs channel=[A-Za-z0-9_.~-]{1,200}'));
  }
  socket.data.channel = channel;
  next();
});

io.on('connection', (socket) => {
  socket.join(socket.data.channel);
});

const { host, port } = listenAddress();
server.listen({ host, port, backlog: 4096 }, () => {
  process.stdout.write(`socket.io ${require('socket.io/package.json').version} on ${host}:${port}\n`);
});
process.on('SIGTERM', () => {
  io.close();
  process.exit(0);
});
