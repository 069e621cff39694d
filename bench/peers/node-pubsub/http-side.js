// The HTTP side both Node peers share (bench/src/compare/node_peer.rs starts them): the same
// publishing interface as the Nchan peer's, so the bench publishes to every peer alike.
//
//   GET  /readyz          200 once listening (the bench's readiness probe)
//   POST /pub/{channel}   the body (at most MAX_BODY_BYTES) goes to every subscriber of
//                         {channel} as one text message; 202 {"subscribers":n}
//
// Anything else is 404; a channel outside [A-Za-z0-9_.~-]{1,200} is 400; a larger body 413.
// Keep-alive connections stay open (the bench's publishers are keep-alive connections that
// may wait between ramp steps).
'use strict';

const http = require('node:http');

const MAX_BODY_BYTES = 2 * 1024 * 1024;
const CHANNEL = /^[A-Za-z0-9_.~-]{1,200}$/;

function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

// The channel a subscriber named in its URL's query (`?channel=`), or null when it is missing
// or not a valid channel name.
function channelOf(url) {
  const query = url.indexOf('?');
  if (query < 0) return null;
  const channel = new URLSearchParams(url.slice(query + 1)).get('channel');
  return channel !== null && CHANNEL.test(channel) ? channel : null;
}

// An HTTP server whose publications go to `publish(channel, text)`, which returns how many
// subscribers it reached. `fallthrough(req, res)` gets the requests it does not serve (none
// when null: they are 404).
function createServer(publish, fallthrough) {
  const server = http.createServer((req, res) => {
    const path = req.url.split('?', 1)[0];
    if (req.method === 'GET' && path === '/readyz') {
      return answer(res, 200, { ready: true });
    }
    if (!path.startsWith('/pub/')) {
      if (fallthrough) return fallthrough(req, res);
      return answer(res, 404, { error: 'not found', path });
    }
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return answer(res, 405, { error: 'publish with POST' });
    }
    const channel = path.slice('/pub/'.length);
    if (!CHANNEL.test(channel)) {
      return answer(res, 400, { error: 'channel must match [A-Za-z0-9_.~-]{1,200}', channel });
    }
    const chunks = [];
    let length = 0;
    let tooLarge = false;
    req.on('data', (chunk) => {
      length += chunk.length;
      if (length > MAX_BODY_BYTES) {
        // Keep reading (and dropping) the rest, then answer 413.
        tooLarge = true;
        chunks.length = 0;
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooLarge) {
        return answer(res, 413, { error: `body over ${MAX_BODY_BYTES} bytes` });
      }
      const subscribers = publish(channel, Buffer.concat(chunks, length).toString('utf8'));
      answer(res, 202, { subscribers });
    });
    req.on('error', () => res.destroy());
  });
  server.keepAliveTimeout = 600 * 1000;
  server.headersTimeout = 610 * 1000;
  return server;
}

// `host:port` from argv[2], for `server.listen`.
function listenAddress() {
  const arg = process.argv[2] || '';
  const colon = arg.lastIndexOf(':');
  const port = Number(arg.slice(colon + 1));
  if (colon < 1 || !Number.isInteger(port) || port < 1 || port > 65535) {
    process.stderr.write(`usage: node ${process.argv[1]} HOST:PORT\n`);
    process.exit(2);
  }
  return { host: arg.slice(0, colon), port };
}

module.exports = { createServer, channelOf, listenAddress };
