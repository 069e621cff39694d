// The API reference page (/v1/docs) in Debian's chromium against the real
// standalone herald-gateway, with every request to another origin refused
// (and recorded): Redoc renders the gateway's own /v1/openapi.json, its
// operations are listed, and nothing was asked of another origin, so the
// page works with no network.
//
//   cd tests/browser && npm ci && node --test apidocs.test.js

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Gateway, TIMEOUT, launchBrowser } from './lib/harness.js';

let gw;
let browser;

before(async () => {
  gw = new Gateway('');
  await gw.start();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  if (gw) {
    const code = await gw.stop();
    assert.equal(code, 0, `gateway exited ${code} on SIGTERM:\n${gw.log()}`);
  }
});

test('the reference page renders the document offline', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const own = new URL(gw.base).origin;
  const elsewhere = [];
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(`${own}/`) || url.startsWith('blob:') || url.startsWith('data:')) return route.continue();
    elsewhere.push(url);
    return route.abort();
  });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  try {
    const r = await page.goto(`${gw.base}/v1/docs`);
    assert.equal(r.status(), 200);
    // Redoc's title and the operations of the gateway's document.
    await page.getByRole('heading', { name: /Herald HTTP API/ }).first().waitFor({ timeout: TIMEOUT });
    // Each operation is a heading of the middle panel, named by its summary.
    for (const summary of [/^This document\s*$/, /^Prometheus metrics/, /^End every live session of a user/]) {
      await page.locator('h2').filter({ hasText: summary }).first().waitFor({ timeout: TIMEOUT });
    }
    const text = await page.locator('body').innerText();
    assert.match(text, /\/v1\/notifications/);
    assert.deepEqual(elsewhere, [], 'nothing is fetched from another origin');
    assert.deepEqual(problems, []);
  } finally {
    await context.close();
  }
});
