// Publishing to Herald over AMQP with amqplib: to a user, delayed, cancelled.
//
//   npm ci
//   HERALD_AMQP_URL=amqp://guest:guest@127.0.0.1:5672 \
//   HERALD_URL=http://127.0.0.1:8090 HERALD_API_KEY=... node publish.mjs
//
// Publishes to the exchange `herald` (HERALD_AMQP_EXCHANGE) of a root broker,
// on a confirm channel. AMQP gives no answer beyond the broker's confirm: the
// delayed notification's status is read from a router's HTTP API (HERALD_URL,
// a key with the `status` operation). Prints each step.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp from 'amqplib';

const amqpUrl = process.env.HERALD_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const exchange = process.env.HERALD_AMQP_EXCHANGE ?? 'herald';
const url = process.env.HERALD_URL ?? 'http://127.0.0.1:8090';
const apiKey = process.env.HERALD_API_KEY;
const user = process.env.HERALD_USER ?? 'alice';
if (!apiKey) throw new Error('set HERALD_API_KEY');

// Print the router's status of `id` once its state is `state` (10 s at most).
async function waitStatus(id, state) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await fetch(`${url}/v1/notifications/${id}`, {
      headers: { Authorization: `Bearer ${apiKey}` },
    });
    const text = await res.text();
    if (res.status === 200 && JSON.parse(text).state === state) {
      console.log('status', res.status, text);
      return;
    }
    if (Date.now() > deadline) throw new Error(`status ${res.status} ${text}: expected ${state}`);
    await sleep(100); // the router stores what it consumes: ask again
  }
}

const conn = await amqp.connect(amqpUrl);
const channel = await conn.createConfirmChannel();

// Now, to one user. messageId is the idempotency key: set it.
const welcome = `welcome-${randomUUID()}`;
const welcomeBody = Buffer.from(JSON.stringify({ text: 'Welcome to Herald' }));
channel.publish(exchange, 'account.welcome', welcomeBody, {
  messageId: welcome, contentType: 'application/json', persistent: true,
  headers: { users: [user], event: 'account.welcome' }, // users: an array of strings
});
await channel.waitForConfirms(); // rejects if the broker refused it
console.log('publish confirmed', welcome);

// In ten minutes ('delay-ms': an integer), stored durably by the router until then.
const reminder = `reminder-${randomUUID()}`;
channel.publish(exchange, 'meeting.reminder', Buffer.from(JSON.stringify({ meeting: 42 })), {
  messageId: reminder, contentType: 'application/json', persistent: true,
  headers: { users: [user], event: 'meeting.reminder', 'delay-ms': 600_000 },
});
await channel.waitForConfirms();
console.log('schedule confirmed', reminder);
// The broker's confirm says the broker has it; the router's status says the
// router accepted it (a refused one would be dead-lettered instead).
await waitStatus(reminder, 'scheduled');

// Cancel: type herald.cancel, messageId the notification's; the body is ignored.
channel.publish(exchange, 'cancel', Buffer.alloc(0), {
  messageId: reminder, type: 'herald.cancel', persistent: true,
});
await channel.waitForConfirms();
console.log('cancel confirmed', reminder);
await waitStatus(reminder, 'cancelled'); // a cancel after the claim is too late: delivered
await conn.close();
