// Herald in a real browser: Debian chromium (playwright-core) against the
// real herald-gateway binary, pages served from another origin.
//
// 1. Our client (gateway/js/src/herald.js) over each transport in turn: raw
//    WebSocket /ws, SockJS websocket / xhr-streaming / xhr-polling /
//    eventsource, and the raw /sockjs/websocket endpoint. Each run connects,
//    receives a notification published over HTTP, loses its transport
//    without DISCONNECT, and resumes: what was published meanwhile is
//    replayed, seqs in order, none missing.
// 2. The stock libraries alone (@stomp/stompjs over sockjs-client, no Herald
//    code) over each SockJS transport: connect with the JWT as passcode,
//    subscribe, receive, and resume with last-seq/epoch set in beforeConnect.
// 3. Tokens in the browser: a refused static token stops the client; the
//    getToken hook replaces an expired token; a session whose token expires
//    is ended by the gateway ("token expired") and comes back at once with
//    a fresh token from getToken, resuming without losing a notification
//    (raw WebSocket and SockJS xhr-streaming).
//
//   cd tests/browser && npm ci && node --test
//
// HERALD_GATEWAY_BIN names the binary (default target/debug/herald-gateway),
// HERALD_CHROMIUM the browser (default /usr/bin/chromium).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Gateway, REPO, TIMEOUT, launchBrowser, startPageServer, token } from './lib/harness.js';

/** @type {Gateway} */
let gw;
let pages;
let browser;
let sockjsInfo = null;

before(async () => {
  gw = new Gateway();
  await gw.start();
  pages = await startPageServer();
  browser = await launchBrowser();
  try {
    const r = await fetch(`${gw.base}/sockjs/info`);
    if (r.ok) sockjsInfo = await r.json();
  } catch {
    sockjsInfo = null;
  }
});

after(async () => {
  await browser?.close();
  await pages?.close();
  if (gw) {
    const code = await gw.stop();
    assert.equal(code, 0, `gateway exited ${code} on SIGTERM:\n${gw.log()}`);
  }
});

let users = 0;
const newUser = (tag) => `${tag}-${process.pid}-${++users}`;

/**
 * Open a test page in a fresh browser context and run `body` with it; on
 * failure the page's console and the gateway log are added to the error.
 */
async function withPage(gateway, path, params, body) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const logs = [];
  const requests = [];
  page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
  page.on('request', (r) => requests.push(r.url()));
  page.on('websocket', (ws) => requests.push(ws.url()));
  try {
    await page.goto(`${pages.origin}${path}?${new URLSearchParams(params)}`);
    await body({ page, requests });
  } catch (e) {
    let state = '';
    try {
      state = JSON.stringify(await page.evaluate(() => window.T));
    } catch { /* page gone */ }
    e.message += `\n--- page state: ${state}\n--- page console:\n${logs.slice(-40).join('\n')}` +
      `\n--- gateway log (tail):\n${gateway.log().slice(-3000)}`;
    throw e;
  } finally {
    await context.close();
  }
}

/** Wait until `fn` (run in the page) returns truthy. */
async function waitFor(page, fn, arg, what) {
  try {
    await page.waitForFunction(fn, arg, { timeout: TIMEOUT });
  } catch (e) {
    throw new Error(`waiting for ${what}: ${e.message.split('\n')[0]}`);
  }
}

function assertConsecutive(received, ns) {
  assert.deepEqual(received.map((m) => JSON.parse(m.body).n), ns, 'every payload, in order');
  const seqs = received.map((m) => m.seq);
  seqs.forEach((s, i) => assert.equal(s, seqs[0] + i, `seqs consecutive: ${seqs}`));
  assert.equal(new Set(received.map((m) => m.epoch)).size, 1, 'one epoch');
}

function requireSockJS() {
  assert.ok(sockjsInfo, `${gw.base}/sockjs/info does not answer: this gateway has no SockJS service`);
}

