// Browser clients of a distributed run (issue 26): `dnnlab train
// --distributed --listen 127.0.0.1:0 --clients 3` on a small Fashion-MNIST
// CNN, joined by two headless-Chromium tabs (the page the run serves at
// /hybrid/join#token=..., the wasm core's hybrid client) and one native
// `dnnlab join`. The run must finish, its loss fall, and its metrics count
// tickets for all three clients; the token must appear in no log line but
// the two that print it.
//   node tests/browser/hybrid_join.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LAUNCH, until } from './launch.mjs';
import { DATASET, hybridSkip, hybridSpec, require, start, startRun } from './hybrid_common.mjs';

// 24 batches an epoch, 8 rounds of three clients.
const SPEC = hybridSpec('hybrid-browser', 2);
const skip = hybridSkip(test, 'hybrid.html');

test('two Chromium tabs and a native client train one CNN with the server', { skip, timeout: 300_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  // The page and the wasm core come from the bundle the test was given.
  const run = await startRun(t, SPEC, 3);
  const { dir, server, procs, lines: joined } = run;
  assert.ok(joined.page.includes(`#token=${joined.token}`), `the page URL keeps the token in its fragment: ${joined.page}`);

  const browser = run.browser = await chromium.launch(LAUNCH);
  const pages = [];
  const errors = [];
  for (let i = 0; i < 2; i++) {
    const page = await (await browser.newContext()).newPage();
    page.on('console', (m) => { if (m.type() === 'error') errors.push(`tab ${i}: ${m.text()}`); });
    page.on('pageerror', (e) => errors.push(`tab ${i}: ${e.message}`));
    await page.goto(joined.page);
    pages.push(page);
  }
  const native = start(['join', joined.url, '--token', joined.token]);
  procs.push(native);

  const tabs = () => Promise.all(pages.map((p) => p.evaluate(() => ({ ...window.dnnlabHybrid }))));
  let timer;
  const code = await Promise.race([server.exited,
    new Promise((r) => { timer = setTimeout(() => r('timeout'), 240_000); })]);
  clearTimeout(timer);
  const states = await tabs();
  const why = `\nserver:\n${server.log}\nnative:\n${native.log}\ntabs: ${JSON.stringify(states)}`;
  assert.equal(code, 0, `dnnlab train exit${why}`);
  assert.equal(await native.exited, 0, `dnnlab join exit${why}`);

  const metrics = JSON.parse(readFileSync(join(dir, 'hybrid-browser.metrics.json'), 'utf8'));
  const d = metrics.distributed;
  t.diagnostic(`${DATASET}: ${JSON.stringify(d.tickets_by_client)} tickets by client, ` +
    `${d.versions} versions, ${d.reissued} reissued; train loss ` +
    metrics.epochs.map((e) => e.train_loss.toFixed(4)).join(' -> ') +
    `, val loss ${metrics.epochs.at(-1).val_loss.toFixed(4)}, val acc ${metrics.epochs.at(-1).val_acc.toFixed(3)}`);
  assert.equal(d.transport, 'websocket');
  assert.equal(d.tickets_by_client.length, 3, JSON.stringify(d));
  for (const [c, n] of d.tickets_by_client.entries()) assert.ok(n > 0, `client ${c} had no ticket: ${JSON.stringify(d)}`);
  assert.deepEqual(d.quarantined, []);
  assert.equal(d.reissued, 0, why);
  // The server re-ran each client's first tickets natively (the features
  // part has no dropout): the browsers' wasm results pass within tolerance.
  assert.ok(d.rechecks >= 3 * 3, `re-checks: ${JSON.stringify(d)}`);
  assert.equal(d.recheck_failures, 0, JSON.stringify(d));
  // The loss falls: epoch 2 below epoch 1, and validation well below chance
  // (ln 10 = 2.30 at the start).
  assert.equal(metrics.epochs.length, 2);
  assert.ok(metrics.epochs[1].train_loss < metrics.epochs[0].train_loss, JSON.stringify(metrics.epochs));
  assert.ok(metrics.epochs[1].val_loss < 1.5, JSON.stringify(metrics.epochs));

  // The two tabs: joined as browsers, took tickets, ended with the run.
  const agents = [...server.log.matchAll(/client (\d+) \([^)]*\) joined \((\w+)\)/g)].map((m) => m[2]);
  assert.deepEqual(agents.sort(), ['browser', 'browser', 'dnnlab'], server.log);
  const tickets = [];
  for (const [i, s] of states.entries()) {
    assert.equal(s.connection, 'finished', `tab ${i}: ${JSON.stringify(s)}`);
    assert.equal(s.error, '', `tab ${i}`);
    assert.ok(s.tickets > 0 && s.bytesIn > 0 && s.bytesOut > 0, `tab ${i}: ${JSON.stringify(s)}`);
    assert.ok(s.kernels.startsWith('wasm'), s.kernels);
    tickets[s.client] = s.tickets;
  }
  // Each tab answered the tickets the server counts for it.
  for (const [c, n] of tickets.entries()) if (n !== undefined) assert.equal(n, d.tickets_by_client[c]);
  // The token: printed on the two join lines, nowhere else in the server's log.
  const lines = server.log.split('\n').filter((l) => l.includes(joined.token));
  assert.equal(lines.length, 2, lines.join('\n'));
  assert.deepEqual(errors, []);
  t.diagnostic(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
