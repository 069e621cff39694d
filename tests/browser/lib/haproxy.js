// HAProxy (Debian's) in front of one gateway, from haproxy/generate, with
// TLS: a self-signed certificate for 127.0.0.1 made here with openssl in a
// temporary directory (never kept), and the SPKI hash Chromium is told to
// accept for it (--ignore-certificate-errors-spki-list: only this key is
// accepted without a CA; every other certificate error still fails).

import { execFileSync, spawn } from 'node:child_process';
import { X509Certificate, createHash } from 'node:crypto';
import { accessSync, closeSync, constants, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:https';

import { REPO, TIMEOUT, freePort, until } from './harness.js';

function haproxyBin() {
  for (const p of [process.env.HAPROXY, '/usr/sbin/haproxy', '/usr/bin/haproxy']) {
    if (!p) continue;
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch { /* next */ }
  }
  throw new Error('haproxy not found: apt-get install haproxy (scripts/test.sh installs it)');
}

export class TlsProxy {
  /** @param {import('./harness.js').Gateway} gateway the edge and router behind it */
  constructor(gateway) {
    this.gateway = gateway;
    this.dir = mkdtempSync(join(tmpdir(), 'herald-haproxy-'));
    this.proc = null;
  }

  get origin() {
    return `https://127.0.0.1:${this.port}`;
  }

  async start() {
    const key = join(this.dir, 'tls.key');
    const cert = join(this.dir, 'tls.crt');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
      '-days', '1', '-subj', '/CN=herald-browser-test', '-addext', 'subjectAltName=IP:127.0.0.1'],
    { stdio: 'pipe' });
    this.certPem = readFileSync(cert, 'utf8');
    const pem = join(this.dir, 'herald.pem');
    writeFileSync(pem, this.certPem + readFileSync(key, 'utf8'));
    // What Chromium pins: base64 of the SHA-256 of the certificate's SubjectPublicKeyInfo.
    const spki = new X509Certificate(this.certPem).publicKey.export({ type: 'spki', format: 'der' });
    this.spki = createHash('sha256').update(spki).digest('base64');
    this.port = await freePort();
    const stats = await freePort();
    const cfg = join(this.dir, 'haproxy.cfg');
    const edge = `127.0.0.1:${this.gateway.port}`;
    execFileSync(join(REPO, 'haproxy/generate'), ['--edges', edge, '--routers', edge,
      '--bind', `127.0.0.1:${this.port}`, '--stats', `127.0.0.1:${stats}`, '--tls-cert', pem,
      '--src-conn-rate', '0', '--check-inter', '200ms', '--maxconn', '1000', '-o', cfg, '--check'],
    { stdio: 'pipe' });
    this.logPath = join(this.dir, 'haproxy.log');
    const log = openSync(this.logPath, 'a');
    this.proc = spawn(haproxyBin(), ['-db', '-f', cfg], { stdio: ['ignore', log, log] });
    closeSync(log);
    this.proc.once('error', () => {});
    // /healthz is 200 once HAProxy's health check found the gateway up.
    await until(async () => (await this.healthz()) === 200, TIMEOUT, 'haproxy /healthz over https');
  }

  /** GET /healthz over https, verified against the generated certificate. */
  healthz() {
    return new Promise((ok) => {
      const req = request(`${this.origin}/healthz`, { ca: this.certPem }, (res) => {
        res.resume();
        ok(res.statusCode);
      });
      req.on('error', () => ok(0));
      req.end();
    });
  }

  log() {
    try {
      return readFileSync(this.logPath, 'utf8').slice(-3000);
    } catch {
      return '';
    }
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGTERM');
    await exited;
  }
}
