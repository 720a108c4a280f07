// The live page of a distributed run (issue 26): `dnnlab train --distributed
// --listen 127.0.0.1:0 --clients 2` on a small Fashion-MNIST CNN, joined by
// one headless-Chromium client tab and one native `dnnlab join`, watched in
// another tab at the printed /hybrid/run#token=<watch token>. The page must
// show both clients (browser and native) with their tickets, the time split,
// the curve drawn by the dashboard's charts, and no console error; without
// the token it says so and shows nothing of the run.
//   node tests/browser/hybrid_run.test.mjs --dist DIR --dnnlab BIN [--shots DIR]
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH, prerequisite, until } from './launch.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);
const SHOTS = arg('--shots', null);  // where to keep the page's screenshot
const FASHION = '/usr/share/datasets/fashion-mnist';
const DATASET = existsSync(FASHION) ? 'fashion-mnist' : 'synthetic';

// 768 images, batch 32: 24 batches an epoch, 12 rounds of two clients; four
// epochs, so that the page sees the curve grow while the run goes on.
const SPEC = `name: hybrid-watched
data: {dataset: ${DATASET}, validation: 300, limit_train: 768}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 6, kernel: 3, padding: 1, bias: false}
      - batchnorm
      - relu
      - max_pool2d: 2
    classifier:
      - dense: 10
train:
  epochs: 4
  batch_size: 32
  seed: 7
  optimizer: {type: adam, lr: 0.003}
`;