// transport: what the client is told to use; server: the `transport` label
// the gateway counts the session under.
const CLIENT_RUNS = [
  { name: 'raw WebSocket /ws', tag: 'raw', transport: 'websocket-raw', server: 'websocket', sockjs: false,
    url: (g) => `ws://127.0.0.1:${g.port}/ws` },
  { name: 'SockJS websocket', tag: 'sj-ws', transport: 'websocket', server: 'sockjs_websocket', sockjs: true },
  { name: 'SockJS xhr-streaming', tag: 'sj-xs', transport: 'xhr-streaming', server: 'xhr_streaming', sockjs: true },
  { name: 'SockJS xhr-polling', tag: 'sj-xp', transport: 'xhr-polling', server: 'xhr_polling', sockjs: true },
  { name: 'SockJS eventsource', tag: 'sj-es', transport: 'eventsource', server: 'eventsource', sockjs: true },
  { name: 'raw WebSocket /sockjs/websocket', tag: 'sj-raw', transport: 'websocket-raw', server: 'websocket', sockjs: true },
];

function runUrl(run, gateway) {
  return run.url ? run.url(gateway) : `${gateway.base}/sockjs`;
}

describe('herald client', () => {
  for (const run of CLIENT_RUNS) {
    test(`${run.name}: connects, receives, resumes after a dropped transport`, async () => {
      if (run.sockjs) requireSockJS();
      const user = newUser(run.tag);
      const url = runUrl(run, gw);
      const opened = await gw.metric('herald_sessions_opened_total', { transport: run.server });
      await withPage(gw, '/herald.html', { url, transport: run.transport, token: token(user), user }, async ({ page, requests }) => {
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
        assert.equal(await page.evaluate(() => window.h.transport), run.transport, 'the forced transport is in use');
        const epoch = await page.evaluate(() => window.h.epoch);
        assert.ok(epoch, 'CONNECTED gave an epoch');

        await gw.publish({ users: [user], event: 'test.first', payload: { n: 1 } });
        await waitFor(page, () => window.T.received.length >= 1, null, 'the first notification');

        // Lose the transport (no DISCONNECT) and hold the reconnect while
        // three notifications are published: they can only come by replay.
        const replayed = await gw.metric('herald_replayed_total');
        await page.evaluate(() => window.h._dropTransport({ hold: true }));
        assert.equal(await page.evaluate(() => window.h.state), 'reconnecting');
        for (const n of [2, 3, 4]) await gw.publish({ users: [user], event: 'test.missed', payload: { n } });
        await page.evaluate(() => window.h._release());
        await waitFor(page, () => window.T.received.length >= 4 && window.h.state === 'connected', null,
          'the replay of the three missed notifications');

        const t = await page.evaluate(() => window.T);
        assertConsecutive(t.received, [1, 2, 3, 4]);
        assert.equal(t.received[0].epoch, epoch);
        assert.deepEqual(t.received.map((m) => m.event), ['test.first', 'test.missed', 'test.missed', 'test.missed']);
        assert.ok(await gw.metric('herald_replayed_total') >= replayed + 3, 'the gateway replayed them');
        assert.deepEqual(t.states, ['connecting', 'connected', 'reconnecting', 'connected']);
        assert.deepEqual(t.errors, []);
        assert.deepEqual(t.gaps, []);
        assert.equal(await page.evaluate(() => window.h.transport), run.transport);
        assert.equal(await gw.metric('herald_sessions_opened_total', { transport: run.server }), opened + 2,
          `the gateway saw two ${run.server} sessions`);

        // The uid hint is on every request that went to the gateway.
        const toGateway = requests.filter((r) => new URL(r).port === String(gw.port));
        assert.ok(toGateway.length >= 2, `requests to the gateway: ${toGateway}`);
        for (const r of toGateway) assert.ok(new URL(r).searchParams.get('uid') === user, `no uid hint on ${r}`);

        await page.evaluate(() => window.h.close());
        assert.equal(await page.evaluate(() => window.h.state), 'closed');
      });
    });
  }

  for (const run of CLIENT_RUNS) {
    test(`${run.name}: payloads arrive byte for byte (escapes, NUL, binary, 350 KB)`, async () => {
      if (run.sockjs) requireSockJS();
      const user = newUser(`${run.tag}-bytes`);
      const url = runUrl(run, gw);
      await withPage(gw, '/herald.html', { url, transport: run.transport, token: token(user), user }, async ({ page }) => {
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
        const fields = { users: user, event: 'test.bytes' };
        // Characters SockJS must escape in JSON, quotes, controls, NUL, astral.
        const tricky = 'a\u0000b "q" \\ \n\r\t \u0001\u001f\u007f\u0080\u009f é ✓ 🎉 \u2028\u2029 ' +
          '\u200c\u200f \u2060\u206f \ufeff \ufff0\uffff \ud7ff\ue000 </script> ]"}\'';
        const binary = Buffer.from([0xff, 0x00, 0xfe, 0x80, 0x0a, 0x00, 0x41, 0xc3]);
        const big = 'x'.repeat(100_000) + '✓'.repeat(50_000) + 'y'.repeat(50_000); // 350,000 bytes
        await gw.publishRaw(fields, 'text/plain; charset=utf-8', tricky);
        await gw.publish({ users: [user], event: 'test.bytes', payload: { s: tricky } });
        await gw.publishRaw(fields, 'application/octet-stream', binary);
        await gw.publishRaw(fields, 'text/plain', big);
        await waitFor(page, () => window.T.received.length >= 4, null, 'four notifications');
        const r = await page.evaluate(() => window.T.received);
        assert.equal(r[0].body, tricky);
        assert.equal(r[0].hex, Buffer.from(tricky).toString('hex'));
        assert.deepEqual(JSON.parse(r[1].body), { s: tricky });
        assert.equal(r[2].contentType, 'application/octet-stream');
        assert.equal(r[2].hex, binary.toString('hex'));
        assert.equal(r[3].body.length, big.length);
        assert.ok(r[3].body === big, 'the 350 KB payload is intact');
        assert.deepEqual(await page.evaluate(() => window.T.errors), []);
        assert.deepEqual(r.map((m) => m.seq), [r[0].seq, r[0].seq + 1, r[0].seq + 2, r[0].seq + 3]);
      });
    });
  }

  // Issue 36, item 1: a client that reads is never cut by a burst, however
  // many messages: the gateway keeps what the session was not sent yet in
  // its mailbox and the session reads on from it as the transport drains.
  for (const run of CLIENT_RUNS) {
    test(`${run.name}: a burst of 10,000 published faster than it drains arrives whole, in order`, async () => {
      if (run.sockjs) requireSockJS();
      const user = newUser(`${run.tag}-burst`);
      const url = runUrl(run, gw);
      const N = 10_000;
      await withPage(gw, '/herald.html', { url, transport: run.transport, token: token(user), user }, async ({ page }) => {
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
        for (let first = 1; first <= N; first += 1000) {
          await gw.publish(Array.from({ length: 1000 }, (_, i) => (
            { users: [user], event: 'test.burst', payload: { n: first + i } })));
        }
        // Progress, not a deadline for the whole burst: each wait is for more.
        let seen = 0;
        while (seen < N) {
          await waitFor(page, (k) => window.T.received.length > k, seen, `more than ${seen} of the burst`);
          seen = await page.evaluate(() => window.T.received.length);
        }
        const t = await page.evaluate(() => ({
          received: window.T.received.map((m) => ({ body: m.body, seq: m.seq, epoch: m.epoch })),
          errors: window.T.errors, gaps: window.T.gaps, states: window.T.states,
        }));
        assertConsecutive(t.received, Array.from({ length: N }, (_, i) => i + 1));
        assert.deepEqual(t.gaps, [], 'no gap');
        assert.deepEqual(t.errors, [], 'no error');
        assert.deepEqual(t.states, ['connecting', 'connected'], 'never cut');
      });
    });
  }

  test('a refused static token: an auth error, then closed, no retry', async () => {
    const user = newUser('expired');
    const expired = token(user, { expIn: -3600 });
    await withPage(gw, '/herald.html', { url: `ws://127.0.0.1:${gw.port}/ws`, token: expired }, async ({ page }) => {
      await waitFor(page, () => window.h && window.h.state === 'closed', null, 'closed');
      const t = await page.evaluate(() => window.T);
      assert.equal(t.errors.length, 1);
      assert.match(t.errors[0].message, /expired/);
      assert.ok(t.errors[0].auth && t.errors[0].fatal);
      assert.deepEqual(t.states, ['connecting', 'closed']);
    });
  });

  test('getToken replaces an expired token on the next attempt', async () => {
    const user = newUser('refresh');
    const tokens = [token(user, { expIn: -3600 }), token(user)].join(',');
    await withPage(gw, '/herald.html', { url: `ws://127.0.0.1:${gw.port}/ws`, tokens }, async ({ page }) => {
      await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected with the fresh token');
      const t = await page.evaluate(() => window.T);
      assert.equal(t.tokenCalls, 2);
      assert.equal(t.errors.length, 1);
      assert.ok(t.errors[0].auth && !t.errors[0].fatal);
      await gw.publish({ users: [user], event: 'test.after-refresh', payload: { n: 1 } });
      await waitFor(page, () => window.T.received.length === 1, null, 'a notification');
    });
  });
});

