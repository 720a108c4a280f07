// Browser tests of the dashboard in Debian's Chromium (playwright-core):
// it loads without console errors, the plots hold the sweep's data, the table
// sorts and pages server-side, and a trial finishing shows up without a reload.
// Against the fake API (tests/browser/fake_api.mjs: many shapes, fast) and,
// when given a dnnlab binary with `serve`, the real server running a small sweep.
// With --store postgres only the real server's test runs, in the cluster's
// shape: a private RabbitMQ carries the trials and PostgreSQL keeps the
// results (ctest browser_dashboard_postgres; the "postgres" fixture's server
// when DNNLAB_TEST_POSTGRES_DIR names one). Under CI a missing server fails.
//   node tests/browser/dashboard.test.mjs [--dist DIR] [--dnnlab BIN] [--shots DIR] [--save-screenshot FILE]
//                                         [--store sqlite|postgres]
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startFakeApi } from './fake_api.mjs';
import { CHROMIUM, LAUNCH, prerequisite } from './launch.mjs';
import { clusterServersMissing, realServerMissing, SMALL_SWEEP, startRealServer } from './real_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const SHOTS = arg('--shots', null) || mkdtempSync(join(tmpdir(), 'dnnlab-browser-'));
const SAVE = arg('--save-screenshot', null);
const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);
const STORE = arg('--store', 'sqlite');
if (!['sqlite', 'postgres'].includes(STORE)) throw new Error(`--store: '${STORE}' is neither sqlite nor postgres`);


// Opens a page that records console errors and uncaught exceptions.
export async function openPage(browser) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  return { page, errors };
}

const series = async (page, sel) => JSON.parse(await page.getAttribute(sel, 'data-series'));

function expectedByActivation(trials) {
  const out = {};
  for (const t of trials) {
    if (t.status !== 'finished') continue;
    const s = (out[t.params.activation] ??= { trials: 0, depths: new Set() });
    s.trials++;
    s.depths.add(t.params.depth);
  }
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, { trials: v.trials, points: v.depths.size }]));
}

