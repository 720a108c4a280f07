// One training-throughput measurement in this process, printed as a
// `RESULT impl=... config=... samples_per_s=... cpu_samples_per_s=...` line
// (the format of bench/train_bench.cpp). run.mjs alternates these.
//
//   node --no-experimental-fetch one.mjs dnnlab|tfjs|convnetjs a|c SECONDS [CORE_DIR]
//
// Configs (as in bench/train_bench.cpp; 784 features, 10 classes, random
// data, SGD lr 0.01 momentum 0.9, batch 64, one thread):
//   a: MLP 784-256-256-10 relu      c: 16 hidden layers of 256 relu
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';

const here = dirname(fileURLToPath(import.meta.url));
const [impl, config, secArg, coreDirArg] = process.argv.slice(2);
const SECONDS = Number(secArg ?? 3), WARMUP = 0.5;
const HIDDEN = { a: [256, 256], c: Array(16).fill(256) }[config];
if (!HIDDEN) throw new Error(`unknown config ${config}`);
const F = 784, C = 10, B = 64, N = 64 * 100, LR = 0.01, MOMENTUM = 0.9;

// Random data, fixed seed (the speed does not depend on the values).
let s = 12345;
const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
const X = new Float32Array(N * F).map(() => rnd() * 2 - 1);
const Y = new Int32Array(N).map(() => Math.floor(rnd() * C));
const params = [F, ...HIDDEN, C].slice(1).reduce((acc, w, i, a) => acc + ([F, ...HIDDEN][i] + 1) * w, 0);

// Runs step() (one batch) for WARMUP then SECONDS; wall and process CPU time.
async function measure(step) {
  const t0 = performance.now();
  while (performance.now() - t0 < WARMUP * 1000) await step();
  let steps = 0;
  const c0 = process.cpuUsage(), w0 = performance.now();
  while (performance.now() - w0 < SECONDS * 1000) {
    await step();
    steps++;
  }
  const wall = (performance.now() - w0) / 1000;
  const cu = process.cpuUsage(c0), cpu = (cu.user + cu.system) / 1e6;
  return { steps, wall, cpu };
}

async function dnnlab() {
  const coreDir = resolve(coreDirArg ?? join(here, '../../build/wasm-api/src/wasm'));
  const { loadCore } = await import(pathToFileURL(join(coreDir, 'dnnlab.mjs')).href);
  const core = await loadCore();
  const layers = [];
  for (const u of HIDDEN) layers.push({ type: 'dense', units: u }, { type: 'relu' });
  layers.push({ type: 'dense', units: C });
  const m = core.createModel({ input: [F], classes: C, layers, batch_size: B, seed: 1,
    optimizer: { type: 'sgd', lr: LR, momentum: MOMENTUM } });
  m.loadData(X, Y);
  // 10 batches per call: the JS->wasm call costs next to nothing, but keep it out.
  const r = await measure(() => m.trainSteps(10));
  r.steps *= 10;
  return { ...r, kernels: core.kernels };
}

async function tfjs() {
  const require = createRequire(import.meta.url);
  const tf = require('@tensorflow/tfjs');
  const wasm = require('@tensorflow/tfjs-backend-wasm');
  // One thread, the plain SIMD binary (not the threaded one).
  tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false);
  wasm.setWasmPaths(join(here, 'node_modules/@tensorflow/tfjs-backend-wasm/dist/'));
  await tf.setBackend('wasm');
  await tf.ready();
  const simd = await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT');
  const threads = await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT');
  // Raw variables and fused matMul+bias+relu (what tf.layers.dense runs),
  // without the Layers API's per-batch overhead: TF.js at its leanest.
  const widths = [F, ...HIDDEN, C];
  const vars = [];
  for (let i = 0; i + 1 < widths.length; i++) {
    vars.push(tf.variable(tf.randomNormal([widths[i], widths[i + 1]], 0, Math.sqrt(2 / widths[i]))));
    vars.push(tf.variable(tf.zeros([widths[i + 1]])));
  }
  const opt = tf.train.momentum(LR, MOMENTUM);
  // Batches made up front (as a tf.data pipeline would), not timed.
  const batches = [];
  for (let off = 0; off < N; off += B)
    batches.push([tf.tensor2d(X.subarray(off * F, (off + B) * F), [B, F]),
      tf.oneHot(tf.tensor1d(Y.subarray(off, off + B), 'int32'), C)]);
  let b = 0;
  const r = await measure(() => {
    const [x, y] = batches[b++ % batches.length];
    tf.tidy(() => {
      opt.minimize(() => {
        let h = x;
        for (let i = 0; i < vars.length; i += 2) {
          h = tf.fused.matMul({ a: h, b: vars[i], bias: vars[i + 1],
            activation: i + 2 < vars.length ? 'relu' : 'linear' });
        }
        return tf.losses.softmaxCrossEntropy(y, h);
      }, false, vars);
    });
  });
  return { ...r, kernels: `tfjs-wasm simd=${simd} threads=${threads}` };
}

async function convnetjs() {
  const require = createRequire(import.meta.url);
  const convnetjs = require('convnetjs');
  const defs = [{ type: 'input', out_sx: 1, out_sy: 1, out_depth: F }];
  for (const u of HIDDEN) defs.push({ type: 'fc', num_neurons: u, activation: 'relu' });
  defs.push({ type: 'softmax', num_classes: C });
  const net = new convnetjs.Net();
  net.makeLayers(defs);
  const trainer = new convnetjs.Trainer(net, { method: 'sgd', learning_rate: LR, momentum: MOMENTUM,
    batch_size: B, l2_decay: 0 });
  const vols = [];
  for (let i = 0; i < 512; i++) {
    const v = new convnetjs.Vol(1, 1, F, 0);
    for (let j = 0; j < F; j++) v.w[j] = X[i * F + j];
    vols.push(v);
  }
  let k = 0;
  // One "step" = one batch of 64 samples (ConvNetJS updates every batch_size samples).
  const r = await measure(() => {
    for (let i = 0; i < B; i++, k++) trainer.train(vols[k % vols.length], Y[k % vols.length]);
  });
  return { ...r, kernels: 'js' };
}

const run = { dnnlab, tfjs, convnetjs }[impl];
if (!run) throw new Error(`unknown impl ${impl}`);
const r = await run();
const samples = r.steps * B;
console.log(`RESULT impl=${impl === "dnnlab" ? "dnnlab-wasm" : impl} config=${config} kernels=${r.kernels.replace(/ /g, ',')} params=${params} ` +
  `batch=${B} steps_per_s=${(r.steps / r.wall).toFixed(2)} samples_per_s=${(samples / r.wall).toFixed(1)} ` +
  `cpu_samples_per_s=${(samples / r.cpu).toFixed(1)}`);