describe('token expiry', () => {
  /** A gateway with no leeway, so a token's exp ends its session on time. */
  let strict;

  before(async () => {
    strict = new Gateway('[auth]\nleeway_secs = 0\n');
    await strict.start();
  });

  after(async () => {
    if (strict) assert.equal(await strict.stop(), 0, strict.log());
  });

  for (const run of CLIENT_RUNS.filter((r) => ['raw', 'sj-xs'].includes(r.tag))) {
    test(`${run.name}: the session ends at exp; getToken's fresh token resumes it, nothing lost`, async () => {
      if (run.sockjs) requireSockJS();
      const user = newUser(`exp-${run.tag}`);
      const expired = await strict.metric('herald_sessions_token_expired_total');
      // The first token expires in 2-3 s (exp is whole seconds), the next is good for an hour.
      const tokens = [token(user, { expIn: 3 }), token(user)].join(',');
      const params = { url: runUrl(run, strict), transport: run.transport, tokens, user };
      await withPage(strict, '/herald.html', params, async ({ page }) => {
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected with the short token');
        await strict.publish({ users: [user], event: 'test.before', payload: { n: 1 } });
        await waitFor(page, () => window.T.received.length === 1, null, 'the first notification');
        await waitFor(page, () => window.T.errors.some((e) => e.message === 'token expired'), null,
          'the gateway ending the session at exp');
        // Published at once: while the client refreshes, or just after.
        await strict.publish({ users: [user], event: 'test.during', payload: { n: 2 } });
        await waitFor(page, () => window.T.tokenCalls === 2 && window.h.state === 'connected', null,
          'connected again with the fresh token');
        await strict.publish({ users: [user], event: 'test.after', payload: { n: 3 } });
        await waitFor(page, () => window.T.received.length === 3, null, 'every notification');
        const t = await page.evaluate(() => window.T);
        assertConsecutive(t.received, [1, 2, 3]);
        assert.deepEqual(t.gaps, []);
        assert.deepEqual(t.states, ['connecting', 'connected', 'reconnecting', 'connected']);
        assert.equal(t.errors.length, 1);
        assert.ok(t.errors[0].auth && !t.errors[0].fatal, 'an auth error the client recovers from');
      });
      assert.equal(await strict.metric('herald_sessions_token_expired_total'), expired + 1);
    });
  }
});

