// A browser client of a distributed run over TLS (issue 26): `dnnlab train
// --distributed --listen 127.0.0.1:0 --tls-cert --tls-key` with a certificate
// this test makes (`openssl req`), one headless-Chromium tab told to trust
// exactly that key (--ignore-certificate-errors-spki-list) on the https://
// join page, whose WebSocket is then wss://, and one native `dnnlab join
// wss://… --tls-ca`. The run must finish with tickets for both; a Chromium
// not told to trust the certificate is refused the page.
//   node tests/browser/hybrid_tls_join.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LAUNCH, prerequisite } from './launch.mjs';
import { hasOpenssl, makeCertificate } from './certificate.mjs';
import { DATASET, hybridSkip, hybridSpec, require, start, startRun } from './hybrid_common.mjs';

const SPEC = hybridSpec('hybrid-tls', 1); // 24 batches, 12 rounds of two clients
const skip = hybridSkip(test, 'hybrid.html') || prerequisite(test, hasOpenssl ? false : 'no openssl CLI');

function sh(cmd) {
  const r = spawnSync('sh', ['-c', cmd], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd}: ${r.stderr}`);
  return r.stdout.trim();
}

test('a Chromium tab joins a distributed run over https and wss', { skip, timeout: 240_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  // The certificate goes in a directory of its own, made before the run.
  const certDir = sh('mktemp -d');
  t.after(() => sh(`rm -rf '${certDir}'`));
  const { cert, key, spki } = makeCertificate(certDir);
  const run = await startRun(t, SPEC, 2, ['--tls-cert', cert, '--tls-key', key]);
  const { dir, server, procs, lines: joined } = run;
  assert.ok(joined.url.startsWith('wss://127.0.0.1:'), joined.url);
  assert.ok(joined.page.startsWith('https://127.0.0.1:'), joined.page);
  assert.ok(joined.watch.startsWith('https://127.0.0.1:'), joined.watch);

  // Not told to trust the certificate: Chromium refuses the page.
  const wary = await chromium.launch(LAUNCH);
  try {
    await assert.rejects((await wary.newPage()).goto(joined.page), /ERR_CERT/);
  } finally {
    await wary.close();
  }

  const browser = run.browser = await chromium.launch({
    ...LAUNCH, args: [...LAUNCH.args, `--ignore-certificate-errors-spki-list=${spki}`] });
  const errors = [];
  const page = await (await browser.newContext()).newPage();
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  const sockets = [];
  page.on('websocket', (ws) => sockets.push(ws.url()));
  await page.goto(joined.page);
  const native = start(['join', joined.url, '--token', joined.token, '--tls-ca', cert]);
  procs.push(native);

  let timer;
  const code = await Promise.race([server.exited,
    new Promise((r) => { timer = setTimeout(() => r('timeout'), 180_000); })]);
  clearTimeout(timer);
  const state = await page.evaluate(() => ({ ...window.dnnlabHybrid, protocol: location.protocol }));
  const why = `\nserver:\n${server.log}\nnative:\n${native.log}\ntab: ${JSON.stringify(state)}`;
  assert.equal(code, 0, `dnnlab train exit${why}`);
  assert.equal(await native.exited, 0, `dnnlab join exit${why}`);

  const metrics = JSON.parse(readFileSync(join(dir, 'hybrid-tls.metrics.json'), 'utf8'));
  const d = metrics.distributed;
  t.diagnostic(`${DATASET}: ${JSON.stringify(d.tickets_by_client)} tickets by client; ` +
    `train loss ${metrics.epochs[0].train_loss.toFixed(4)}, val loss ${metrics.epochs[0].val_loss.toFixed(4)}`);
  assert.equal(d.tickets_by_client.length, 2, JSON.stringify(d));
  for (const [c, n] of d.tickets_by_client.entries()) assert.ok(n > 0, `client ${c} had no ticket: ${JSON.stringify(d)}`);
  assert.deepEqual(d.quarantined, []);
  assert.equal(d.reissued, 0, why);
  // The tab: on the https page, it joined as a browser, took tickets and
  // ended with the run.
  assert.equal(state.protocol, 'https:');
  assert.equal(state.connection, 'finished', JSON.stringify(state));
  assert.equal(state.error, '');
  assert.ok(state.tickets > 0 && state.tickets === d.tickets_by_client[state.client], JSON.stringify(state));
  const agents = [...server.log.matchAll(/client (\d+) \([^)]*\) joined \((\w+)\)/g)].map((m) => m[2]);
  assert.deepEqual(agents.sort(), ['browser', 'dnnlab'], server.log);
  // The worker's one WebSocket, derived from the page's https:// origin.
  assert.deepEqual(sockets, [joined.url]);
  assert.ok(!server.log.includes('refused: plain HTTP'), server.log);
  assert.deepEqual(errors, []);
  t.diagnostic(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
