// The operator's console (/console) in Debian's chromium against the real
// standalone herald-gateway: a wrong key and a key without `admin` are
// refused with a clear message; an admin key signs in; the live figures
// move when a session connects and notifications are delivered; a topic
// with a bad retry condition shows the API's 422 next to that field, then
// saves; a scheduled notification is cancelled; a dead letter (a callback
// to a local receiver that fails both attempts) shows its attempts and is
// retried until the receiver takes it; dead letters are cancelled one by
// one and retried and cancelled all at once; the presence lookup answers or says
// it is not available on this server. Screenshots at 1280x800 and at a
// phone's size go to target/test-artifacts/console/ (HERALD_ARTIFACTS to
// change it; the path is printed).
//
//   cd tests/browser && npm ci && node --test console.test.js

import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { API_KEY, Gateway, REPO, TIMEOUT, launchBrowser, token, until } from './lib/harness.js';

const PUBLISH_ONLY_KEY = 'console-test-publish-only';
const ARTIFACTS = resolve(process.env.HERALD_ARTIFACTS || join(REPO, 'target/test-artifacts'), 'console');
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };

/** A callback receiver on 127.0.0.1: answers `status` and counts calls. */
async function startReceiver() {
  const receiver = { status: 500, calls: 0 };
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      receiver.calls += 1;
      res.writeHead(receiver.status, { 'content-type': 'text/plain' }).end(receiver.status === 200 ? 'ok' : 'receiver down');
    });
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  receiver.url = `http://127.0.0.1:${server.address().port}/hook`;
  receiver.close = () => new Promise((ok) => {
    server.closeAllConnections();
    server.close(() => ok());
  });
  return receiver;
}

let gw;
let browser;
let receiver;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  console.log(`console screenshots: ${ARTIFACTS}`);
  receiver = await startReceiver();
  gw = new Gateway(`
[callbacks]
allow_private_networks = true

[[api_key]]
name = "publisher"
key = "${PUBLISH_ONLY_KEY}"
ops = ["publish"]
`);
  await gw.start();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await receiver?.close();
  if (gw) {
    const code = await gw.stop();
    assert.equal(code, 0, `gateway exited ${code} on SIGTERM:\n${gw.log()}`);
  }
});

