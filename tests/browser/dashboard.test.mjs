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
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
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
export async function openPage(browser, viewport = { width: 1400, height: 1000 }) {
  const page = await browser.newPage({ viewport });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  return { page, errors };
}

const series = async (page, sel) => JSON.parse(await page.getAttribute(sel, 'data-series'));
// Trials the plots hold: those with a metric (finished, pruned, running).
const plotted = (trials) => trials.filter((x) => typeof x.val_acc === 'number').length;

// Every trial with a metric is plotted: finished, pruned and running ones.
function expectedByActivation(trials) {
  const out = {};
  for (const t of trials) {
    if (typeof t.val_acc !== 'number') continue;
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
    const pruned = depth.trials.filter((x) => x.status === 'pruned').length;
    assert.ok(pruned > 0);
    // Every trial with a metric is plotted, pruned ones too (and counted as such).
    assert.equal(Number(await page.getAttribute('#plot-parcoords', 'data-lines')), finished + pruned);
    assert.equal(JSON.parse(await page.getAttribute('#plot-status', 'data-statuses')).pruned, pruned);
    assert.equal(Number(await page.getAttribute('#plot-metric-vs-x', 'data-pruned')), pruned);
    assert.equal(await page.locator('#plot-metric-vs-x .u-legend .u-series:has-text("pruned")').count(), 1);
    // Readable axes: accuracy 0..1, ticks at the depths the trials have, time per epoch.
    assert.equal(await page.getAttribute('#plot-metric-vs-x', 'data-yrange'), '0,1');
    assert.equal(await page.getAttribute('#plot-metric-vs-x', 'data-xticks'), '1,2,4,8,16,32,64,128,256,512,700');
    assert.equal(await page.getAttribute('#plot-metric-vs-x', 'data-xscale'), 'log2');
    assert.match(await page.textContent('#plot-time-vs-x h3'), /time per epoch/);
    assert.equal(await page.getAttribute('#plot-parcoords', 'data-axes'), 'depth,activation,width,lr,val_acc');
    assert.equal(Number(await page.getAttribute('#plot-best', 'data-points')), finished);
    assert.equal(await page.inputValue('#x-param'), 'depth');
    assert.equal(await page.locator('#plot-metric-vs-x .u-legend .u-series').count(), 1 + 3 + 1);
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
    await page.waitForFunction(() => document.querySelector('#trials tbody tr td:nth-child(4)')?.textContent === '700');
    // Sorted by the server: the first page is the deepest trials, in index order.
    const byDepth = depth.trials.slice().sort((a, b) => b.params.depth - a.params.depth || a.index - b.index).slice(0, 50).map((x) => String(x.id));
    assert.deepEqual(await page.$$eval('#trials tbody tr', (rows) => rows.map((r) => r.dataset.id)), byDepth);
    assert.ok(api.requests.some((r) => /sort=params.depth&order=desc/.test(r)));
    await page.click('#trials th[data-key="worker"]');
    await page.waitForSelector('#trials th.sorted[data-key="worker"]');
    await page.waitForSelector('#trials[data-sort="worker desc"]');
    assert.ok(api.requests.some((r) => /sort=worker/.test(r)), 'sorted by worker on the server');
    await page.selectOption('#status-filter', 'failed');
    await page.waitForSelector(`#trials[data-total="${depth.trials.filter((x) => x.status === 'failed').length}"]`);
    // The failure reason is in the row, not only in a tooltip.
    assert.match(await page.textContent('#trials tbody tr[data-status="failed"]'), /loss became NaN/);
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
    await page.waitForSelector(`#plot-parcoords[data-lines="${plotted(depth.trials)}"]`);
    assert.equal(await page.evaluate(() => window.__noReload), true, 'the page was not reloaded');
  });

  await t.test('brushing the parallel coordinates filters the table and plots', async () => {
    await page.goto(`${api.url}/#/`);
    await page.goto(`${api.url}/#/experiments/1`);
    const lines = plotted(depth.trials);
    await page.waitForSelector(`#plot-parcoords[data-lines="${lines}"]`);
    await page.waitForSelector('#trials[data-rows="50"]');
    // Drag down the depth axis (the first, 30 px in) over its top (the deepest trials).
    await page.locator('#plot-parcoords canvas').scrollIntoViewIfNeeded();
    const box = await page.locator('#plot-parcoords canvas').boundingBox();
    await page.mouse.move(box.x + 30, box.y + 24);
    await page.mouse.down();
    await page.mouse.move(box.x + 30, box.y + 60, { steps: 4 });
    await page.mouse.move(box.x + 30, box.y + 100, { steps: 4 });
    await page.mouse.up();
    await page.waitForSelector('#plot-parcoords[data-selected]:not([data-selected=""])');
    const selected = Number(await page.getAttribute('#plot-parcoords', 'data-selected'));
    assert.ok(selected > 0 && selected < lines, `brushed ${selected} of ${lines}`);
    assert.equal(await page.textContent('#brush-count'), `${selected} of ${lines} selected`);
    await page.waitForSelector(`#trials[data-total="${selected}"]`);
    const depths = await page.$$eval('#trials tbody tr td:nth-child(4)', (tds) => tds.map((td) => Number(td.textContent)));
    assert.ok(depths.every((d) => d >= 128), `only deep trials in the table: ${depths}`);
    const s = await series(page, '#plot-metric-vs-x');
    assert.equal(Object.values(s).reduce((n, x) => n + x.trials, 0), selected, 'the plots hold the brushed trials');
    assert.match(await page.textContent('#plot-status'), /brushed/);
    await page.screenshot({ path: join(SHOTS, 'brushed.png'), fullPage: true });

    // Downloads hold what the table shows: the brushed rows, then every row.
    const [csv] = await Promise.all([page.waitForEvent('download'), page.click('#download-csv')]);
    const text = readFileSync(await csv.path(), 'utf8').trim().split('\n');
    assert.equal(text.length, 1 + selected);
    assert.match(text[0], /^id,index,status,params\.depth,params\.activation,params\.width,params\.lr,seed/);
    await page.dblclick('#plot-parcoords canvas', { position: { x: 30, y: 150 } });
    await page.waitForSelector(`#trials[data-total="${depth.trials.length}"]`);
    assert.equal(await page.textContent('#brush-count'), '');
    const [json] = await Promise.all([page.waitForEvent('download'), page.click('#download-json')]);
    const rows = JSON.parse(readFileSync(await json.path(), 'utf8'));
    assert.deepEqual(rows.map((r) => r.id), depth.trials.map((x) => x.id), 'every trial, in the table\'s order');
  });

  await t.test('a categorical x replaces the chart', async () => {
    await page.selectOption('#x-param', 'activation');
    await page.waitForSelector('#plot-metric-vs-x[data-xticks="relu,sigmoid,tanh"]');
    await page.selectOption('#series-param', 'width');
    await page.waitForFunction(() => Object.keys(JSON.parse(document.querySelector('#plot-metric-vs-x').dataset.series)).join() === '32,64');
  });

  await t.test('compare selected trials, and a trial page', async () => {
    const ids = depth.trials.filter((x) => x.status === 'finished').slice(0, 3).map((x) => x.id);
    for (const id of ids) await page.click(`#trials tr[data-id="${id}"] td:nth-child(3)`);
    await page.click('#compare');
    await page.waitForSelector('#compare-val_acc[data-trials="3"]');
    assert.equal(await page.locator('#compare-diff thead th').count(), 1 + 3);
    assert.ok(await page.locator('#compare-diff tr[data-differs="1"]').count() > 0, 'differences marked');
    await page.screenshot({ path: join(SHOTS, 'compare.png'), fullPage: true });

    const failed = depth.trials.find((x) => x.status === 'failed');
    await page.click(`#compare-diff a[href="#/trials/${ids[0]}"]`);
    await page.waitForSelector('#trial-curve[data-trials="1"]');
    assert.match(await page.textContent('#trial-params'), /depth/);
    assert.equal(await page.getAttribute('#trial-weights', 'href'), `/api/trials/${ids[0]}/weights`);
    await page.screenshot({ path: join(SHOTS, 'trial-finished.png'), fullPage: true });
    await page.goto(`${api.url}/#/trials/${failed.id}`);
    await page.waitForSelector('#trial-params');
    const params = await page.textContent('#trial-params');
    for (const [k, v] of Object.entries(failed.params)) assert.ok(params.includes(k) && params.includes(String(v)), `${k}=${v} in ${params}`);
    assert.match(await page.textContent('#trial-error'), /loss became NaN/);
    assert.match(await page.textContent('#trial-facts'), new RegExp(failed.seed));
    assert.match(await page.textContent('#trial-facts'), /weights\s*not kept/);
    await page.screenshot({ path: join(SHOTS, 'trial.png'), fullPage: true });
  });

  await t.test('on a phone nothing overflows', async () => {
    const { page: phone, errors: phoneErrors } = await openPage(browser, { width: 390, height: 844 });
    for (const route of ['#/experiments/1', '#/workers']) {
      await phone.goto(`${api.url}/${route}`);
      await phone.waitForSelector(route === '#/workers' ? '#workers tbody tr' : '#trials[data-rows="50"]');
      // Wide tables scroll inside their card; no card or chart is wider than the screen.
      const wide = await phone.$$eval('.card, canvas', (els) => els.filter((e) => e.getBoundingClientRect().right > 391).map((e) => e.id || e.className));
      assert.deepEqual(wide, [], `${route}: nothing wider than the phone`);
      await phone.screenshot({ path: join(SHOTS, `phone-${route.split('/')[1]}.png`), fullPage: true });
    }
    await phone.close();
    assert.deepEqual(phoneErrors, []);
  });

  await t.test('workers page', async () => {
    await page.click('a[data-nav="workers"]');
    await page.waitForSelector('#workers tbody tr >> nth=3');
    assert.match(await page.textContent('#workers'), /browser/);
    // A worker that left 20 minutes ago is hidden until asked for.
    assert.equal(await page.locator('#workers tr[data-id="b0"]').count(), 0);
    await page.check('#show-departed');
    await page.waitForSelector('#workers tr[data-id="b0"]');
    await page.uncheck('#show-departed');
    // Its current trial links to the trial page by the store-wide id the table shows.
    const busy = api.exps[0].trials.find((x) => x.status === 'running');
    assert.equal(await page.locator(`#workers a[href="#/trials/${busy.id}"]`).count(), 1);
    await page.waitForSelector('#queue-depth[data-drawn]', { timeout: 10_000 });
    await page.waitForTimeout(2500); // a third sample
    await page.screenshot({ path: join(SHOTS, 'workers.png') });
  });

  await t.test('an experiment without depth lets the user pick x', async () => {
    await page.goto(`${api.url}/#/experiments/2`);
    await page.waitForSelector('#plot-metric-vs-x[data-series]');
    assert.equal(await page.inputValue('#x-param'), 'lr');
    // Random learning rates over three decades: a log10 axis (ticks read 1e-3).
    await page.waitForSelector('#plot-metric-vs-x[data-xscale="log10"]');
    assert.deepEqual(Object.keys(await series(page, '#plot-metric-vs-x')).sort(), ['128', '32', '64']);
    await page.selectOption('#x-param', 'width');
    await page.waitForFunction(() => Object.keys(JSON.parse(document.querySelector('#plot-metric-vs-x').dataset.series)).length > 0);
    await page.waitForSelector('#plot-metric-vs-x[data-xticks="32,64,128"]');
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
  // ... and says why, in the header's title.
  assert.match(await page.getAttribute('#trials th[data-key="params.depth"]', 'title'), /400.*unknown sort column 'params.depth'/);
  await page.waitForSelector('#trials th.sorted[data-key="index"]');
  await page.click('.pager button:has-text("»")');
  const run = api.exps[0].trials.find((x) => x.status === 'running');
  await page.waitForSelector(`#trials tr[data-id="${run.id}"][data-status="running"]`);
  api.finishTrial(run.id);
  await page.waitForSelector(`#trials tr[data-id="${run.id}"][data-status="finished"]`, { timeout: 10_000 });
  await page.waitForSelector(`#plot-parcoords[data-lines="${plotted(api.exps[0].trials)}"]`, { timeout: 10_000 });
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
  await page.waitForSelector(`#plot-parcoords[data-lines="${plotted(trials)}"]`);
  await page.waitForSelector(`#plot-best[data-points="${finished.length}"]`);
  // The real server sorts by a parameter (sort=params.NAME) and says which name it does not know.
  await page.click('#trials th[data-key="params.depth"]');
  await page.waitForSelector('#trials th.sorted.desc[data-key="params.depth"]');
  // The header changes at the click, the rows when the server answers.
  await page.waitForSelector('#trials[data-sort="params.depth desc"]');
  const shown = await page.$$eval('#trials tbody tr td:nth-child(4)', (tds) => tds.map((td) => Number(td.textContent)));
  assert.deepEqual(shown, [...shown].sort((a, b) => b - a), `rows by depth, deepest first: ${shown}`);
  const bad = await fetch(`${srv.url}/api/experiments/${id}/trials?sort=params.nosuch`);
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error, /unknown parameter 'nosuch'/);
  await page.click('#trials th[data-key="index"]');
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
