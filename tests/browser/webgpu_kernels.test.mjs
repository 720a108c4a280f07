// The WebGPU kernel table (src/wasm/webgpu/) in headless Chromium against the
// wasm core's kernels (dnnlab_kernel_probe, built by web_core beside the
// core): GEMM with every epilogue and transpose, the activations, the
// convolution passes, pooling, BatchNorm, softmax cross-entropy, the bias
// sums and every optimizer, on awkward shapes, within the tolerances in
// src/wasm/webgpu/README.md. Chromium's WebGPU runs on SwiftShader (the CPU)
// here. Missing Chromium, probe or WebGPU adapter fails under CI.
//   node tests/browser/webgpu_kernels.test.mjs --probe DIR
import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { dirname, extname, join, normalize, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH_WEBGPU, prerequisite } from './launch.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const PROBE = resolve(arg('--probe', resolve(here, '../../build/release/wasm-core/src/wasm')));
const ROOTS = { '/webgpu/': resolve(here, '../../src/wasm/webgpu'), '/probe/': PROBE, '/test/': here };
const TYPES = { '.mjs': 'text/javascript', '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html' };

const missing =
  (!existsSync(CHROMIUM) && `Chromium not found at ${CHROMIUM}`) ||
  (!existsSync(join(PROBE, 'dnnlab_kernel_probe.wasm')) && `dnnlab_kernel_probe not built in ${PROBE} (target web_core)`) ||
  (() => { try { require.resolve('playwright-core'); return false; } catch { return 'playwright-core missing (npm ci in web/)'; } })();