describe('stock @stomp/stompjs over sockjs-client', () => {
  for (const transport of ['websocket', 'xhr-streaming', 'xhr-polling', 'eventsource']) {
    test(`${transport}: passcode, subscribe, receive, resume via beforeConnect`, async () => {
      requireSockJS();
      const user = newUser(`stock-${transport}`);
      await withPage(gw, '/stomp.html', { url: `${gw.base}/sockjs`, transport, token: token(user) }, async ({ page }) => {
        await waitFor(page, () => window.T.subscribed >= 1, null, 'the subscription receipt');
        assert.equal(await page.evaluate(() => window.client.webSocket.transport), transport);
        const connected = await page.evaluate(() => window.T.connected[0]);
        assert.equal(connected['user-name'], user);

        await gw.publish({ users: [user], event: 'stock.first', payload: { n: 1 } });
        await waitFor(page, () => window.T.received.length >= 1, null, 'the first notification');

        const replayed = await gw.metric('herald_replayed_total');
        await page.evaluate(() => {
          window.holdNextConnect();
          window.client.forceDisconnect();
        });
        await waitFor(page, () => window.T.closes >= 1, null, 'the SockJS close');
        for (const n of [2, 3, 4]) await gw.publish({ users: [user], event: 'stock.missed', payload: { n } });
        await page.evaluate(() => window.releaseConnect());
        await waitFor(page, () => window.T.subscribed >= 2 && window.T.received.length >= 4, null,
          'the reconnect and the replay');

        const t = await page.evaluate(() => window.T);
        assert.deepEqual(t.connectHeaders[1], {
          passcode: t.connectHeaders[0].passcode,
          'last-seq': String(t.received[0].seq),
          epoch: t.received[0].epoch,
        });
        assertConsecutive(t.received, [1, 2, 3, 4]);
        assert.ok(await gw.metric('herald_replayed_total') >= replayed + 3, 'the gateway replayed them');
        assert.deepEqual(t.errors, []);
        await page.evaluate(() => window.client.deactivate());
      });
    });
  }
});

