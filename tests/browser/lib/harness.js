// What the browser tests run against: the real herald-gateway binary, a
// static server for the test pages (another origin: every gateway request is
// cross-origin), and Debian's chromium driven by playwright-core.
//
// Every wait is an event or a poll with a deadline; nothing sleeps to
// synchronise.

import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const HERE = dirname(fileURLToPath(import.meta.url));
export const BROWSER_DIR = resolve(HERE, '..');
export const REPO = resolve(BROWSER_DIR, '../..');

export const SECRET = 'herald-browser-secret-0123456789abcdef-0123456789abcdef';
export const API_KEY = 'browser-test-api-key';
/** How long any single expected event may take (a loaded 2-core CI machine). */
export const TIMEOUT = 15_000;
/** sysexits EX_UNAVAILABLE: the gateway could not bind its port. */
const EX_UNAVAILABLE = 69;

export const CHROMIUM = process.env.HERALD_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run',
];

export function gatewayBin() {
  if (process.env.HERALD_GATEWAY_BIN) return resolve(process.env.HERALD_GATEWAY_BIN);
  const target = process.env.CARGO_TARGET_DIR ? resolve(REPO, process.env.CARGO_TARGET_DIR) : join(REPO, 'target');
  return join(target, 'debug', 'herald-gateway');
}

function freePort() {
  return new Promise((ok, fail) => {
    const s = createNetServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** Poll `check` (async, truthy = done) until it succeeds or `ms` pass. */
export async function until(check, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20)); // polling interval, bounded by the deadline
  }
}

const b64url = (data) => Buffer.from(data).toString('base64url');

/** An HS256 JWT for `sub`, signed with the test secret. */
export function token(sub, { expIn = 3600, client, site, secret = SECRET } = {}) {
  const claims = { sub, exp: Math.floor(Date.now() / 1000) + expIn };
  if (client) claims.client = client;
  if (site) claims.site = site;
  const unsigned = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' })) + '.' + b64url(JSON.stringify(claims));
  return unsigned + '.' + createHmac('sha256', secret).update(unsigned).digest('base64url');
}

/** One herald-gateway process on a free 127.0.0.1 port. */
export class Gateway {
  /**
   * @param {string} [configToml] a configuration file's text (--config)
   * @param {{dev?: boolean}} [options] dev: no JWT key and no API key given,
   *   so the gateway makes its own and serves the demo page (dev mode)
   */
  constructor(configToml, { dev = false } = {}) {
    this.dev = dev;
    this.dir = mkdtempSync(join(tmpdir(), 'herald-browser-'));
    this.logPath = join(this.dir, 'gateway.log');
    this.configToml = configToml;
    this.proc = null;
    this.port = 0;
  }

  get dataDir() {
    return join(this.dir, 'data');
  }

  get base() {
    return `http://127.0.0.1:${this.port}`;
  }

  /**
   * Start on a free port, or on `port` (a restart: the same address, so
   * clients reconnect to it by themselves).
   */
  async start({ port } = {}) {
    const bin = gatewayBin();
    if (!existsSync(bin)) {
      throw new Error(`${bin} does not exist: build it (cargo build -p herald-gateway) or set HERALD_GATEWAY_BIN`);
    }
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HERALD_')));
    env.RUST_LOG ??= 'info';
    const args = ['--data-dir', this.dataDir];
    if (!this.dev) args.push('--jwt-secret', SECRET, '--api-key', API_KEY);
    if (this.configToml !== undefined) {
      const path = join(this.dir, 'gateway.toml');
      writeFileSync(path, this.configToml);
      args.push('--config', path);
    }
    for (let attempt = 0; attempt < 5; attempt++) {
      this.port = port ?? await freePort();
      const log = openSync(this.logPath, 'a');
      const proc = spawn(bin, ['--listen', `127.0.0.1:${this.port}`, ...args], { stdio: ['ignore', log, log], env });
      this.proc = proc;
      closeSync(log);
      proc.once('error', () => {});
      const outcome = await until(async () => (proc.exitCode !== null ? 'exited' : (await this.healthy()) && 'healthy'),
        TIMEOUT, 'gateway /healthz').catch(() => 'timeout');
      if (outcome === 'healthy') return;
      const code = proc.exitCode;
      this.kill();
      if (code === EX_UNAVAILABLE) continue; // the port was taken (or not yet released): again
      throw new Error(`gateway ${bin} did not become healthy (${outcome}, exit ${code}); build it with ` +
        `cargo build -p herald-gateway or set HERALD_GATEWAY_BIN\n${this.log()}`);
    }
    throw new Error(`gateway could not bind a port\n${this.log()}`);
  }