const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}` : !existsSync(join(DIST, 'app.js')) ? `no built dashboard in ${DIST}` : false);
const realSkip = skip || prerequisite(test, realServerMissing(DNNLAB) ||
  (STORE === 'postgres' ? clusterServersMissing() : null));

// The fake API has no store: its tests run in the sqlite entry only.
if (STORE === 'sqlite') {
test('dashboard against the fake API', { skip, timeout: 120_000 }, async (t) => {
  const { chromium } = require('playwright-core');
  const api = await startFakeApi({ dist: DIST });
  const browser = await chromium.launch(LAUNCH);
  t.after(async () => { await browser.close(); await api.close(); });
  const { page, errors } = await openPage(browser);
  const depth = api.exps[0];
  console.log(`# screenshots in ${SHOTS}`);

  await t.test('experiments list', async () => {
    await page.goto(`${api.url}/`);
    await page.waitForSelector('#experiments tbody tr >> nth=1');
    assert.equal(await page.locator('#experiments tbody tr').count(), api.exps.length);
    assert.match(await page.textContent('#experiments'), /depth-sweep/);
    await page.waitForSelector('#live.live');
    await page.screenshot({ path: join(SHOTS, 'experiments.png') });
  });

  await t.test('experiment page: plots hold the sweep', async () => {
    await page.click('text=depth-sweep');
    await page.waitForSelector('#trials[data-rows="50"]');
    await page.waitForSelector('#plot-metric-vs-x[data-series]');
    await page.waitForFunction(() => !/loading/.test(document.querySelector('#plot-status').textContent));
    const want = expectedByActivation(depth.trials);
    assert.deepEqual(await series(page, '#plot-metric-vs-x'), want);
    assert.deepEqual(await series(page, '#plot-time-vs-x'), want);
    const finished = depth.trials.filter((x) => x.status === 'finished').length;
    assert.equal(Number(await page.getAttribute('#plot-parcoords', 'data-lines')), finished);
    assert.equal(await page.getAttribute('#plot-parcoords', 'data-axes'), 'depth,activation,width,lr,val_acc');
    assert.equal(Number(await page.getAttribute('#plot-best', 'data-points')), finished);
    assert.equal(await page.inputValue('#x-param'), 'depth');
    assert.equal(await page.locator('#plot-metric-vs-x .u-legend .u-series').count(), 1 + 3);
  });

  await t.test('table sorts server-side and selects curves', async () => {
    await page.click('#trials th[data-key="val_acc"]');
    await page.waitForSelector('#trials th.sorted[data-key="val_acc"]');
    await page.waitForFunction(() => document.querySelector('#table-info').textContent.startsWith('1–50'));
    assert.ok(api.requests.some((r) => /sort=val_acc&order=desc/.test(r)), 'sorted by the server');
    const best = Math.max(...depth.trials.filter((x) => x.val_acc !== null).map((x) => x.val_acc));
    await page.waitForFunction((b) => document.querySelector('#trials tbody tr')?.textContent.includes(b.toFixed(4)), best);
    await page.click('#trials tbody tr >> nth=0');
    await page.click('#trials tbody tr >> nth=3');
    await page.waitForSelector('#plot-curves[data-trials="2"]');
    assert.equal(await page.locator('#trials tbody tr.selected').count(), 2);
    await page.click('#trials th[data-key="params.depth"]');
    await page.waitForSelector('#trials th.sorted.desc[data-key="params.depth"]');
    await page.waitForFunction(() => document.querySelector('#trials tbody tr td:nth-child(3)')?.textContent === '700');
    await page.selectOption('#status-filter', 'failed');
    await page.waitForSelector(`#trials[data-total="${depth.trials.filter((x) => x.status === 'failed').length}"]`);
    await page.selectOption('#status-filter', '');
    await page.click('#trials th[data-key="index"]');
    await page.waitForSelector('#trials th.sorted.asc[data-key="index"]');
    await page.screenshot({ path: join(SHOTS, 'experiment.png'), fullPage: true });
    if (SAVE && realSkip) await page.screenshot({ path: SAVE, fullPage: true });
  });

  await t.test('a trial finishing appears without a reload', async () => {
    await page.evaluate(() => { window.__noReload = true; });
    await page.click('.pager button:has-text("»")');
    const run = depth.trials.find((x) => x.status === 'running');
    await page.waitForSelector(`#trials tr[data-id="${run.id}"][data-status="running"]`);
    const before = await series(page, '#plot-metric-vs-x');
    api.finishTrial(run.id);
    await page.waitForSelector(`#trials tr[data-id="${run.id}"][data-status="finished"]`, { timeout: 10_000 });
    const act = run.params.activation;
    await page.waitForFunction(([a, n]) => JSON.parse(document.querySelector('#plot-metric-vs-x').dataset.series)[a].trials === n,
      [act, before[act].trials + 1], { timeout: 10_000 });
    const finished = depth.trials.filter((x) => x.status === 'finished').length;
    await page.waitForSelector(`#plot-parcoords[data-lines="${finished}"]`);
    assert.equal(await page.evaluate(() => window.__noReload), true, 'the page was not reloaded');
  });

  await t.test('workers page', async () => {
    await page.click('a[data-nav="workers"]');
    await page.waitForSelector('#workers tbody tr >> nth=3');
    assert.match(await page.textContent('#workers'), /browser/);
    await page.waitForSelector('#queue-depth[data-drawn]', { timeout: 10_000 });
    await page.waitForTimeout(2500); // a third sample
    await page.screenshot({ path: join(SHOTS, 'workers.png') });
  });

  await t.test('an experiment without depth lets the user pick x', async () => {
    await page.goto(`${api.url}/#/experiments/2`);
    await page.waitForSelector('#plot-metric-vs-x[data-series]');
    assert.equal(await page.inputValue('#x-param'), 'lr');
    assert.deepEqual(Object.keys(await series(page, '#plot-metric-vs-x')).sort(), ['128', '32', '64']);
    await page.selectOption('#x-param', 'width');
    await page.waitForFunction(() => Object.keys(JSON.parse(document.querySelector('#plot-metric-vs-x').dataset.series)).length > 0);
    await page.screenshot({ path: join(SHOTS, 'lr-sweep.png'), fullPage: true });
  });

  assert.deepEqual(errors, [], 'no console errors');
});