// Heart-beats every 250 ms both ways (a client silent for 500 ms is cut), and
// a replay buffer of 3 messages.
const TIGHT = `
[session]
heartbeat_send_ms = 250
heartbeat_receive_ms = 250

[mailbox]
buffer_messages = 3
`;

describe('herald client against tight limits (heart-beats 250 ms, replay buffer 3)', () => {
  /** @type {Gateway} */
  let tight;
  before(async () => {
    tight = new Gateway(TIGHT);
    await tight.start();
  });
  after(async () => {
    if (!tight) return;
    const code = await tight.stop();
    assert.equal(code, 0, `gateway exited ${code} on SIGTERM:\n${tight.log()}`);
  });

  for (const run of CLIENT_RUNS) {
    test(`${run.name}: STOMP heart-beats both ways keep an idle session up`, async () => {
      if (run.sockjs) requireSockJS();
      const user = newUser(`${run.tag}-hb`);
      const params = { url: runUrl(run, tight), transport: run.transport, token: token(user), user, hb: 250 };
      await withPage(tight, '/herald.html', params, async ({ page }) => {
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
        await waitFor(page, () => window.h._stats.heartbeatsReceived >= 6 && window.h._stats.heartbeatsSent >= 6,
          null, 'six heart-beats each way');
        await tight.publish({ users: [user], event: 'test.alive', payload: { n: 1 } });
        await waitFor(page, () => window.T.received.length >= 1, null, 'a notification');
        const t = await page.evaluate(() => window.T);
        assert.deepEqual(t.states, ['connecting', 'connected'], 'never cut');
        assert.deepEqual(t.errors, []);
        assert.equal(await page.evaluate(() => window.h._stats.connects), 1);
      });
    });

    test(`${run.name}: a resume the buffer cannot cover gets a gap, then live messages`, async () => {
      if (run.sockjs) requireSockJS();
      const user = newUser(`${run.tag}-gap`);
      const params = { url: runUrl(run, tight), transport: run.transport, token: token(user), user };
      await withPage(tight, '/herald.html', params, async ({ page }) => {
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
        await tight.publish({ users: [user], event: 'test.first', payload: { n: 1 } });
        await waitFor(page, () => window.T.received.length >= 1, null, 'the first notification');
        await page.evaluate(() => window.h._dropTransport({ hold: true }));
        for (const n of [2, 3, 4, 5, 6]) await tight.publish({ users: [user], event: 'test.missed', payload: { n } });
        await page.evaluate(() => window.h._release());
        await waitFor(page, () => window.T.gaps.length >= 1 && window.h.state === 'connected', null, 'the gap marker');
        let t = await page.evaluate(() => window.T);
        const first = t.received[0].seq;
        assert.deepEqual(t.gaps, [{ reason: 'buffer-exceeded', seq: first + 5, epoch: t.received[0].epoch }]);
        assert.equal(t.received.length, 1, 'nothing replayed across a gap');
        assert.equal(await page.evaluate(() => window.h.lastSeq), first + 5);

        await tight.publish({ users: [user], event: 'test.live', payload: { n: 7 } });
        await waitFor(page, () => window.T.received.length >= 2, null, 'a live notification after the gap');
        t = await page.evaluate(() => window.T);
        assert.deepEqual(t.received.map((m) => [m.seq, JSON.parse(m.body).n]), [[first, 1], [first + 6, 7]]);
        assert.deepEqual(t.errors, []);
      });
    });
  }
});

