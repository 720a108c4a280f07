// Browser workers train on WebGPU (issue 28) end to end against the real
// `dnnlab serve`, in Chromium with WebGPU on SwiftShader (launch.mjs's
// LAUNCH_WEBGPU): a join tab that asks for WebGPU (?backend=webgpu) trains a
// Fashion-MNIST MLP and a small CNN on a subset; the server stores the
// backend and adapter with each trial, /api/workers and the workers page show
// it, and every result is re-run natively (--verify-fraction 1) and agrees;
// the tab shows progress within a GPU epoch and is paused within one.
// Then the two fallbacks: a tab whose adapter request fails
// (?gpu_fault=adapter) trains on wasm, and a tab whose device is lost during
// its second epoch (?gpu_fault=lost) finishes the trial in the wasm core
// (backend webgpu→wasm), which also passes verification. The verifier's
// measured deviations (per epoch, per metric) are printed: bench/RESULTS.md
// records them.
//   node tests/browser/join_webgpu.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH_WEBGPU, prerequisite, until } from './launch.mjs';
import { realServerMissing, smallCnnSweep, startRealServer } from './real_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);
const FASHION = '/usr/share/datasets/fashion-mnist';
const FALLEN_BACK = 'webgpu\u2192wasm';

// Small on purpose: SwiftShader spends ~10 ms per workgroup (bench/RESULTS.md).
const mlpSweep = (name, epochs) => `name: ${name}
template:
  data: {dataset: fashion-mnist, validation: 200, limit_train: 512}
  model:
    layers:
      - {dense: 64, activation: relu}
      - dense: 10
  train:
    epochs: ${epochs}
    batch_size: 64
    optimizer: {type: sgd, lr: \${lr}, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    lr: [0.05]
scheduler:
  type: fifo
`;
const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !existsSync(join(DIST, 'join.html')) ? `no join page in ${DIST}`
  : !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no wasm core in ${DIST}/core (em++ missing?)`
  : !existsSync(FASHION) ? `${FASHION} is not installed (scripts/bootstrap.sh)`
  : realServerMissing(DNNLAB) || false);

test('join tabs on WebGPU finish Fashion-MNIST trials that pass native verification, and fall back to wasm', { skip, timeout: 420_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  const server = await startRealServer({ bin: DNNLAB, dist: DIST, args: ['--verify-fraction', '1'] });
  const browser = await chromium.launch(LAUNCH_WEBGPU);
  t.after(async () => { await browser.close(); await server.close(); });
  const joinUrl = await until('the join URL', () => server.log().match(/browsers join at (\S+)/)?.[1], 10_000);
  const errors = [];

  const openTab = async (query) => {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${joinUrl}&${query}`);
    return { context, page, state: () => page.evaluate(() => ({ ...window.dnnlabJoin })) };
  };
  // Each case's tab is closed when it ends, passed or not, so that the next
  // case's trials go to the next case's tab only.
  const withTab = (query, fn) => async () => {
    const tab = await openTab(query);
    try {
      await fn(tab);
    } finally {
      await tab.context.close();
    }
  };
  // The experiment's trials once all are finished (a failure fails the test).
  const finished = async (exp, n, tab, timeoutMs) => {
    let seen;
    return until(`experiment ${exp}'s trials`, async () => {
      const { trials } = await server.get(`/api/experiments/${exp}/trials?limit=100`);
      seen = { trials, tab: await tab.state() };
      if (trials.some((x) => x.status === 'failed')) throw new Error(`a trial failed: ${JSON.stringify(seen)}`);
      return trials.length === n && trials.every((x) => x.status === 'finished') ? trials : null;
    }, timeoutMs, 250).catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(seen)}\n${server.log()}`); });
  };
  const verified = (ids) => until(`the native re-runs of ${ids}`, async () => {
    const { events } = await server.get('/api/events?limit=10000');
    const v = events.filter((e) => e.type === 'trial.verified' && ids.includes(e.data.trial));
    return v.length >= ids.length ? v : null;
  }, 60_000, 250);
  const spread = [];  // [label, backend, deviations]

  await t.test('a tab asking for WebGPU trains an MLP and a CNN that pass native verification', withTab('backend=webgpu', async (tab) => {
    // Paused from inside the page as soon as a WebGPU epoch shows progress
    // within itself (its first chunks done): the pause lands between two
    // chunks of that epoch, and nothing advances until it is lifted.
    const firstProgress = tab.page.evaluate(() => new Promise((resolve, reject) => {
      setTimeout(() => reject(new Error(`no progress within an epoch: ${JSON.stringify(window.dnnlabJoin)}`)), 120_000);
      const iv = setInterval(() => {
        const j = window.dnnlabJoin, c = j.current;
        if (j.backend === 'webgpu' && c?.epochSamples > 0 && c.epochSamplesDone > 0) {
          clearInterval(iv);
          j.pause(true);
          resolve({ ...c });
        }
      }, 5);
    }));
    const mlp = await server.submit(mlpSweep('webgpu-mlp', 2), 'webgpu-mlp.yaml');
    const cnn = await server.submit(smallCnnSweep('webgpu-cnn'), 'webgpu-cnn.yaml');
    const seen = await firstProgress;
    const paused = await until('the tab to pause within a WebGPU epoch', async () => {
      const s = await tab.state();
      return s.activity === 'paused' ? s : null;
    }, 30_000, 20);
    const c = paused.current;
    assert.ok(c && c.epoch === seen.epoch && c.epochSamplesDone >= seen.epochSamplesDone && c.epochSamplesDone < c.epochSamples,
      `paused within the epoch: ${JSON.stringify({ seen, paused: c })}`);
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual((await tab.state()).current, c, 'no progress while paused');
    await tab.page.evaluate(() => window.dnnlabJoin.pause(false));
    t.diagnostic(`paused a WebGPU epoch at ${c.epochSamplesDone}/${c.epochSamples} samples (progress first seen at ${seen.epochSamplesDone})`);
    const trials = [...await finished(mlp, 1, tab, 150_000), ...await finished(cnn, 1, tab, 150_000)];
    const s = await tab.state();
    assert.equal(s.backend, 'webgpu', s.backendReason);
    assert.ok(s.adapter && typeof s.adapter.vendor === 'string', JSON.stringify(s.adapter));
    assert.match(await tab.page.textContent('#backend'), /^webgpu \(asked for webgpu\)/);
    for (const x of trials) {
      assert.ok(x.worker.startsWith('browser-'), `trial ${x.id} ran in a browser (${x.worker})`);
      assert.equal(x.epochs_done, 2);
      assert.ok(x.val_acc > 0.3, `trial ${x.id}: val_acc ${x.val_acc} (chance is 0.1)`);
      const { provenance } = await server.get(`/api/trials/${x.id}`);
      assert.equal(provenance.backend, 'webgpu');
      assert.deepEqual(provenance.adapter, s.adapter);
      assert.equal(provenance.worker_kind, 'browser');
    }
    // /api/workers and the dashboard's workers page show the backend.
    const { workers } = await server.get('/api/workers');
    const row = workers.find((w) => w.id === s.worker);
    assert.equal(row?.backend, 'webgpu', JSON.stringify(workers));
    const dash = await (await browser.newContext()).newPage();
    await dash.goto(`${server.url}/#/workers`);
    await dash.waitForSelector(`#workers tr[data-id="${s.worker}"] td.backend`);
    assert.equal(await dash.textContent(`#workers tr[data-id="${s.worker}"] td.backend`), 'webgpu');
    await dash.context().close();
    const v = await verified(trials.map((x) => x.id));
    for (const e of v) {
      assert.equal(e.data.agree, true, JSON.stringify(e.data));
      assert.equal(e.data.backend, 'webgpu');
      spread.push([e.data.trial === trials[0].id ? 'MLP' : 'CNN', e.data.backend, e.data.deviations]);
    }
  }));

  await t.test('a tab whose adapter request fails trains on wasm', withTab('backend=auto&gpu_fault=adapter', async (tab) => {
    const exp = await server.submit(mlpSweep('webgpu-no-adapter', 1), 'no-adapter.yaml');
    const [x] = await finished(exp, 1, tab, 60_000);
    const s = await tab.state();
    assert.equal(s.backend, 'wasm');
    assert.match(s.backendReason, /adapter request failed/);
    assert.equal(s.adapter, null);
    const { provenance } = await server.get(`/api/trials/${x.id}`);
    assert.equal(provenance.backend, 'wasm');
    assert.equal(provenance.adapter, undefined);
    const [e] = await verified([x.id]);
    assert.equal(e.data.agree, true, JSON.stringify(e.data));
  }));

  await t.test('a tab whose device is lost mid-epoch finishes the trial in the wasm core', withTab('backend=webgpu&gpu_fault=lost', async (tab) => {
    const exp = await server.submit(mlpSweep('webgpu-lost', 3), 'lost.yaml');
    const [x] = await finished(exp, 1, tab, 120_000);
    const s = await tab.state();
    assert.equal(s.backend, FALLEN_BACK, s.backendReason);
    assert.match(s.backendReason, /the GPU failed in epoch 2 \(lost/);
    assert.equal(x.epochs_done, 3);
    const { provenance } = await server.get(`/api/trials/${x.id}`);
    assert.equal(provenance.backend, FALLEN_BACK);
    const [e] = await verified([x.id]);
    assert.equal(e.data.agree, true, JSON.stringify(e.data));
    spread.push(['MLP, lost in epoch 2', e.data.backend, e.data.deviations]);
  }));

  await t.test('a tab on auto probes the trial\'s model and takes the faster backend', withTab('backend=auto', async (tab) => {
    const exp = await server.submit(mlpSweep('webgpu-auto', 1), 'auto.yaml');
    const [x] = await finished(exp, 1, tab, 60_000);
    const s = await tab.state();
    const m = s.backendReason.match(/^probe: WebGPU (\d+) samples\/s, wasm (\d+)$/);
    assert.ok(m, s.backendReason);
    const [gpu, wasm] = [Number(m[1]), Number(m[2])];
    assert.ok(gpu > 0 && wasm > 0, s.backendReason);
    assert.equal(s.backend, gpu > wasm ? 'webgpu' : 'wasm', s.backendReason);
    assert.ok(s.adapter, 'the adapter is named whichever won');
    const { provenance } = await server.get(`/api/trials/${x.id}`);
    assert.equal(provenance.backend, s.backend);
    t.diagnostic(`auto on SwiftShader: ${s.backendReason} -> ${s.backend}`);
  }));

  assert.deepEqual(errors, []);
  const fmt = (d) => Object.entries(d).filter(([k]) => k !== 'epoch' && k !== 'final')
    .map(([k, v]) => `${k} ${v.toExponential(1)}`).join(', ');
  for (const [label, backend, devs] of spread) {
    for (const d of devs) t.diagnostic(`spread ${label} (${backend}) ${d.final ? 'final' : `epoch ${d.epoch}`}: ${fmt(d)}`);
  }
  t.diagnostic(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
