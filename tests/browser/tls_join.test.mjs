// The join page over TLS in Debian's Chromium, off localhost: `dnnlab serve
// --tls-cert/--tls-key` with a certificate this test makes (`openssl req`)
// for the name dnnlab.test, Chromium told to trust exactly that key
// (--ignore-certificate-errors-spki-list) and to resolve dnnlab.test to
// 127.0.0.1. Over https the page is a secure context: crypto.subtle checks
// each shard's sha256, the Cache API keeps the core and shards, and a small
// sweep is trained over WSS. The same page from the same name over plain http
// is not a secure context (what a LAN volunteer gets without TLS), and a
// Chromium not told to trust the certificate refuses the page.
//   node tests/browser/tls_join.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH, prerequisite, until } from './launch.mjs';
import { hasOpenssl, makeCertificate } from './certificate.mjs';
import { realServerMissing, startRealServer } from './real_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);
const NAME = 'dnnlab.test'; // reserved (RFC 2606): never a real host

const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !hasOpenssl ? 'no openssl CLI to make the certificate'
  : !existsSync(join(DIST, 'join.html')) ? `no join page in ${DIST}`
  : !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no wasm core in ${DIST}/core (em++ missing?)`
  : realServerMissing(DNNLAB) || false);

const sweep = `name: tls-sweep
template:
  data: {dataset: synthetic, validation: 200, limit_train: 2000}
  model:
    layers:
      - dense: \${width}
        activation: relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    width: [16, 32, 48]
scheduler:
  type: fifo
`;


const secureContext = (page) => page.evaluate(() => ({
  secure: window.isSecureContext,
  subtle: typeof crypto.subtle === 'object' && crypto.subtle !== null,
  caches: typeof caches !== 'undefined',
}));

test('the join page over TLS is a secure context off localhost and trains over WSS', { skip, timeout: 300_000 }, async (t) => {
  const { chromium } = require('playwright-core');
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-tls-'));
  const tls = makeCertificate(dir, NAME);
  const server = await startRealServer({ bin: DNNLAB, dist: DIST, tls, args: ['--allow-host', NAME] });
  const plain = await startRealServer({ bin: DNNLAB, dist: DIST, args: ['--allow-host', NAME] });
  const resolveName = `--host-resolver-rules=MAP ${NAME} 127.0.0.1`;
  const browser = await chromium.launch({
    ...LAUNCH, args: [...LAUNCH.args, resolveName, `--ignore-certificate-errors-spki-list=${tls.spki}`],
  });
  const untrusting = await chromium.launch({ ...LAUNCH, args: [...LAUNCH.args, resolveName] });
  t.after(async () => {
    await browser.close(); await untrusting.close();
    await server.close(); await plain.close();
    rmSync(dir, { recursive: true, force: true });
  });
  // The printed join URL (it carries the join token), under the name.
  const printed = await until('the join URL', () => server.log().match(/browsers join at (\S+)/)?.[1], 10_000);
  assert.match(printed, /^https:\/\//, 'the server prints an https join URL');
  const joinUrl = new URL(printed);
  joinUrl.hostname = NAME;

  // Without being told to trust the certificate, Chromium refuses the page.
  const refused = await (await untrusting.newContext()).newPage();
  await assert.rejects(refused.goto(`https://${NAME}:${server.port}/join`), /ERR_CERT/);

  // Plain http from a name that is not localhost: no secure context, so no
  // crypto.subtle and no Cache API (the reason for TLS on a LAN).
  const http = await (await browser.newContext()).newPage();
  await http.goto(`http://${NAME}:${plain.port}/join`);
  assert.deepEqual(await secureContext(http), { secure: false, subtle: false, caches: false });

  // Over https with the trusted certificate: a secure context, and it trains.
  const exp = await server.submit(sweep, 'tls-sweep.yaml');
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(joinUrl.href);
  assert.equal(new URL(page.url()).protocol, 'https:');
  assert.deepEqual(await secureContext(page), { secure: true, subtle: true, caches: true });
  const done = await until('the sweep to finish over WSS', async () => {
    const { trials } = await server.get(`/api/experiments/${exp}/trials?limit=100`);
    return trials.length === 3 && trials.every((x) => x.status === 'finished') ? trials : null;
  }).catch(async (e) => {
    const s = await page.evaluate(() => ({ ...window.dnnlabJoin }));
    throw new Error(`${e.message}\npage: ${JSON.stringify(s)}\nerrors: ${errors}\nserver:\n${server.log()}`);
  });
  // The page counts a trial when the server's "accepted" reaches it, a
  // moment after the server has recorded the trial finished.
  const tab = () => page.evaluate(() => ({ ...window.dnnlabJoin }));
  const state = await until('the page to count three trials', async () => {
    const s = await tab();
    return s.trialsDone >= 3 ? s : null;
  }, 10_000).catch(tab);
  t.diagnostic(`over https: ${state.trialsDone} trials, ${state.shardsVerified} shard(s) sha256-checked, kernels ${state.kernels}`);
  assert.equal(state.trialsDone, 3, 'the page trained the three trials');
  assert.equal(state.state, 'connected');
  assert.ok(state.shardsVerified >= 1, 'the shard was checked with crypto.subtle');
  assert.equal(state.shardsUnverified, 0, 'no shard went unchecked');
  assert.ok(done.every((x) => x.worker && x.worker.startsWith('browser')), `browser results: ${done.map((x) => x.worker)}`);
  // The Cache API kept the core and the shard (content-hashed URLs).
  const cached = await page.evaluate(async () => {
    const c = await caches.open('dnnlab-v1');
    return (await c.keys()).map((r) => new URL(r.url).pathname);
  });
  assert.ok(cached.some((p) => p.startsWith('/core/')), `the core is cached: ${cached}`);
  assert.ok(cached.some((p) => p.startsWith('/shards/')), `the shard is cached: ${cached}`);
  assert.deepEqual(errors, []);
});