describe('gateway restart', () => {
  test('every transport reconnects by itself and reports the new epoch as a gap', async () => {
    requireSockJS();
    const restarting = new Gateway();
    await restarting.start();
    const contexts = [];
    try {
      // One page per transport, all connected to the same gateway.
      const open = await Promise.all(CLIENT_RUNS.map(async (run) => {
        const user = newUser(`${run.tag}-restart`);
        const context = await browser.newContext();
        contexts.push(context);
        const page = await context.newPage();
        const params = { url: runUrl(run, restarting), transport: run.transport, token: token(user), user };
        await page.goto(`${pages.origin}/herald.html?${new URLSearchParams(params)}`);
        await waitFor(page, () => window.h && window.h.state === 'connected', null, `${run.name} connected`);
        return { run, user, page };
      }));
      for (const { user, page } of open) {
        await restarting.publish({ users: [user], event: 'test.before', payload: { n: 1 } });
        await waitFor(page, () => window.T.received.length >= 1, null, 'the first notification');
      }
      const oldEpochs = await Promise.all(open.map(({ page }) => page.evaluate(() => window.h.epoch)));

      // Mailboxes live in memory: a new process has new epochs.
      assert.equal(await restarting.restart(), 0, 'clean exit on SIGTERM');

      for (const [i, { run, user, page }] of open.entries()) {
        await waitFor(page, () => window.T.gaps.length >= 1 && window.h.state === 'connected', null,
          `${run.name}: reconnected, with a gap`);
        const t = await page.evaluate(() => window.T);
        assert.equal(t.gaps[0].reason, 'epoch-changed', run.name);
        assert.notEqual(t.gaps[0].epoch, oldEpochs[i], run.name);
        assert.ok(t.errors.every((e) => !e.fatal), `${run.name}: ${JSON.stringify(t.errors)}`);
        await restarting.publish({ users: [user], event: 'test.after', payload: { n: 2 } });
        await waitFor(page, () => window.T.received.length >= 2, null, `${run.name}: a notification after the restart`);
        const after = (await page.evaluate(() => window.T.received))[1];
        assert.equal(after.epoch, t.gaps[0].epoch, run.name);
        assert.equal(after.seq, t.gaps[0].seq + 1, run.name);
        assert.equal(await page.evaluate(() => window.h.transport), run.transport, run.name);
      }
    } catch (e) {
      e.message += `\n--- gateway log (tail):\n${restarting.log().slice(-3000)}`;
      throw e;
    } finally {
      for (const c of contexts) await c.close();
      await restarting.stop();
    }
  });
});

