// Herald behind HAProxy terminating TLS, in Chromium: HAProxy from
// haproxy/generate --tls-cert with a certificate made at test time
// (lib/haproxy.js), the gateway behind it reading the PROXY v2 header
// ([proxy] protocol = true). Chromium accepts exactly that certificate's key
// (--ignore-certificate-errors-spki-list), nothing else. Our client connects
// over wss:// (raw WebSocket /ws) and over https:// SockJS (xhr-streaming and
// websocket), receives a notification published over HTTP, and the gateway
// counts the session under its transport.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Gateway, TIMEOUT, launchBrowser, startPageServer, token } from './lib/harness.js';
import { TlsProxy } from './lib/haproxy.js';

let gw;
let proxy;
let pages;
let browser;

before(async () => {
  gw = new Gateway('[proxy]\nprotocol = true\ntrusted = ["127.0.0.1/32"]\n');
  await gw.start();
  proxy = new TlsProxy(gw);
  await proxy.start();
  pages = await startPageServer();
  browser = await launchBrowser([`--ignore-certificate-errors-spki-list=${proxy.spki}`]);
});

after(async () => {
  await browser?.close();
  await pages?.close();
  await proxy?.stop();
  if (gw) assert.equal(await gw.stop(), 0, gw.log());
});

let users = 0;

const RUNS = [
  { name: 'raw WebSocket over wss://', transport: 'websocket-raw', server: 'websocket',
    url: () => `wss://127.0.0.1:${proxy.port}/ws`, scheme: 'wss:' },
  { name: 'SockJS xhr-streaming over https://', transport: 'xhr-streaming', server: 'xhr_streaming',
    url: () => `${proxy.origin}/sockjs`, scheme: 'https:' },
  { name: 'SockJS websocket over https:// (wss://)', transport: 'websocket', server: 'sockjs_websocket',
    url: () => `${proxy.origin}/sockjs`, scheme: 'wss:' },
];

describe('through HAProxy with TLS', () => {
  for (const run of RUNS) {
    test(`${run.name}: connects and receives`, async () => {
      const user = `tls-${process.pid}-${++users}`;
      const opened = await gw.metric('herald_sessions_opened_total', { transport: run.server });
      const context = await browser.newContext();
      const page = await context.newPage();
      const urls = [];
      const logs = [];
      page.on('request', (r) => urls.push(r.url()));
      page.on('websocket', (ws) => urls.push(ws.url()));
      page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
      try {
        const params = new URLSearchParams({ url: run.url(), transport: run.transport, token: token(user), user });
        await page.goto(`${pages.origin}/herald.html?${params}`);
        await page.waitForFunction(() => window.h && window.h.state === 'connected', null, { timeout: TIMEOUT });
        await gw.publish({ users: [user], event: 'test.tls', payload: { n: 1 } });
        await page.waitForFunction(() => window.T.received.length >= 1, null, { timeout: TIMEOUT });
        const t = await page.evaluate(() => window.T);
        assert.deepEqual(JSON.parse(t.received[0].body), { n: 1 });
        assert.deepEqual(t.errors, []);
        const toProxy = urls.filter((u) => new URL(u).port === String(proxy.port));
        assert.ok(toProxy.some((u) => new URL(u).protocol === run.scheme), `a ${run.scheme} request: ${toProxy}`);
        assert.ok(toProxy.every((u) => ['https:', 'wss:'].includes(new URL(u).protocol)), `only TLS: ${toProxy}`);
        assert.equal(await gw.metric('herald_sessions_opened_total', { transport: run.server }), opened + 1);
        await page.evaluate(() => window.h.close());
      } catch (e) {
        e.message += `\n--- page console:\n${logs.slice(-20).join('\n')}\n--- haproxy log:\n${proxy.log()}` +
          `\n--- gateway log:\n${gw.log().slice(-2000)}`;
        throw e;
      } finally {
        await context.close();
      }
    });
  }

  test('a certificate Chromium was not told about is refused', async () => {
    const other = await launchBrowser();
    try {
      const page = await (await other.newContext()).newPage();
      await assert.rejects(page.goto(`${proxy.origin}/healthz`), /ERR_CERT_AUTHORITY_INVALID|ERR_CERT/);
    } finally {
      await other.close();
    }
  });
});
