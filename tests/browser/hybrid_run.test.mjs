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
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LAUNCH, until } from './launch.mjs';
import { DATASET, arg, hybridSkip, hybridSpec, require, slowLink, start, startRun } from './hybrid_common.mjs';

const SHOTS = arg('--shots', null);  // where to keep the page's screenshot
// Four epochs, so that the page sees the curve grow while the run goes on.
const SPEC = hybridSpec('hybrid-watched', 4);
const skip = hybridSkip(test, 'hybrid_run.html');

test('the run page shows the clients, the time split and the curve of a live run', { skip, timeout: 180_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  const run = await startRun(t, SPEC, 2);
  const { dir, server, procs, lines: urls } = run;
  assert.notEqual(urls.watchToken, urls.token, 'the watch token is not the join token');

  const browser = run.browser = await chromium.launch(LAUNCH);
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
  // The native client's link is slow (20 ms a chunk from the server, several
  // a ticket, every round synchronous): the run lasts seconds an epoch,
  // long enough for the page's polls (1 s) to see two epochs while it goes on.
  const native = start(['join', await slowLink(t, urls.url, 20), '--token', urls.token, '-q']);
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
  // Each client's turnarounds split into its reported compute (the wasm
  // core's and dnnlab join's own clocks) and the transfer; the native one
  // sits behind the slow link, so most of its turnaround is transfer.
  for (const c of s.clients) {
    const busy = c.forward_seconds + c.backward_seconds;
    assert.ok(c.compute_seconds > 0 && c.compute_seconds <= busy, JSON.stringify(c));
    assert.ok(Math.abs(c.compute_seconds + c.transfer_seconds - busy) < 1e-6, JSON.stringify(c));
  }
  const slow = s.clients.find((c) => c.kind === 'native');
  assert.ok(slow.transfer_seconds > slow.compute_seconds, `the slow link's client: ${JSON.stringify(slow)}`);

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