describe('shutdown with SockJS sessions', () => {
  // Session timeout 60 s and grace 8 s: a drain that waited for the closed
  // HTTP-transport sessions would last the whole grace; the gateway ends them
  // as soon as they were told, as it does WebSocket sessions.
  test('SIGTERM ends as soon as every SockJS session was told', async () => {
    requireSockJS();
    const g = new Gateway('shutdown_grace_ms = 8000\n\n[sockjs]\nsession_timeout_ms = 60000\n');
    await g.start();
    const contexts = [];
    try {
      const transports = ['xhr-streaming', 'xhr-polling', 'eventsource'];
      const pagesOpen = await Promise.all(transports.map(async (transport) => {
        const user = newUser(`drain-${transport}`);
        const context = await browser.newContext();
        contexts.push(context);
        const page = await context.newPage();
        await page.goto(`${pages.origin}/herald.html?${new URLSearchParams({ url: `${g.base}/sockjs`, transport, token: token(user) })}`);
        await waitFor(page, () => window.h && window.h.state === 'connected', null, `${transport} connected`);
        return page;
      }));
      const code = await g.stop();
      // The gateway wrote the notice before it exited; the page may take a
      // moment longer to read it.
      for (const [i, page] of pagesOpen.entries()) {
        await waitFor(page, () => window.T.errors.length >= 1, null, `${transports[i]}: an error`);
        const errors = await page.evaluate(() => window.T.errors.map((e) => e.message));
        assert.equal(errors[0], 'server shutting down', `${transports[i]} was told first: ${JSON.stringify(errors)}`);
      }
      assert.equal(code, 0);
      // The drain ended because every session closed, not because the
      // grace ran out (the gateway logs which; no wall-clock bound here).
      const log = g.log();
      assert.doesNotMatch(log, /shutdown grace elapsed/, log);
      assert.match(log, /stopped/, log);
    } finally {
      for (const c of contexts) await c.close();
      g.kill();
    }
  });
});

