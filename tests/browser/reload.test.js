// Resume after a page reload, in Chromium against the real gateway: the
// client's `resume: { storage: 'session' }` option (gateway/js/README.md,
// "Resume after a page reload").
//
// A page receives notifications, then loses its transport (so what follows is
// published while it is away), is reloaded, and must show every notification
// published meanwhile exactly once, in order, before the live ones; over the
// raw WebSocket and SockJS xhr-streaming. Also: leaving the page and coming
// back in the same tab; without the option a reload goes live (the default
// is unchanged); another user's token in the same tab never resumes the
// stored position.
//
//   cd tests/browser && npm ci && node --test reload.test.js
//
// HERALD_GATEWAY_BIN names the binary, HERALD_CHROMIUM the browser (see
// lib/harness.js).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Gateway, TIMEOUT, launchBrowser, startPageServer, token } from './lib/harness.js';

const ENTRY = 'herald.resume:default:*';

let gw;
let pages;
let browser;

before(async () => {
  gw = new Gateway();
  await gw.start();
  pages = await startPageServer();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await pages?.close();
  if (gw) assert.equal(await gw.stop(), 0, `gateway exited badly on SIGTERM:\n${gw.log()}`);
});

let users = 0;
const newUser = (tag) => `reload-${tag}-${process.pid}-${++users}`;

const RUNS = [
  { name: 'raw WebSocket /ws', tag: 'raw', transport: 'websocket-raw', url: () => `ws://127.0.0.1:${gw.port}/ws` },
  { name: 'SockJS xhr-streaming', tag: 'xs', transport: 'xhr-streaming', url: () => `${gw.base}/sockjs` },
];

/** One tab (a fresh browser context); `body` gets it and a way to open pages. */
async function withTab(body) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const logs = [];
  page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
  const open = (params) => page.goto(`${pages.origin}/herald.html?${new URLSearchParams(params)}`);
  try {
    await body({ page, open });
  } catch (e) {
    let state = '';
    try {
      state = JSON.stringify(await page.evaluate(() => ({ T: window.T, stored: sessionStorage.getItem('herald.resume:default:*') })));
    } catch { /* page gone */ }
    e.message += `\n--- page state: ${state}\n--- page console:\n${logs.slice(-40).join('\n')}` +
      `\n--- gateway log (tail):\n${gw.log().slice(-3000)}`;
    throw e;
  } finally {
    await context.close();
  }
}

async function waitFor(page, fn, arg, what) {
  try {
    await page.waitForFunction(fn, arg, { timeout: TIMEOUT });
  } catch (e) {
    throw new Error(`waiting for ${what}: ${e.message.split('\n')[0]}`);
  }
}

const received = (page) => page.evaluate(() => window.T.received.map((m) => ({ n: JSON.parse(m.body).n, seq: m.seq, epoch: m.epoch })));
/** The stored position, without `heard` once it is checked to be a time of the last minute (when
 * the session last sent a frame: a page reloaded after its edge died says how long it was away). */
async function stored(page) {
  const p = await page.evaluate((key) => JSON.parse(sessionStorage.getItem(key)), ENTRY);
  if (p !== null) {
    assert.ok(Number.isSafeInteger(p.heard) && Math.abs(Date.now() - p.heard) < 60_000, `heard: ${p.heard}`);
    delete p.heard;
  }
  return p;
}
const publish = (user, n) => gw.publish({ users: [user], event: 'test.reload', payload: { n } });

/** Every notification once, in order, seqs consecutive, one epoch. */
function assertOnceInOrder(all, ns) {
  assert.deepEqual(all.map((m) => m.n), ns, 'every notification once, in order');
  all.forEach((m, i) => assert.equal(m.seq, all[0].seq + i, `seqs consecutive: ${all.map((x) => x.seq)}`));
  assert.equal(new Set(all.map((m) => m.epoch)).size, 1, 'one epoch');
}

