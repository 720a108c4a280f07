// Browser workers end to end in Debian's Chromium (playwright-core) against
// the real `dnnlab serve`: join tabs take trials over /join (protocol v1),
// train them in the wasm core and report them; a tab closed mid-trial gives
// its trial to another tab, recorded exactly once; a reload takes the core
// and the data shard from the Cache API (no request for /core/* or /shards/*).
//   node tests/browser/join.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH, prerequisite, until } from './launch.mjs';
import { realServerMissing, startRealServer } from './real_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);

// Six small trials on generated data; 8 epochs each so a tab can be caught
// mid-trial (it is paused, then closed).
const sweep = (name, epochs, limitTrain) => `name: ${name}
template:
  data: {dataset: synthetic, validation: 200, limit_train: ${limitTrain}}
  model:
    layers:
      - dense: \${width}
        activation: \${activation}
      - dense: 10
  train:
    epochs: ${epochs}
    batch_size: 32
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    width: [32, 48, 64]
    activation: [relu, tanh]
scheduler:
  type: fifo
`;

const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !existsSync(join(DIST, 'join.html')) ? `no join page in ${DIST}`
  : !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no wasm core in ${DIST}/core (em++ missing?)`
  : realServerMissing(DNNLAB) || false);


// A join tab that records its errors and the URLs it (and its worker) requests.
async function openJoin(context, url) {
  const page = await context.newPage();
  const errors = [], requests = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('request', (r) => requests.push(r.url()));
  await page.goto(url);
  return { page, errors, requests, state: () => page.evaluate(() => ({ ...window.dnnlabJoin })) };
}

async function trials(server, exp) {
  const r = await server.get(`/api/experiments/${exp}/trials?limit=1000`);
  return r.trials;
}

test('browsers join, train a sweep, survive a closed tab, and reload from cache', { skip, timeout: 600_000 }, async (t) => {
  const { chromium } = require('playwright-core');
  // Every browser result is re-run natively and compared (relaxed-SIMD wasm vs native).
  const server = await startRealServer({ bin: DNNLAB, dist: DIST, args: ['--verify-fraction', '1'] });
  const browser = await chromium.launch(LAUNCH);
  t.after(async () => { await browser.close(); await server.close(); });
  const joinUrl = await until('the join URL', () => server.log().match(/browsers join at (\S+)/)?.[1], 10_000)
    .catch(() => null);
  assert.ok(joinUrl, `dnnlab serve printed no join URL (no /join gateway):\n${server.log()}`);
  // The page asks the gateway at the page's own host.
  const context = await browser.newContext();
  context.on('weberror', (e) => console.log(`# weberror ${e.error().message}`));

  const exp = await server.submit(sweep('join-sweep', 8, 12000));

  // Tab A takes a trial and is paused during it (within an epoch slice), then closed.
  const a = await openJoin(context, joinUrl);
  // Paused from inside the page as soon as its first epoch is reported; an
  // epoch here takes a few hundred ms, so the pause lands mid-trial.
  const held = await a.page.evaluate(() => new Promise((resolve, reject) => {
    setTimeout(() => reject(new Error(`no epoch within 120 s: ${JSON.stringify(window.dnnlabJoin)}`)), 120_000);
    const iv = setInterval(() => {
      const j = window.dnnlabJoin;
      if (j.current && j.current.epoch >= 1) {
        clearInterval(iv);
        j.pause(true);
        resolve({ ...j.current });
      }
    }, 5);
  }));
  const paused = await until('tab A to pause mid-trial', async () => {
    const s = await a.state();
    return s.activity === 'paused' ? s : null;
  });
  assert.ok(paused.current, 'paused while holding its ticket');
  assert.equal(paused.current.trial, held.trial);
  t.diagnostic(`tab A holds trial ${held.trial} (experiment ${held.experiment} #${held.index}) at epoch ${paused.current.epoch}; closing it`);
  assert.ok(a.requests.some((u) => new URL(u).pathname.startsWith('/core/')), 'tab A fetched the core');
  assert.ok(a.requests.some((u) => new URL(u).pathname.startsWith('/shards/')), 'tab A fetched the shard');
  assert.deepEqual(a.errors, []);
  await a.page.close();

  // Two tabs finish the sweep, the abandoned trial included.
  const b = await openJoin(context, joinUrl);
  const c = await openJoin(context, joinUrl);
  const done = await until('the sweep to finish', async () => {
    const ts = await trials(server, exp);
    return ts.length === 6 && ts.every((x) => x.status === 'finished') ? ts : null;
  }, 300_000);
  // A tab counts a trial when the server's "accepted" reaches it, a moment
  // after the server has recorded the trial finished.
  const both = async () => [await b.state(), await c.state()];
  const [sb, sc] = await until('the tabs to count six trials', async () => {
    const s = await both();
    return s[0].trialsDone + s[1].trialsDone >= 6 ? s : null;
  }, 10_000).catch(both);
  t.diagnostic(`tab B: ${sb.trialsDone} trials (${Math.round(sb.samplesPerSecond)} samples/s, ${sb.kernels}); tab C: ${sc.trialsDone} trials`);
  // Chromium has had relaxed SIMD since 114: the page picks that build.
  assert.equal(sb.kernels, 'wasm-relaxed-simd', 'tab B loaded the relaxed-SIMD core');
  assert.ok(a.requests.some((u) => new URL(u).pathname.startsWith('/core/dnnlab_core_relaxed.')), 'tab A fetched the relaxed build');
  assert.equal(sb.trialsDone + sc.trialsDone, 6, 'the two tabs did the six trials');
  assert.ok(sb.trialsDone > 0 && sc.trialsDone > 0, 'both tabs took trials');
  assert.equal(new Set(done.map((x) => x.index)).size, 6);
  const again = done.find((x) => x.id === held.trial);
  assert.ok(again, 'the abandoned trial is listed once');
  assert.ok(again.attempt > held.attempt, `it ran again as a newer attempt (${held.attempt} -> ${again.attempt})`);
  assert.equal(again.epochs_done, 8);
  const detail = await server.get(`/api/trials/${held.trial}`);
  assert.deepEqual(detail.curve.map((e) => e.epoch), [1, 2, 3, 4, 5, 6, 7, 8], 'its curve holds each epoch once');
  for (const x of done) assert.ok(x.worker.startsWith('browser-'), `trial ${x.index} ran in a browser (${x.worker})`);
  assert.equal(detail.provenance.kernel_target, 'wasm-relaxed-simd', 'the trial records the core build');
  // ... and whether its multiply-add was fused: V8 fuses where the CPU has FMA.
  assert.equal(detail.provenance.relaxed_madd_fused, /\bfma\b/.test(readFileSync('/proc/cpuinfo', 'utf8')));
  // Each of the six results agreed with its native re-run; nobody was quarantined.
  const verified = await until('six native re-runs', async () => {
    const { events } = await server.get('/api/events?limit=10000');
    const v = events.filter((e) => e.type === 'trial.verified' && done.some((x) => x.id === e.data.trial));
    return v.length >= 6 ? { v, events } : null;
  }, 120_000);
  for (const e of verified.v) assert.equal(e.data.agree, true, JSON.stringify(e.data));
  assert.ok(!verified.events.some((e) => e.type === 'worker.quarantined'));
  assert.deepEqual(b.errors, []);
  assert.deepEqual(c.errors, []);

  // A reload takes the core and the shard from the Cache API.
  await c.page.close();
  b.requests.length = 0;
  await b.page.reload();
  await until('tab B to reconnect', async () => (await b.state()).state === 'connected', 30_000);
  const exp2 = await server.submit(sweep('join-sweep-2', 2, 12000)); // the same data: the same shard
  await until('the second sweep to finish', async () => {
    const ts = await trials(server, exp2);
    return ts.length === 6 && ts.every((x) => x.status === 'finished');
  }, 300_000);
  const sb2 = await until('tab B to count six trials', async () => {
    const s = await b.state();
    return s.trialsDone >= 6 ? s : null;
  }, 10_000).catch(() => b.state());
  assert.equal(sb2.trialsDone, 6, 'the reloaded tab did the second sweep');
  const refetched = b.requests.filter((u) => /^\/(core|shards)\//.test(new URL(u).pathname));
  t.diagnostic(`requests after reload: ${b.requests.map((u) => new URL(u).pathname).join(' ')}`);
  assert.deepEqual(refetched, [], 'nothing under /core/ or /shards/ fetched after the reload');
  assert.deepEqual(b.errors, []);
});