  /** SIGTERM, then start again on the same port; returns the exit code of the first. */
  async restart() {
    const code = await this.stop();
    await this.start({ port: this.port });
    return code;
  }

  async healthy() {
    try {
      return (await fetch(`${this.base}/healthz`)).status === 200;
    } catch {
      return false;
    }
  }

  log() {
    try {
      return readFileSync(this.logPath, 'utf8').slice(-6000);
    } catch {
      return '';
    }
  }

  async publish(body) {
    const r = await fetch(`${this.base}/v1/notifications`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    if (r.status !== 202) throw new Error(`publish: ${r.status} ${text}`);
    return JSON.parse(text).ids;
  }

  /** Publish a raw payload: envelope fields in the query, the body as is. */
  async publishRaw(fields, contentType, body) {
    const r = await fetch(`${this.base}/v1/notifications?${new URLSearchParams(fields)}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': contentType },
      body,
    });
    const text = await r.text();
    if (r.status !== 202) throw new Error(`publish: ${r.status} ${text}`);
    return JSON.parse(text).ids;
  }

  /**
   * A metric's value from /metrics, summed over the label sets that have
   * every label in `labels` (e.g. {transport: 'xhr_streaming'}).
   */
  async metric(name, labels = {}) {
    const text = await (await fetch(`${this.base}/metrics`)).text();
    let sum = 0;
    for (const line of text.split('\n')) {
      const m = /^(\w+)(?:\{([^}]*)\})? (\S+)/.exec(line);
      if (!m || m[1] !== name) continue;
      const have = Object.fromEntries([...(m[2] || '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
      if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
    }
    return sum;
  }

  kill() {
    if (this.proc && this.proc.exitCode === null) this.proc.kill('SIGKILL');
  }

  /** SIGTERM and wait; returns the exit code. */
  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return this.proc?.exitCode;
    const exited = new Promise((r) => this.proc.once('exit', (code) => r(code)));
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.kill(), TIMEOUT);
    const code = await exited;
    clearTimeout(timer);
    return code;
  }
}

const STATIC = {
  // HERALD_CLIENT_JS: another build of the client module to test (default: the source).
  '/herald.js': [process.env.HERALD_CLIENT_JS || join(REPO, 'gateway/js/src/herald.js'), 'text/javascript'],
  '/sockjs.min.js': [join(BROWSER_DIR, 'node_modules/sockjs-client/dist/sockjs.min.js'), 'text/javascript'],
  '/stomp.umd.min.js': [join(BROWSER_DIR, 'node_modules/@stomp/stompjs/bundles/stomp.umd.min.js'), 'text/javascript'],
  '/herald.html': [join(BROWSER_DIR, 'pages/herald.html'), 'text/html'],
  '/stomp.html': [join(BROWSER_DIR, 'pages/stomp.html'), 'text/html'],
};

/** The test pages' origin: a static server on its own 127.0.0.1 port. */
export async function startPageServer() {
  const server = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const entry = STATIC[path];
    if (!entry || req.method !== 'GET') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    try {
      const body = readFileSync(entry[0]);
      res.writeHead(200, { 'content-type': entry[1] + '; charset=utf-8', 'cache-control': 'no-store' }).end(body);
    } catch (e) {
      res.writeHead(500, { 'content-type': 'text/plain' }).end(String(e));
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((ok) => {
      server.closeAllConnections();
      server.close(() => ok());
    }),
  };
}

/** Chromium; `args` are extra command-line switches. */
export async function launchBrowser(args = []) {
  return chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_ARGS, ...args], headless: true });
}

export { freePort };