const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !existsSync(join(DIST, 'hybrid_run.html')) ? `no run page in ${DIST}`
  : !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no wasm core in ${DIST}/core (em++ missing?)`
  : !DNNLAB || !existsSync(DNNLAB) ? 'no --dnnlab binary given'
  : process.env.CI && !existsSync(FASHION) ? `${FASHION} is not installed`
  : false);

function start(args, env = {}) {
  const p = spawn(DNNLAB, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  p.log = '';
  p.stdout.on('data', (d) => { p.log += d; });
  p.stderr.on('data', (d) => { p.log += d; });
  p.exited = new Promise((ok) => p.on('exit', (code, signal) => ok(code ?? 128 + (signal ? 9 : 0))));
  return p;
}

test('the run page shows the clients, the time split and the curve of a live run', { skip, timeout: 180_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-hybrid-run-'));
  const procs = [];
  let browser = null;
  t.after(async () => {
    await browser?.close();
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  writeFileSync(join(dir, 'spec.yaml'), SPEC);
  const server = start(['train', join(dir, 'spec.yaml'), '--distributed', '--listen', '127.0.0.1:0',
    '--clients', '2', '--client-wait', '60', '--out', dir], { DNNLAB_WEB_DIR: DIST });
  procs.push(server);
  const urls = await until('the join and watch lines', () => {
    if (server.exitCode !== null) throw new Error(`dnnlab train exited ${server.exitCode}:\n${server.log}`);
    const native = server.log.match(/join with: dnnlab join (\S+) --token ([0-9a-f]+)/);
    const page = server.log.match(/browsers join at (\S+)/);
    const watch = server.log.match(/watch the run at (\S+)#token=([0-9a-f]{64})/);
    return native && page && watch ? { url: native[1], token: native[2], page: page[1], watch: watch[1], watchToken: watch[2] } : null;
  }, 30_000).catch((e) => { throw new Error(`${e.message}:\n${server.log}`); });
  assert.notEqual(urls.watchToken, urls.token, 'the watch token is not the join token');

  browser = await chromium.launch(LAUNCH);
  const errors = [];
  const open = async (name, url) => {
    const page = await (await browser.newContext()).newPage();
    // A poll that fails once the run is over (its endpoint closed) is the
    // page's expected end, not an error.
    page.on('console', (m) => {
      if (m.type() === 'error' && !(server.exitCode !== null && /Failed to load resource/.test(m.text()))) errors.push(`${name}: ${m.text()}`);
    });
    page.on('pageerror', (e) => errors.push(`${name}: ${e.message}`));
    await page.goto(url);
    return page;
  };
  // Without the token the page shows nothing of the run (and asks for none).
  const bare = await open('bare', urls.watch);
  await until('the no-token message', () => bare.evaluate(() => window.dnnlabHybridRun?.error), 10_000);
  assert.equal(await bare.evaluate(() => window.dnnlabHybridRun.polls), 0);
  await bare.close();

  const watch = await open('watch', `${urls.watch}#token=${urls.watchToken}`);
  const waiting = await until('the waiting status', () => watch.evaluate(() => window.dnnlabHybridRun.status), 10_000);
  assert.equal(waiting.state, 'waiting');
  await open('client', urls.page);
  const native = start(['join', urls.url, '--token', urls.token, '-q']);
  procs.push(native);

  // While the run goes on: two rows (a browser, a native client) with
  // tickets, and at least two epochs on the charts.
  const live = await until('two clients and two epochs on the page', async () => {
    if (server.exitCode !== null) throw new Error(`the run ended before the page saw it:\n${server.log}`);
    return watch.evaluate(() => {
      const rows = [...document.querySelectorAll('#clients tr[data-client]')];
      const s = window.dnnlabHybridRun.status;
      const drawn = document.querySelector('#loss')?.dataset.drawn === '1' && document.querySelector('#accuracy')?.dataset.drawn === '1';
      if (!s || rows.length !== 2 || s.curve.length < 2 || !drawn) return null;
      return {
        kinds: rows.map((r) => r.dataset.kind).sort(),
        tickets: rows.map((r) => Number(r.children[3].textContent)),
        split: document.querySelectorAll('#split tr').length,
        canvases: document.querySelectorAll('#loss canvas, #accuracy canvas').length,
        status: s,
        text: document.body.innerText,
      };
    });
  }, 120_000, 250);
  if (SHOTS) await watch.screenshot({ path: join(SHOTS, 'hybrid_run.png'), fullPage: true });
  // Closed while the run goes on: once its endpoint closes, the page's next
  // poll would fail in the network log (an expected end, but a console error).
  await watch.close();
  assert.deepEqual(live.kinds, ['browser', 'native']);
  for (const n of live.tickets) assert.ok(n > 0, `tickets: ${live.tickets}`);
  assert.equal(live.split, 4, 'a header, the server and one row per client in the time split');
  assert.ok(live.canvases >= 2, 'uPlot drew both charts');
  const s = live.status;
  assert.equal(s.state, 'training');
  assert.equal(s.clients.reduce((a, c) => a + c.tickets, 0), s.tickets);
  assert.ok(s.samples_per_second.features > 0 && s.samples_per_second.classifier > 0, JSON.stringify(s.samples_per_second));
  assert.ok(s.server.idle_seconds > 0 && s.server.classifier_seconds > 0, JSON.stringify(s.server));
  assert.match(live.text, /Where the time went/);

  assert.equal(await server.exited, 0, server.log);
  const metrics = JSON.parse(readFileSync(join(dir, 'hybrid-watched.metrics.json'), 'utf8'));
  // The page's curve is the run's.
  for (const e of s.curve) assert.equal(e.train_loss, metrics.epochs[e.epoch - 1].train_loss);
  // The watch token appears on its one line only; the join token on its two.
  assert.equal(server.log.split('\n').filter((l) => l.includes(urls.watchToken)).length, 1);
  assert.equal(server.log.split('\n').filter((l) => l.includes(urls.token)).length, 2);
  assert.deepEqual(errors, []);
  t.diagnostic(`${DATASET}: page saw ${s.curve.length} epochs, tickets ${s.clients.map((c) => c.tickets)}, ` +
    `features ${s.samples_per_second.features.toFixed(0)}/s, classifier ${s.samples_per_second.classifier.toFixed(0)}/s; ` +
    `took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