test('without the event stream the dashboard polls', { skip, timeout: 60_000 }, async (t) => {
  const { chromium } = require('playwright-core');
  const api = await startFakeApi({ dist: DIST, ws: false, paramSort: false });
  const browser = await chromium.launch(LAUNCH);
  t.after(async () => { await browser.close(); await api.close(); });
  const { page, errors } = await openPage(browser);
  await page.goto(`${api.url}/#/experiments/1`);
  await page.waitForSelector('#live.polling');
  // This server cannot sort by parameters: the header stops offering it.
  await page.click('#trials th[data-key="params.depth"]');
  await page.waitForSelector('#trials th[data-key="params.depth"]:not(.sortable)');
  await page.waitForSelector('#trials th.sorted[data-key="index"]');
  await page.click('.pager button:has-text("»")');
  const run = api.exps[0].trials.find((x) => x.status === 'running');
  await page.waitForSelector(`#trials tr[data-id="${run.id}"][data-status="running"]`);
  api.finishTrial(run.id);
  await page.waitForSelector(`#trials tr[data-id="${run.id}"][data-status="finished"]`, { timeout: 10_000 });
  const finished = api.exps[0].trials.filter((x) => x.status === 'finished').length;
  await page.waitForSelector(`#plot-parcoords[data-lines="${finished}"]`, { timeout: 10_000 });
  // The refused WebSocket and the refused sort log network errors; nothing else may.
  assert.deepEqual(errors.filter((e) => !/WebSocket connection|status of 400/.test(e)), []);
});
}

test(`dashboard against the real server running a small sweep (${STORE} store)`, { skip: realSkip, timeout: 400_000 }, async (t) => {
  const { chromium } = require('playwright-core');
  const srv = await startRealServer({ bin: DNNLAB, dist: DIST, store: STORE });
  if (STORE === 'postgres') assert.match(srv.store, /^postgres:\/\//);
  const browser = await chromium.launch(LAUNCH);
  t.after(async () => { await browser.close(); await srv.close(); });
  const { page, errors } = await openPage(browser);
  const id = await srv.submit(SMALL_SWEEP);
  const planned = 6;

  await page.goto(`${srv.url}/#/experiments/${id}`);
  await page.waitForSelector('#live.live');
  await page.waitForSelector('#trials[data-rows]');
  await page.evaluate(() => { window.__noReload = true; });

  // Workers start only now: every trial finishes while the page watches.
  srv.startWorker(id);
  const ended = (c) => (c.finished || 0) + (c.pruned || 0) + (c.failed || 0);
  for (let i = 0; ; i++) {
    const x = await srv.get(`/api/experiments/${id}`);
    if (ended(x.counts) >= planned) break;
    assert.ok(i < 600, `the sweep did not finish: ${JSON.stringify(x.counts)}\n${srv.log()}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  const { trials } = await srv.get(`/api/experiments/${id}/trials?limit=1000`);
  assert.equal(trials.length, planned, 'each trial once');
  const finished = trials.filter((x) => x.status === 'finished');
  assert.ok(finished.length > 0, 'some trials finished');
  await page.waitForFunction((n) => document.querySelectorAll('#trials tbody tr[data-status="finished"]').length === n,
    finished.length, { timeout: 15_000 });
  assert.equal(await page.evaluate(() => window.__noReload), true, 'the page was not reloaded');

  const want = expectedByActivation(trials);
  await page.waitForFunction((w) => document.querySelector('#plot-metric-vs-x')?.dataset.series === w,
    JSON.stringify(Object.fromEntries(Object.keys(want).sort().map((k) => [k, want[k]]))), { timeout: 15_000 });
  await page.waitForSelector(`#plot-parcoords[data-lines="${finished.length}"]`);
  await page.waitForSelector(`#plot-best[data-points="${finished.length}"]`);
  await page.click(`#trials tr[data-id="${finished[0].id}"]`);
  await page.click(`#trials tr[data-id="${finished[finished.length - 1].id}"]`);
  await page.waitForSelector('#plot-curves[data-trials="2"]');
  await page.screenshot({ path: join(SHOTS, 'real-experiment.png'), fullPage: true });
  if (SAVE) await page.screenshot({ path: SAVE, fullPage: true });

  await page.click('a[data-nav="workers"]');
  await page.waitForSelector('#workers tbody tr');
  assert.match(await page.textContent('#workers'), /native/);
  await page.screenshot({ path: join(SHOTS, 'real-workers.png') });
  assert.deepEqual(errors, [], 'no console errors');
});