describe('the demo page (dev mode)', () => {
  test('served with /js/herald.js: goes live, shows a published notification as text, resumes', async () => {
    const dev = new Gateway(undefined, { dev: true });
    await dev.start();
    const context = await browser.newContext();
    const page = await context.newPage();
    const logs = [];
    page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
    page.on('dialog', (d) => {
      logs.push(`dialog: ${d.message()}`);
      d.dismiss();
    });
    try {
      // The module the gateway serves is the source file (include_str!).
      const served = await (await fetch(`${dev.base}/js/herald.js`)).text();
      assert.ok(served === readFileSync(join(REPO, 'gateway/js/src/herald.js'), 'utf8'),
        '/js/herald.js differs from gateway/js/src/herald.js: rebuild the gateway');

      const devToken = readFileSync(join(dev.dataDir, 'dev-token'), 'utf8').trim();
      const key = readFileSync(join(dev.dataDir, 'dev-api-key'), 'utf8').trim();
      await page.goto(`${dev.base}/?${new URLSearchParams({ token: devToken, key })}`);
      await waitFor(page, () => document.getElementById('state').textContent === 'live', null, 'the demo going live');

      // Publish with the page's own form; markup in the payload stays text.
      await page.fill('#event', 'demo.xss');
      await page.fill('#payload', '{"text": "<img src=x onerror=alert(1)>"}');
      await page.click('#send');
      await waitFor(page, () => document.querySelectorAll('#list li').length === 1, null, 'the notification listed');
      const item = await page.evaluate(() => ({
        event: document.querySelector('#list li .event').textContent,
        body: document.querySelector('#list li pre').textContent,
        images: document.querySelectorAll('#list img').length,
      }));
      assert.deepEqual(item, { event: 'demo.xss', body: '{\n  "text": "<img src=x onerror=alert(1)>"\n}', images: 0 });

      // Lose the transport, publish with curl's request, get it on resume.
      await page.evaluate(() => window.herald._dropTransport({ hold: true }));
      const r = await fetch(`${dev.base}/v1/notifications`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ users: ['demo'], event: 'demo.hello', payload: { text: 'while away' } }),
      });
      assert.equal(r.status, 202);
      await page.evaluate(() => window.herald._release());
      await waitFor(page, () => document.querySelectorAll('#list li').length === 2, null, 'the replayed notification');
      assert.equal(await page.evaluate(() => document.getElementById('state').textContent), 'live');
      assert.match(await page.evaluate(() => document.getElementById('info').textContent), /^user demo · epoch \d+ · seq \d+$/);
      assert.deepEqual(logs.filter((l) => /^(error|pageerror|dialog)/.test(l)), []);
    } catch (e) {
      e.message += `\n--- page console:\n${logs.join('\n')}\n--- gateway log (tail):\n${dev.log().slice(-3000)}`;
      throw e;
    } finally {
      await context.close();
      await dev.stop();
    }
  });

  // The page's nits: the curl command is never wrapped inside an argument,
  // "epoch" is explained, a second tab whose header shows the mailbox's seq
  // says why its list is empty, and a normal stop is not a "Server error".
  test('a second tab, the curl command, the legend, and a normal stop', async () => {
    const dev = new Gateway(undefined, { dev: true });
    await dev.start();
    const context = await browser.newContext({ viewport: { width: 420, height: 800 } });
    const first = await context.newPage();
    const page = await context.newPage();
    try {
      const devToken = readFileSync(join(dev.dataDir, 'dev-token'), 'utf8').trim();
      const key = readFileSync(join(dev.dataDir, 'dev-api-key'), 'utf8').trim();
      const url = `${dev.base}/?${new URLSearchParams({ token: devToken, key })}`;
      // A first tab receives a notification; the second opens after it.
      await first.goto(url);
      await waitFor(first, () => document.getElementById('state').textContent === 'live', null, 'the first tab going live');
      const r = await fetch(`${dev.base}/v1/notifications`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ users: ['demo'], event: 'demo.hello', payload: { text: 'before this tab' } }),
      });
      assert.equal(r.status, 202);
      await waitFor(first, () => document.querySelectorAll('#list li').length === 1, null, 'the first tab listing it');
      await page.goto(url);
      await waitFor(page, () => document.getElementById('state').textContent === 'live', null, 'the demo going live');
      await waitFor(page, () => / seq [1-9]/.test(document.getElementById('info').textContent), null, 'the mailbox seq');
      const empty = await page.evaluate(() => document.getElementById('empty').textContent);
      assert.match(empty, /^Nothing since this page opened\. The mailbox is at seq [1-9]/);
      assert.match(await page.evaluate(() => document.getElementById('legend').textContent), /epoch/);
      // Narrow as it is, every line of the command is one line: no wrap.
      const curl = await page.evaluate(() => {
        const pre = document.getElementById('curl');
        return { style: getComputedStyle(pre).whiteSpace, lines: pre.textContent.split('\n').length,
                 height: pre.clientHeight, lineHeight: parseFloat(getComputedStyle(pre).lineHeight) };
      });
      assert.equal(curl.style, 'pre');
      assert.equal(curl.lines, 4);
      assert.ok(curl.height < curl.lineHeight * 4 + 40, JSON.stringify(curl));
      // SIGTERM: the page says the gateway stops, not that something failed.
      const stopped = dev.stop();
      await waitFor(page, () => !document.getElementById('bye').hidden, null, 'the stop notice');
      assert.match(await page.evaluate(() => document.getElementById('byeText').textContent), /shutting down \(a normal stop\)/);
      assert.equal(await page.evaluate(() => document.getElementById('error').hidden), true);
      await stopped;
    } finally {
      await context.close();
      await dev.stop().catch(() => {});
    }
  });
});