describe('resume after a page reload (resume: session)', () => {
  for (const run of RUNS) {
    test(`${run.name}: what was published while the page was away arrives after the reload, once, in order`, async () => {
      const user = newUser(run.tag);
      const params = { url: run.url(), transport: run.transport, token: token(user), user, resume: 'session' };
      await withTab(async ({ page, open }) => {
        await open(params);
        await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
        for (const n of [1, 2]) await publish(user, n);
        await waitFor(page, () => window.T.received.length === 2, null, 'the first two');
        const before = await received(page);
        assert.deepEqual(await stored(page), { v: 1, user, epoch: before[1].epoch, seq: before[1].seq },
          'the position of the last one shown is stored');

        // Away: the transport is gone (no DISCONNECT), three are published,
        // then the page reloads with nothing in memory.
        await page.evaluate(() => window.h._dropTransport({ hold: true }));
        for (const n of [3, 4, 5]) await publish(user, n);
        const replayed = await gw.metric('herald_replayed_total');
        await page.reload();
        await waitFor(page, () => window.h && window.h.state === 'connected' && window.T.received.length >= 3, null,
          'the three published while away, after the reload');
        await publish(user, 6);
        await waitFor(page, () => window.T.received.length >= 4, null, 'a live one after the replay');

        const afterReload = await received(page);
        assertOnceInOrder([...before, ...afterReload], [1, 2, 3, 4, 5, 6]);
        assert.ok(await gw.metric('herald_replayed_total') >= replayed + 3, 'the gateway replayed them');
        const t = await page.evaluate(() => window.T);
        assert.deepEqual(t.states, ['connecting', 'connected'], 'one session on the reloaded page');
        assert.deepEqual(t.gaps, []);
        assert.deepEqual(t.errors, []);
        assert.deepEqual(await stored(page), { v: 1, user, epoch: afterReload[3].epoch, seq: afterReload[3].seq });
      });
    });
  }

  test('leaving the page and coming back in the same tab resumes too', async () => {
    const user = newUser('away');
    const params = { url: `ws://127.0.0.1:${gw.port}/ws`, token: token(user), user, resume: 'session' };
    await withTab(async ({ page, open }) => {
      await open(params);
      await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
      await publish(user, 1);
      await waitFor(page, () => window.T.received.length === 1, null, 'the first one');
      const before = await received(page);

      await page.goto('about:blank'); // the page and its connection are gone
      for (const n of [2, 3]) await publish(user, n);
      await open(params);
      await waitFor(page, () => window.h && window.h.state === 'connected' && window.T.received.length >= 2, null,
        'the two published while away');
      await publish(user, 4);
      await waitFor(page, () => window.T.received.length >= 3, null, 'a live one');
      assertOnceInOrder([...before, ...await received(page)], [1, 2, 3, 4]);
      assert.deepEqual(await page.evaluate(() => window.T.gaps), []);
    });
  });

  test('without the option a reload goes live: what was published meanwhile is not shown', async () => {
    const user = newUser('off');
    const params = { url: `ws://127.0.0.1:${gw.port}/ws`, token: token(user), user };
    await withTab(async ({ page, open }) => {
      await open(params);
      await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected');
      await publish(user, 1);
      await waitFor(page, () => window.T.received.length === 1, null, 'the first one');
      await page.evaluate(() => window.h._dropTransport({ hold: true }));
      await publish(user, 2);
      await page.reload();
      await waitFor(page, () => window.h && window.h.state === 'connected', null, 'connected after the reload');
      await publish(user, 3);
      await waitFor(page, () => window.T.received.length >= 1, null, 'a live one');
      assert.deepEqual((await received(page)).map((m) => m.n), [3]);
      assert.equal(await page.evaluate((key) => sessionStorage.getItem(key), ENTRY), null, 'nothing stored');
    });
  });

  test("another user's token in the same tab never resumes the stored position", async () => {
    const alice = newUser('alice');
    const bob = newUser('bob');
    const url = `ws://127.0.0.1:${gw.port}/ws`;
    await withTab(async ({ page, open }) => {
      await open({ url, token: token(alice), user: alice, resume: 'session' });
      await waitFor(page, () => window.h && window.h.state === 'connected', null, 'alice connected');
      for (const n of [1, 2]) await publish(alice, n);
      await waitFor(page, () => window.T.received.length === 2, null, "alice's two");
      await page.evaluate(() => window.h._dropTransport({ hold: true }));
      await publish(alice, 3);
      assert.equal((await stored(page)).user, alice);
      // Had the page resumed alice's position in bob's mailbox (another
      // epoch), the gateway would answer with an epoch-changed gap.

      await open({ url, token: token(bob), user: bob, resume: 'session' });
      await waitFor(page, () => window.h && window.h.state === 'connected', null, 'bob connected');
      const head = await page.evaluate(() => window.h.lastSeq);
      assert.equal(await page.evaluate(() => window.h.userName), bob);
      await publish(bob, 13);
      await waitFor(page, () => window.T.received.length >= 1, null, "bob's live one");
      const got = await received(page);
      assert.deepEqual(got.map((m) => m.n), [13], "bob sees only his live one: nothing of alice's, no replay");
      assert.equal(got[0].seq, head + 1);
      assert.deepEqual(await page.evaluate(() => window.T.gaps), []);
      assert.deepEqual(await stored(page), { v: 1, user: bob, epoch: got[0].epoch, seq: got[0].seq }, 'the entry is bob\'s now');
    });
  });
});