// Serves the kernels, the probe and the page modules from 127.0.0.1 (a
// secure context, which navigator.gpu needs).
function serve() {
  const server = http.createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (path === '/favicon.ico') {
      res.statusCode = 204;
      return res.end();
    }
    if (path === '/') {
      res.setHeader('content-type', 'text/html');
      return res.end('<!doctype html><title>webgpu kernels</title>');
    }
    const prefix = Object.keys(ROOTS).find((p) => path.startsWith(p));
    const file = prefix && normalize(join(ROOTS[prefix], path.slice(prefix.length)));
    if (!file || !file.startsWith(ROOTS[prefix]) || !existsSync(file)) {
      res.statusCode = 404;
      return res.end();
    }
    res.setHeader('content-type', TYPES[extname(file)] ?? 'application/octet-stream');
    res.end(readFileSync(file));
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

// Runs `fn` of the page module `module` in a fresh headless Chromium with
// WebGPU on SwiftShader: { r, ms } (r its result), or null when the test
// was skipped (no adapter, outside CI). No console error may appear but
// those `expected` matches.
async function inChromium(t, module, fn, expected = null) {
  const { chromium } = require('playwright-core');
  const server = await serve();
  const browser = await chromium.launch(LAUNCH_WEBGPU);
  try {
    const page = await browser.newPage();
    const logs = [];
    page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
    await page.goto(`http://127.0.0.1:${server.address().port}/`);
    const t0 = Date.now();
    const r = await page.evaluate(async ([m, f]) => (await import(m))[f](), [module, fn]);
    if (r.error && !process.env.CI) {  // a missing adapter fails only under CI
      t.skip(r.error);
      return null;
    }
    assert.ok(!r.error, `${r.error} (${logs.join('\n')})`);
    assert.deepEqual(logs.filter((l) => /^(error|pageerror)/.test(l) && !(expected && expected.test(l))), []);
    return { r, ms: Date.now() - t0, logs };
  } finally {
    await browser.close();
    server.close();
  }
}

test('WebGPU kernels match the wasm core', { skip: prerequisite(test, missing) }, async (t) => {
  const run = await inChromium(t, '/test/webgpu_kernels_page.mjs', 'runAll');
  if (!run) return;
  const { r, ms } = run;
  assert.equal(r.table, 'wasm-simd128', 'the reference is the wasm core\'s table');
  const bad = r.rows.filter((row) => !(row.err <= row.tol));
  // The worst margin per kind, for the README's measured tolerances.
  const worst = {};
  for (const row of r.rows) {
    const kind = row.name.split(' ')[0];
    if (!row.exact && (!worst[kind] || row.err > worst[kind].err)) worst[kind] = row;
  }
  console.log(`${r.rows.length} checks in ${ms} ms on ${JSON.stringify(r.adapter)}; ${r.stats.dispatches} dispatches`);
  console.log(`  ms per suite: ${JSON.stringify(r.suiteMs)}`);
  for (const [kind, row] of Object.entries(worst)) console.log(`  worst ${kind}: ${row.err.toExponential(2)} (tol ${row.tol.toExponential(1)}) ${row.name}`);
  assert.equal(r.gpuError, null);
  assert.ok(r.rows.length >= 230, `only ${r.rows.length} checks ran`);
  assert.deepEqual(bad.map((row) => `${row.name}: ${row.err} > ${row.tol}${row.message ? ` ${row.message}` : ''}`), []);
});

// An MLP and a CNN trained for a few epochs on WebGPU (src/wasm/webgpu/model.mjs) against
// the wasm core: same spec, initial parameters and batch order; the
// per-epoch loss and accuracy and the final parameters within the README's
// training tolerance. Then (the same page: SwiftShader compiles pipelines
// slowly) an epoch in chunks gives the one-go epoch's numbers bit for bit,
// and a device lost mid-training and a failing shader reach the caller
// as GpuFailure, what the join page will fall back to wasm on, and the wasm
// core keeps working beside the dead device.
test('an MLP and a CNN trained on WebGPU match the wasm core; failures surface', { skip: prerequisite(test, missing) }, async (t) => {
  const run = await inChromium(t, '/test/webgpu_mlp_page.mjs', 'runMlp', /Failed to create|Invalid|Error while parsing WGSL|destroyed|lost/i);
  if (!run) return;
  const { r, ms } = run;
  console.log(`training runs in ${ms} ms`);
  const LOSS_TOL = 1e-4, PARAM_TOL = 1e-3;  // relative; see README "Tolerances"
  for (const m of r.runs) {
    const worst = Math.max(...m.epochs.map((e) => Math.abs(e.gpuLoss - e.wasmLoss) / e.wasmLoss));
    const acc = Math.max(...m.epochs.map((e) => Math.abs(e.gpuAcc - e.wasmAcc)));
    console.log(`  ${m.model} ${m.optimizer}: losses ${m.epochs.map((e) => e.wasmLoss.toFixed(5)).join(' ')}; ` +
      `worst relative loss gap ${worst.toExponential(2)}, accuracy gap ${acc}, params ${m.paramErr.toExponential(2)}; ` +
      `per step ${JSON.stringify(m.perStep)}`);
    assert.ok(m.epochs[0].wasmLoss > m.epochs.at(-1).wasmLoss, `${m.optimizer} learns`);
    assert.ok(worst <= LOSS_TOL, `${m.optimizer}: loss gap ${worst} > ${LOSS_TOL}`);
    assert.ok(acc <= 1 / 40, `${m.optimizer}: accuracy gap ${acc} (more than one sample)`);
    assert.ok(m.paramErr <= PARAM_TOL, `${m.optimizer}: parameters differ by ${m.paramErr}`);
    const evalGap = Math.abs(m.evalGpu.loss - m.evalWasm.loss) / m.evalWasm.loss;
    console.log(`    evaluate: wasm ${JSON.stringify(m.evalWasm)}, webgpu ${JSON.stringify(m.evalGpu)}, gap ${evalGap.toExponential(2)}`);
    assert.ok(evalGap <= LOSS_TOL, `${m.model} ${m.optimizer}: evaluation loss gap ${evalGap}`);
    assert.ok(Math.abs(m.evalGpu.accuracy - m.evalWasm.accuracy) <= 1 / 40, `${m.model}: evaluation accuracy`);
  }
  for (const h of r.handoffs) {
    const gap = Math.abs(h.contLoss - h.refLoss) / h.refLoss;
    console.log(`  handoff ${h.model} ${h.optimizer}: state ${h.stateLength[0]} floats, gap ${h.stateErr.toExponential(2)}; ` +
      `third epoch on wasm ${h.contLoss.toFixed(6)} vs wasm alone ${h.refLoss.toFixed(6)} (${gap.toExponential(2)})`);
    assert.equal(h.stateLength[0], h.stateLength[1], `${h.model}: the state's layout`);
    assert.deepEqual(h.counters.slice(0, 2), h.counters.slice(2), `${h.model}: steps and epochs`);
    assert.ok(h.stateErr <= PARAM_TOL, `${h.model}: state differs by ${h.stateErr}`);
    assert.ok(gap <= LOSS_TOL, `${h.model}: the continued run's loss differs by ${gap}`);
  }
  for (const c of r.chunked) {
    console.log(`  chunked ${c.model}: losses ${c.one.map((e) => e[0])}; chunks a batch ${c.each.map((e) => e[2])}, ` +
      `timed ${c.timed.map((e) => e[2])}; same loss ${c.sameLoss}, params ${c.sameParams}, state ${c.sameState}`);
    assert.deepEqual(c.one.map((e) => e[2]), [1, 1], `${c.model}: one go is one chunk`);
    const batches = c.model === 'cnn' ? 3 : 5;
    assert.deepEqual(c.each.map((e) => e[2]), [batches, batches], `${c.model}: a batch a chunk`);
    const bs = c.model === 'cnn' ? 16 : 64, ends = Array.from({ length: batches - 1 }, (_, i) => (i + 1) * bs);
    assert.deepEqual(c.seen, [...ends, ...ends], `${c.model}: the hook between chunks`);
    assert.deepEqual(c.sameLoss, [true, true], `${c.model}: the epochs' loss and accuracy`);
    assert.deepEqual(c.sameParams, [true, true], `${c.model}: the parameters`);
    assert.deepEqual(c.sameState, [true, true], `${c.model}: the optimizer state`);
  }
  const f = r.failures;
  console.log(`  failures: ${JSON.stringify(f)}`);
  assert.deepEqual(f.epochs.map((e) => [e.backend, e.epoch]), [['webgpu', 1], ['wasm', 2], ['wasm', 3]]);
  for (const e of f.epochs) assert.ok(Math.abs(e.loss - e.ref) / e.ref <= LOSS_TOL, `fallback epoch ${e.epoch}: ${e.loss} vs ${e.ref}`);
  assert.equal(f.failure, 'GpuFailure lost');
  assert.equal(f.lost, 'GpuFailure lost');
  assert.equal(f.lostAgain, 'GpuFailure lost');
  assert.equal(f.shader, 'GpuFailure error');
  assert.ok(Number.isFinite(f.wasmLoss) && f.wasmLoss > 0);
});

// loadCore's backend choice where there is no WebGPU (node has no navigator.gpu).
test('loadCore falls back to wasm without an adapter', { skip: prerequisite(test, missing) }, async () => {
  const { loadCore } = await import(join(PROBE, 'dnnlab.mjs'));
  const auto = await loadCore({ simd: 'simd128', backend: 'auto' });
  assert.equal(auto.backend, 'wasm');
  assert.equal(auto.createGpuModel, undefined);
  await assert.rejects(loadCore({ simd: 'simd128', backend: 'webgpu' }), /no WebGPU adapter/);
  await assert.rejects(loadCore({ backend: 'cuda' }), /backend must be/);
  // The trainer's order, which a GPU model takes its batches in.
  const m = auto.createModel({ input: [2], classes: 2, layers: [{ type: 'dense', units: 2 }], seed: 3 });
  const o0 = m.epochOrder(0, 257), o1 = m.epochOrder(1, 257);
  assert.deepEqual([...o0].sort((a, b) => a - b), Array.from({ length: 257 }, (_, i) => i));
  assert.notDeepEqual(o0, o1);
  assert.deepEqual(m.epochOrder(0, 257), o0);
  assert.throws(() => m.epochOrder(-1, 3), /epoch must be/);
  m.free();
  // The state a continued run takes: SGD with momentum keeps a velocity per
  // parameter, BatchNorm its running statistics.
  const bn = auto.createModel({ input: [3], classes: 2, layers: [{ type: 'dense', units: 4 }, { type: 'batchnorm' },
    { type: 'dense', units: 2 }], optimizer: { type: 'sgd', lr: 0.1, momentum: 0.9 }, seed: 3 });
  const st = bn.getState();
  assert.equal(st.values.length, bn.numParams + 2 * 4);
  assert.deepEqual([st.steps, st.epoch], [0, 0]);
  assert.deepEqual([...st.values.slice(-8)], [0, 0, 0, 0, 1, 1, 1, 1]);  // running mean, variance
  bn.loadData(Float32Array.from({ length: 30 }, (_, i) => Math.sin(i)), Int32Array.from({ length: 10 }, (_, i) => i % 2));
  bn.trainEpoch();
  const after = bn.getState();
  assert.deepEqual([after.steps, after.epoch], [1, 1]);
  bn.setState(st);
  assert.deepEqual(bn.getState(), st);
  assert.throws(() => bn.setState({ ...st, values: st.values.slice(1) }), /count/);
  assert.throws(() => bn.setState({ ...st, values: st.values.map((v, i) => (i ? v : NaN)) }), /non-finite/);
  bn.free();
  const noAdapter = { requestAdapter: async () => null };  // a GPU whose adapter request fails
  assert.equal((await loadCore({ simd: 'simd128', backend: 'auto', gpu: noAdapter })).backend, 'wasm');
});

