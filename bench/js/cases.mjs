// The browser-core benchmark's workloads, shared by the node runner
// (one.mjs) and the headless-Chromium one (bench/browser/worker.js), so both
// time exactly the same training code. Plain ES module: no node APIs.
//
// Configs (as in bench/train_bench.cpp; 784 features, 10 classes, random
// data, SGD lr 0.01 momentum 0.9, batch 64, one thread):
//   a: MLP 784-256-256-10 relu      c: 16 hidden layers of 256 relu
//
//   const data = makeData();
//   const c = await tfjsCase(tf, HIDDEN.a, data);   // tf already on its wasm backend
//   const r = await measure(c.step, { seconds: 3 });
//   const samplesPerS = r.steps * c.samplesPerStep / r.wall;

export const F = 784, C = 10, B = 64, N = 64 * 100, LR = 0.01, MOMENTUM = 0.9;
export const HIDDEN = { a: [256, 256], c: Array(16).fill(256) };
export const NAME = { a: 'MLP 784-256-256-10, SGD, batch 64', c: '16 hidden x 256, SGD, batch 64' };

export const paramCount = (hidden) =>
  [F, ...hidden].reduce((acc, w, i, a) => acc + (w + 1) * (i + 1 < a.length ? a[i + 1] : C), 0);

// Random data, fixed seed (the speed does not depend on the values): x
// uniform in [-1, 1], Fashion-MNIST shaped (N x 784), labels 0..9.
export function makeData() {
  let s = 12345;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const X = new Float32Array(N * F).map(() => rnd() * 2 - 1);
  const Y = new Int32Array(N).map(() => Math.floor(rnd() * C));
  return { X, Y };
}

// Runs step() for `warmup` then `seconds`; wall time, and CPU time when a
// cpuSeconds() clock is given (node's process.cpuUsage; in the browser an
// async call out to the driver, which reads /proc: nothing runs meanwhile).
export async function measure(step, { seconds = 3, warmup = 0.5, cpuSeconds } = {}) {
  const t0 = performance.now();
  while (performance.now() - t0 < warmup * 1000) await step();
  let steps = 0;
  const c0 = await cpuSeconds?.(), w0 = performance.now();
  while (performance.now() - w0 < seconds * 1000) {
    await step();
    steps++;
  }
  const wall = (performance.now() - w0) / 1000;
  return { steps, wall, cpu: cpuSeconds ? (await cpuSeconds()) - c0 : undefined };
}

// Each case returns { step, samplesPerStep, kernels }.

// core: from src/wasm/dnnlab.mjs's loadCore().
export async function dnnlabCase(core, hidden, { X, Y }) {
  const layers = [];
  for (const u of hidden) layers.push({ type: 'dense', units: u }, { type: 'relu' });
  layers.push({ type: 'dense', units: C });
  const m = core.createModel({ input: [F], classes: C, layers, batch_size: B, seed: 1,
    optimizer: { type: 'sgd', lr: LR, momentum: MOMENTUM } });
  m.loadData(X, Y);
  // 10 batches per call: the JS->wasm call costs next to nothing, but keep it out.
  return { step: () => m.trainSteps(10), samplesPerStep: 10 * B, kernels: core.kernels };
}

// tf: TensorFlow.js with the wasm backend already set and ready.
export async function tfjsCase(tf, hidden, { X, Y }) {
  const simd = await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT');
  const threads = await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT');
  // Raw variables and fused matMul+bias+relu (what tf.layers.dense runs),
  // without the Layers API's per-batch overhead: TF.js at its leanest.
  const widths = [F, ...hidden, C];
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
  const step = () => {
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
  };
  return { step, samplesPerStep: B, kernels: `tfjs-wasm simd=${simd} threads=${threads}` };
}

// convnetjs: the library object (build/convnet.js).
export async function convnetjsCase(convnetjs, hidden, { X, Y }) {
  const defs = [{ type: 'input', out_sx: 1, out_sy: 1, out_depth: F }];
  for (const u of hidden) defs.push({ type: 'fc', num_neurons: u, activation: 'relu' });
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
  // One step = one batch of 64 samples (ConvNetJS updates every batch_size samples).
  const step = () => {
    for (let i = 0; i < B; i++, k++) trainer.train(vols[k % vols.length], Y[k % vols.length]);
  };
  return { step, samplesPerStep: B, kernels: 'js' };
}

// The RESULT line format of bench/train_bench.cpp.
export function resultLine(impl, config, kernels, r, samplesPerStep) {
  const samples = r.steps * samplesPerStep;
  let line = `RESULT impl=${impl} config=${config} kernels=${kernels.replace(/ /g, ',')} ` +
    `params=${paramCount(HIDDEN[config])} batch=${B} steps_per_s=${(samples / B / r.wall).toFixed(2)} ` +
    `samples_per_s=${(samples / r.wall).toFixed(1)}`;
  if (r.cpu !== undefined) line += ` cpu_samples_per_s=${(samples / r.cpu).toFixed(1)}`;
  return line;
}