/** The API as an operator script would call it. */
async function call(method, path, body) {
  const r = await fetch(`${gw.base}${path}`, {
    method,
    headers: { authorization: `Bearer ${API_KEY}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

async function stateOf(id) {
  const { status, body } = await call('GET', `/v1/notifications/${id}`);
  assert.equal(status, 200, JSON.stringify(body));
  return body;
}

/** A page on the console in a fresh context (its own sessionStorage). */
async function openConsole(viewport = DESKTOP) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    // The API's refusals the tests cause (401, 403, 404, 422) are logged by the browser as failed loads.
    if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  await page.goto(`${gw.base}/console`);
  return { context, page, problems };
}

async function signIn(page, key) {
  await page.getByLabel('Operator API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

describe('a key that may not use the console', () => {
  test('a wrong key and a key without admin are refused with a clear message', async () => {
    const { context, page, problems } = await openConsole();
    try {
      await signIn(page, 'not-a-key');
      const error = page.locator('#login-error');
      await error.waitFor({ state: 'visible', timeout: TIMEOUT });
      assert.match(await error.textContent(), /refused \(401 Unauthorized\)/);
      assert.equal(await page.getByLabel('Operator API key').getAttribute('aria-invalid'), 'true');
      await page.screenshot({ path: join(ARTIFACTS, 'login-refused-1280x800.png') });

      await signIn(page, PUBLISH_ONLY_KEY);
      await page.waitForFunction(() => /403 Forbidden/.test(document.querySelector('#login-error').textContent), null, { timeout: TIMEOUT });
      assert.match(await error.textContent(), /needs the admin operation/);
      assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused key is not kept');
      assert.ok(await page.locator('#nav').isHidden());
      assert.deepEqual(problems, []);
    } finally {
      await context.close();
    }
  });
});

describe('an operator with an admin key', () => {
  let context;
  let page;
  let problems;
  let session;

  before(async () => {
    ({ context, page, problems } = await openConsole());
    await signIn(page, API_KEY);
    await page.locator('#who-key').waitFor({ state: 'visible', timeout: TIMEOUT });
  });

  after(async () => {
    await session?.close();
    await context?.close();
  });

  test('signs in: the key is named, kept in this tab only, and survives a reload', async () => {
    assert.equal(await page.locator('#who-key').textContent(), 'key-1');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('herald-console-key')), API_KEY);
    assert.equal(await page.evaluate(() => localStorage.length), 0);
    await page.reload();
    await page.locator('#who-key').waitFor({ state: 'visible', timeout: TIMEOUT });
    assert.equal(await page.locator('#nav a[aria-current="page"]').textContent(), 'Overview');
  });

  test('the live figures move when a session connects and notifications are delivered', async () => {
    const number = async (sel) => Number((await page.locator(sel).textContent()).replace(/[^\d.]/g, ''));
    await page.waitForFunction(() => document.querySelector('#sessions-total').textContent !== '—', null, { timeout: TIMEOUT });
    const sessionsBefore = await number('#sessions-total');
    const deliveredBefore = await number('#deliveries-total');
    // A STOMP session over raw WebSocket from another page of the browser.
    const user = `console-${process.pid}`;
    session = await context.newPage();
    await session.goto(`${gw.base}/healthz`);
    await session.evaluate(([url, jwt]) => new Promise((ok, fail) => {
      const ws = new WebSocket(url, ['v12.stomp']);
      window.received = 0;
      ws.onopen = () => ws.send(`CONNECT\naccept-version:1.2\nhost:herald\npasscode:${jwt}\n\n\0`);
      ws.onmessage = (m) => {
        if (m.data.startsWith('CONNECTED')) ws.send('SUBSCRIBE\nid:0\ndestination:/user/notifications\nreceipt:r0\n\n\0');
        else if (m.data.startsWith('RECEIPT')) ok();
        else if (m.data.startsWith('MESSAGE')) window.received += 1;
        else if (m.data.startsWith('ERROR')) fail(new Error(m.data));
      };
      ws.onerror = () => fail(new Error('websocket error'));
    }), [`${gw.base.replace('http', 'ws')}/ws`, token(user)]);
    await gw.publish([1, 2, 3].map((i) => ({ users: [user], event: 'console.test', payload: { i } })));
    await session.waitForFunction(() => window.received === 3, null, { timeout: TIMEOUT });
    // The console polls every 5 s: the next poll shows both.
    await page.waitForFunction(([s, d]) => {
      const n = (sel) => Number(document.querySelector(sel).textContent.replace(/[^\d.]/g, ''));
      return n('#sessions-total') >= s + 1 && n('#deliveries-total') >= d + 3;
    }, [sessionsBefore, deliveredBefore], { timeout: TIMEOUT });
    const transports = await page.locator('#sessions-by-transport dt').allTextContents();
    assert.ok(transports.includes('websocket'), transports.join(', '));
    assert.ok(await page.locator('#chart-sessions svg path').count() >= 1, 'the sessions chart draws');
    await page.screenshot({ path: join(ARTIFACTS, 'overview-1280x800.png') });
  });

  test('a bad retry condition is shown next to its field; the fixed topic saves', async () => {
    await page.getByRole('link', { name: 'Topics' }).click();
    await page.getByRole('button', { name: 'New topic' }).click();
    await page.getByLabel('Name').fill('billing');
    await page.getByLabel('Callback URL').fill(receiver.url);
    await page.getByLabel('Retry policy').selectOption('delays');
    await page.getByLabel('Delays in ms, comma-separated').fill('100');
    await page.getByLabel('Retry condition').fill('{res.code} != 200 &&');
    await page.getByRole('button', { name: 'Save topic' }).click();
    const fieldError = page.locator('[data-field="retry_if"] .field-error');
    await fieldError.waitFor({ state: 'visible', timeout: TIMEOUT });
    assert.match(await fieldError.textContent(), /retry_if/);
    assert.match(await fieldError.textContent(), /at character 21/);
    const input = page.getByLabel('Retry condition');
    assert.equal(await input.getAttribute('aria-invalid'), 'true');
    assert.match(await input.getAttribute('aria-describedby'), /err-t-retry_if/);
    assert.equal(await page.locator('.field-error').count(), 1, 'only that field is blamed');
    assert.equal((await call('GET', '/v1/topics/billing')).status, 404, 'nothing was registered');
    await page.screenshot({ path: join(ARTIFACTS, 'topic-error-1280x800.png') });

    await input.fill('{res.code} != 200');
    await page.getByRole('button', { name: 'Save topic' }).click();
    await page.locator('#topics-table tr[data-topic="billing"]').waitFor({ timeout: TIMEOUT });
    assert.ok(await page.locator('#topic-form').isHidden());
    const saved = await call('GET', '/v1/topics/billing');
    assert.deepEqual([saved.body.retry, saved.body.retry_if, saved.body.callback_url],
      [{ delays_ms: [100] }, '{res.code} != 200', receiver.url]);
    // Edit: the form comes back filled in.
    await page.getByRole('button', { name: 'Edit topic billing' }).click();
    assert.equal(await page.getByLabel('Delays in ms, comma-separated').inputValue(), '100');
    await page.getByRole('button', { name: 'Cancel', exact: true }).click();
  });

  test('a scheduled notification is cancelled from the list', async () => {
    const id = `later-${process.pid}`;
    await gw.publish({ id, users: ['nobody'], event: 'later', delay_ms: 3_600_000 });
    await page.getByRole('link', { name: 'Notifications' }).click();
    await page.getByLabel('State').selectOption('scheduled');
    await page.getByRole('button', { name: 'Show' }).click();
    const row = page.locator(`#notes-table tr[data-id="${id}"]`);
    await row.waitFor({ timeout: TIMEOUT });
    assert.equal(await row.locator('.badge').textContent(), 'scheduled');
    await page.getByRole('button', { name: `Cancel ${id}` }).click();
    await row.waitFor({ state: 'detached', timeout: TIMEOUT });
    assert.match(await page.locator('#flash').textContent(), /is cancelled/);
    assert.equal((await stateOf(id)).state, 'cancelled');
  });

  test('a dead letter shows its attempts and is retried', async () => {
    const id = `dead-${process.pid}`;
    await gw.publish({ id, users: ['nobody'], event: 'invoice', topic: 'billing' });
    await until(async () => (await stateOf(id)).state === 'dead', 4 * TIMEOUT, `${id} dead`);
    assert.equal(receiver.calls, 2, 'two attempts: one, then one retry after 100 ms');

    await page.getByLabel('State').selectOption('dead');
    await page.locator('#n-topic').fill('billing');
    await page.getByRole('button', { name: 'Show' }).click();
    const row = page.locator(`#notes-table tr[data-id="${id}"]`);
    await row.waitFor({ timeout: TIMEOUT });
    await page.getByRole('button', { name: `Details of ${id}` }).click();
    const attempts = page.locator('#attempts-table tbody tr');
    await page.locator('#note-detail').waitFor({ state: 'visible', timeout: TIMEOUT });
    assert.equal(await attempts.count(), 2);
    assert.match(await attempts.nth(1).textContent(), /500/);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(ARTIFACTS, 'notifications-1280x800.png'), fullPage: true });

    receiver.status = 200;
    await page.getByRole('button', { name: `Retry ${id}` }).click();
    await page.waitForFunction(() => /sent again/.test(document.querySelector('#flash').textContent), null, { timeout: TIMEOUT });
    await until(async () => (await stateOf(id)).state === 'delivered', 4 * TIMEOUT, `${id} delivered after the retry`);
    assert.equal(receiver.calls, 3);
  });

  test('dead letters are retried all at once, and cancelled all at once', async () => {
    // One attempt each, so that the receiver's host stays under the
    // callback breaker's five failures in a row (docs/callbacks.md).
    const topic = `bulk-${process.pid}`;
    const put = await call('PUT', `/v1/topics/${topic}`, { callback_url: receiver.url, retry: { delays_ms: [] } });
    assert.ok(put.status === 201 || put.status === 200, JSON.stringify(put.body));
    receiver.status = 500;
    const ids = [0, 1, 2].map((i) => `${topic}-${i}`);
    for (const id of ids) await gw.publish({ id, users: ['nobody'], event: 'invoice', topic });
    for (const id of ids) await until(async () => (await stateOf(id)).state === 'dead', 4 * TIMEOUT, `${id} dead`);
    await page.getByRole('link', { name: 'Notifications' }).click();
    await page.getByLabel('State').selectOption('dead');
    await page.locator('#n-topic').fill(topic);
    await page.getByRole('button', { name: 'Show' }).click();
    await page.locator(`#notes-table tr[data-id="${ids[0]}"]`).waitFor({ timeout: TIMEOUT });
    assert.match(await page.locator('#dead-bulk-scope').textContent(), new RegExp(`topic ${topic}`));

    // Cancel one alone, then send the rest again, all at once.
    await page.getByRole('button', { name: `Cancel ${ids[0]}` }).click();
    await until(async () => (await stateOf(ids[0])).state === 'cancelled', TIMEOUT, `${ids[0]} cancelled`);
    receiver.status = 200;
    page.once('dialog', (d) => d.accept());
    await page.getByRole('button', { name: 'Retry all' }).click();
    await page.waitForFunction(() => /Sent again: 2 dead letters/.test(document.querySelector('#flash').textContent), null, { timeout: TIMEOUT });
    for (const id of ids.slice(1)) await until(async () => (await stateOf(id)).state === 'delivered', 4 * TIMEOUT, `${id} delivered`);

    // One more dies: "Cancel all" ends it.
    receiver.status = 500;
    const last = `${topic}-3`;
    await gw.publish({ id: last, users: ['nobody'], event: 'invoice', topic });
    await until(async () => (await stateOf(last)).state === 'dead', 4 * TIMEOUT, `${last} dead`);
    await page.getByRole('button', { name: 'Show' }).click();
    await page.locator(`#notes-table tr[data-id="${last}"]`).waitFor({ timeout: TIMEOUT });
    page.once('dialog', (d) => d.accept());
    await page.getByRole('button', { name: 'Cancel all' }).click();
    await page.waitForFunction(() => /Cancelled: 1 dead letter\b/.test(document.querySelector('#flash').textContent), null, { timeout: TIMEOUT });
    assert.equal((await stateOf(last)).state, 'cancelled');
    await page.locator('#dead-bulk').waitFor({ state: 'hidden', timeout: TIMEOUT });
    receiver.status = 200;
  });

  test('the presence lookup answers, or says it is not available here', async () => {
    await page.getByRole('link', { name: 'Presence' }).click();
    await page.getByLabel('User id').fill('alice');
    await page.getByRole('button', { name: 'Look up' }).click();
    const served = (await call('GET', '/v1/presence/users/alice')).status !== 404;
    if (served) {
      await page.locator('#presence-result').waitFor({ state: 'visible', timeout: TIMEOUT });
      assert.match(await page.locator('#presence-result').textContent(), /alice/);
    } else {
      const error = page.locator('#presence-error');
      await error.waitFor({ state: 'visible', timeout: TIMEOUT });
      assert.match(await error.textContent(), /not available on this server/);
    }
  });

  test('a test notification reaches the user; a disconnect ends their session with the reason', async () => {
    const user = `console-kick-${process.pid}`;
    const tab = await context.newPage();
    try {
      await tab.goto(`${gw.base}/healthz`);
      await tab.evaluate(([url, jwt]) => new Promise((ok, fail) => {
        const ws = new WebSocket(url, ['v12.stomp']);
        window.got = [];
        window.closeCode = null;
        ws.onopen = () => ws.send(`CONNECT\naccept-version:1.2\nhost:herald\npasscode:${jwt}\n\n\0`);
        ws.onmessage = (m) => {
          if (m.data.startsWith('CONNECTED')) ws.send('SUBSCRIBE\nid:0\ndestination:/user/notifications\nreceipt:r0\n\n\0');
          else if (m.data.startsWith('RECEIPT')) ok();
          else window.got.push(m.data);
        };
        ws.onclose = (ev) => { window.closeCode = ev.code; };
        ws.onerror = () => fail(new Error('websocket error'));
      }), [`${gw.base.replace('http', 'ws')}/ws`, token(user)]);

      await page.getByRole('link', { name: 'Presence' }).click();
      await page.getByLabel('Recipient').fill(user);
      await page.getByLabel('Event').fill('console.ping');
      await page.getByRole('button', { name: 'Publish' }).click();
      await page.waitForFunction(() => /^Published to /.test(document.querySelector('#flash').textContent), null, { timeout: TIMEOUT });
      await tab.waitForFunction(() => window.got.some((f) => f.startsWith('MESSAGE') && f.includes('event:console.ping')), null, { timeout: TIMEOUT });

      // A disconnect needs a reason: the form says so before any request.
      await page.getByLabel('User to disconnect').fill(user);
      await page.getByRole('button', { name: 'Disconnect' }).click();
      await page.locator('#disconnect-form .field-error').waitFor({ timeout: TIMEOUT });
      await page.getByLabel('Reason').fill('console test: maintenance');
      await page.getByRole('button', { name: 'Disconnect' }).click();
      await page.waitForFunction(() => /1 session ended/.test(document.querySelector('#flash').textContent), null, { timeout: TIMEOUT });
      await tab.waitForFunction(() => window.closeCode !== null, null, { timeout: TIMEOUT });
      const error = await tab.evaluate(() => window.got.find((f) => f.startsWith('ERROR')));
      assert.match(error, /message:disconnected by an operator\\c console test\\c maintenance\n/);
      assert.equal(await tab.evaluate(() => window.closeCode), 1008);
      assert.deepEqual(problems, []);
    } finally {
      await tab.close();
    }
  });

  test('the topics page at 1280x800 and every view on a phone', async () => {
    await page.getByRole('link', { name: 'Topics' }).click();
    await page.locator('#topics-table tr[data-topic="billing"]').waitFor({ timeout: TIMEOUT });
    await page.screenshot({ path: join(ARTIFACTS, 'topics-1280x800.png') });
    // The same tab (the key is in its sessionStorage) at a phone's size.
    await page.setViewportSize(PHONE);
    for (const view of ['overview', 'topics', 'notifications']) {
      await page.getByRole('link', { name: view[0].toUpperCase() + view.slice(1), exact: true }).click();
      await page.locator(`#view-${view}`).waitFor({ state: 'visible', timeout: TIMEOUT });
      if (view === 'topics') await page.locator('#topics-table tr[data-topic="billing"]').waitFor({ timeout: TIMEOUT });
      // Nothing is wider than the phone: tables scroll inside their cards.
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `${view} overflows the phone by ${overflow}px`);
      await page.evaluate(() => {
        window.scrollTo(0, 0);
        for (const w of document.querySelectorAll('.table-wrap')) w.scrollLeft = 0;
      });
      await page.screenshot({ path: join(ARTIFACTS, `${view}-phone-390x844.png`), fullPage: true });
    }
    await page.setViewportSize(DESKTOP);
    assert.deepEqual(problems, []);
  });
});
