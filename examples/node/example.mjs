// Herald from a Node.js backend: mint a browser token, publish, schedule, read, cancel.
//
//   npm ci
//   HERALD_URL=http://127.0.0.1:8080 HERALD_API_KEY=... HERALD_JWT_SECRET=... node example.mjs
//
// Node 20+ (built-in fetch) and jose. Each step prints its HTTP status and Herald's JSON answer.
import { randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';

const url = process.env.HERALD_URL ?? 'http://127.0.0.1:8080';
const apiKey = process.env.HERALD_API_KEY;
const secret = process.env.HERALD_JWT_SECRET;
const user = process.env.HERALD_USER ?? 'alice';
if (!apiKey || !secret) throw new Error('set HERALD_API_KEY and HERALD_JWT_SECRET');

async function call(step, method, path, expect, body) {
  const res = await fetch(url + path, {
    method,
    headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  console.log(step, res.status, text);
  if (res.status !== expect) throw new Error(`${step}: expected ${expect}`);
}

// The browser's token: HS256 with the gateway's secret. sub is the user; add
// "client" and "site" claims for client scope and sites.
const token = await new SignJWT({})
  .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
  .setSubject(user)
  .setExpirationTime('1h')
  .sign(new TextEncoder().encode(secret));
console.log('token', token);

// Now, to one user. The id is the idempotency key: a retry is not delivered twice.
await call('publish', 'POST', '/v1/notifications', 202, {
  id: `welcome-${randomUUID()}`, users: [user], event: 'account.welcome',
  payload: { text: 'Welcome to Herald' },
});

// In ten minutes, stored durably until then.
const reminder = `reminder-${randomUUID()}`;
await call('schedule', 'POST', '/v1/notifications', 202, {
  id: reminder, users: [user], event: 'meeting.reminder',
  payload: { meeting: 42 }, delay_ms: 600_000,
});

await call('status', 'GET', `/v1/notifications/${reminder}`, 200); // "state": "scheduled"
await call('cancel', 'DELETE', `/v1/notifications/${reminder}`, 200); // 409 too_late once firing
