// The BullMQ side of `herald-bench callbacks` (bench/src/callbacks/bullmq.rs starts it).
//
// One process holds a BullMQ Queue (the producer) and a Worker whose processor makes the same
// HTTP call as Herald's callback sender: a POST of the notification's payload to the bench's
// receiver, signed the Standard Webhooks way (webhook-id, webhook-timestamp,
// webhook-signature with HMAC-SHA256), with herald-topic, herald-attempt,
// herald-notification-id and herald-user, over keep-alive connections, a 2xx being success.
//
// It talks to the bench in JSON lines: argv[2] is its configuration; it prints
// {"event":"ready"} once the Worker is connected; a line `publish {...plan}` on stdin adds the
// plan's jobs as delayed jobs (`delay` to each one's due time) and prints
// {"event":"published",...}; a line `close` closes the Worker and the Queue and prints
// {"event":"closed",...}. Its keys are under its own prefix, which the bench deletes at the end.
'use strict';

const http = require('node:http');
const crypto = require('node:crypto');
const readline = require('node:readline');
const { Queue, Worker } = require('bullmq');

const config = JSON.parse(process.argv[2]);

function say(event) {
  process.stdout.write(JSON.stringify(event) + '\n');
}

const redis = new URL(config.redis_url);
const connection = {
  host: redis.hostname,
  port: Number(redis.port || 6379),
  db: Number(redis.pathname.slice(1) || 0),
  // BullMQ's Workers need this (blocking commands must not be retried by ioredis).
  maxRetriesPerRequest: null,
};

const receiver = new URL(config.receiver_url);
const agent = new http.Agent({ keepAlive: true, maxSockets: config.concurrency });
const secret = Buffer.from(config.signing_secret.replace(/^whsec_/, ''), 'base64');

// The same request Herald makes (engine/src/callback/exchange.rs).
function call(job) {
  const body = Buffer.from(job.data.payload);
  const id = job.data.id;
  const webhookId = 'msg_' + Buffer.from(id).toString('base64url');
  const timestamp = Math.floor(Date.now() / 1000).toString();
  const signature = crypto
    .createHmac('sha256', secret)
    .update(`${webhookId}.${timestamp}.`)
    .update(body)
    .digest('base64');
  const headers = {
    'content-type': 'application/json',
    'content-length': body.length,
    'webhook-id': webhookId,
    'webhook-timestamp': timestamp,
    'webhook-signature': `v1,${signature}`,
    'herald-topic': config.topic,
    'herald-attempt': String(job.attemptsMade + 1),
    'herald-notification-id': id,
    'herald-user': job.data.user,
  };
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: receiver.hostname,
        port: receiver.port,
        path: receiver.pathname,
        method: 'POST',
        headers,
        agent,
        timeout: config.timeout_ms,
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode >= 200 && res.statusCode < 300) resolve();
          else reject(new Error(`http ${res.statusCode}`));
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body);
  });
}

// The bench's payload (crate::harness::amqp::payload): {"seq":N,"pad":"xx..."} of `bytes`.
function payload(seq, bytes) {
  const head = `{"seq":${seq},"pad":"`;
  const tail = '"}';
  return head + 'x'.repeat(Math.max(0, bytes - head.length - tail.length)) + tail;
}

function dueMs(plan, k) {
  if (plan.kind === 'herd') return plan.at_ms;
  return plan.start_ms + Math.floor((k * 1000) / plan.rate);
}

const queue = new Queue(config.queue, { connection, prefix: config.prefix });
const counts = { completed: 0, failed: 0 };
const worker = new Worker(config.queue, call, {
  connection,
  prefix: config.prefix,
  concurrency: config.concurrency,
  removeOnComplete: { count: 0 },
  removeOnFail: { count: 10000 },
});
worker.on('completed', () => {
  counts.completed += 1;
});
worker.on('failed', (_job, err) => {
  counts.failed += 1;
  if (counts.failed <= 5) process.stderr.write(`bullmq peer: a job failed: ${err.message}\n`);
});
worker.on('error', (err) => process.stderr.write(`bullmq peer: worker error: ${err.message}\n`));

async function publish(plan) {
  const started = process.hrtime.bigint();
  let next = 0;
  let accepted = 0;
  const errors = {};
  async function producer() {
    for (;;) {
      const first = next;
      if (first >= plan.count) return;
      next = Math.min(plan.count, first + config.batch);
      const now = Date.now();
      const jobs = [];
      for (let k = first; k < next; k += 1) {
        const seq = plan.first + k;
        const id = `bq-${seq}`;
        jobs.push({
          name: 'callback',
          data: { id, user: `bench-0-${seq % 1000}`, payload: payload(seq, config.payload_bytes) },
          opts: {
            jobId: id,
            timestamp: now,
            delay: Math.max(0, dueMs(plan, k) - now),
            attempts: 10,
            backoff: { type: 'fixed', delay: 60000 },
          },
        });
      }
      try {
        await queue.addBulk(jobs);
        accepted += jobs.length;
      } catch (err) {
        errors[err.message] = (errors[err.message] || 0) + jobs.length;
      }
    }
  }
  await Promise.all(Array.from({ length: config.connections }, producer));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  say({ event: 'published', accepted, seconds, errors });
}

async function close() {
  await worker.close();
  await queue.close();
  agent.destroy();
  say({ event: 'closed', completed: counts.completed, failed: counts.failed });
  process.exit(0);
}

async function main() {
  await worker.waitUntilReady();
  await queue.waitUntilReady();
  say({ event: 'ready', pid: process.pid, bullmq: require('bullmq/package.json').version });
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (line.startsWith('publish ')) {
      await publish(JSON.parse(line.slice('publish '.length)));
    } else if (line.trim() === 'close') {
      await close();
    }
  }
  // The bench went away: close all the same.
  await close();
}

main().catch((err) => {
  say({ event: 'fatal', error: String(err && err.stack ? err.stack : err) });
  process.exit(1);
});
