// The browser-core benchmark's workloads, shared by the node runner
// (one.mjs) and the headless-Chromium one (bench/browser/worker.js), so both
// time exactly the same training code. Plain ES module: no node APIs.
//
// Configs (as in bench/train_bench.cpp; 784 features, 10 classes, random
// data, SGD lr 0.01 momentum 0.9, batch 64, one thread):
//   a: MLP 784-256-256-10 relu      c: 16 hidden layers of 256 relu
// and the CNN of bench/cnn_bench.cpp (issue 14; its own *CnnCase functions):
//   q: CIFAR-10-quick on 3x32x32: (conv 5x5 pad 2, relu, max pool 2) with
//      32, 32, 64 filters, fc 64 relu, fc 10
//
//   const data = makeData();
//   const c = await tfjsCase(tf, HIDDEN.a, data);   // tf already on its wasm backend
//   const r = await measure(c.step, { seconds: 3 });
//   const samplesPerS = r.steps * c.samplesPerStep / r.wall;

export const F = 784, C = 10, B = 64, N = 64 * 100, LR = 0.01, MOMENTUM = 0.9;
export const HIDDEN = { a: [256, 256], c: Array(16).fill(256) };
export const NAME = { a: 'MLP 784-256-256-10, SGD, batch 64', c: '16 hidden x 256, SGD, batch 64',
  q: 'CIFAR-10-quick CNN 3x32x32, SGD, batch 64' };
export const CNN = new Set(['q']);
// CIFAR-10-quick: the three conv blocks' filters, then the hidden fc width.
export const Q = { side: 32, channels: 3, filters: [32, 32, 64], kernel: 5, fc: 64 };

export const paramCount = (config) => {
  if (CNN.has(config)) {
    let c = Q.channels, n = 0, side = Q.side;
    for (const f of Q.filters) { n += (c * Q.kernel * Q.kernel + 1) * f; c = f; side /= 2; }
    return n + (c * side * side + 1) * Q.fc + (Q.fc + 1) * C;
  }
  return [F, ...HIDDEN[config]].reduce((acc, w, i, a) => acc + (w + 1) * (i + 1 < a.length ? a[i + 1] : C), 0);
};

// Random data, fixed seed (the speed does not depend on the values): x
// uniform in [-1, 1], Fashion-MNIST shaped (N x 784), labels 0..9.
export function makeData() {
  let s = 12345;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const X = new Float32Array(N * F).map(() => rnd() * 2 - 1);
  const Y = new Int32Array(N).map(() => Math.floor(rnd() * C));
  return { X, Y };
}

// The CNN's random images: 8 batches of [3, 32, 32] (uniform [-1, 1]), as
// bench/cnn_bench.cpp cycles 8 batches. dnnlab and ConvNetJS read them as
// C,H,W and H,W,C (their layouts; the values are random either way).
export function makeImages() {
  const n = 8 * B, f = Q.channels * Q.side * Q.side;
  let s = 4242;
  const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const X = new Float32Array(n * f).map(() => rnd() * 2 - 1);
  const Y = new Int32Array(n).map(() => Math.floor(rnd() * C));
  return { X, Y, n, f };
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

// ---- the CNN (config q) ----------------------------------------------------

export async function dnnlabCnnCase(core, { X, Y }) {
  const layers = [];
  for (const f of Q.filters) {
    layers.push({ type: 'conv2d', filters: f, kernel: Q.kernel, padding: (Q.kernel - 1) / 2 },
      { type: 'relu' }, { type: 'max_pool2d', kernel: 2 });
  }
  layers.push({ type: 'dense', units: Q.fc }, { type: 'relu' }, { type: 'dense', units: C });
  const m = core.createModel({ input: [Q.channels, Q.side, Q.side], classes: C, layers, batch_size: B,
    seed: 1, optimizer: { type: 'sgd', lr: LR, momentum: MOMENTUM } });
  m.loadData(X, Y);
  return { step: () => m.trainSteps(1), samplesPerStep: B, kernels: core.kernels };
}

// tf: TensorFlow.js on its cpu backend (its wasm backend has no
// Conv2DBackpropFilter, so it cannot train a CNN). NHWC, TF.js's native
// layout; fused conv+bias+relu and matMul+bias+relu (what tf.layers run),
// raw variables, no Layers API overhead.
export async function tfjsCnnCase(tf, { X, Y, n }) {
  const vars = [];
  let c = Q.channels;
  for (const f of Q.filters) {
    const fanIn = c * Q.kernel * Q.kernel;
    vars.push(tf.variable(tf.randomNormal([Q.kernel, Q.kernel, c, f], 0, Math.sqrt(2 / fanIn))),
      tf.variable(tf.zeros([f])));
    c = f;
  }
  const flat = c * (Q.side / 8) ** 2;
  for (const [i, o] of [[flat, Q.fc], [Q.fc, C]]) {
    vars.push(tf.variable(tf.randomNormal([i, o], 0, Math.sqrt(2 / i))), tf.variable(tf.zeros([o])));
  }
  const opt = tf.train.momentum(LR, MOMENTUM);
  const batches = [];
  for (let off = 0; off < n; off += B) {
    batches.push([tf.tensor4d(X.subarray(off * Q.channels * Q.side ** 2, (off + B) * Q.channels * Q.side ** 2),
      [B, Q.side, Q.side, Q.channels]), tf.oneHot(tf.tensor1d(Y.subarray(off, off + B), 'int32'), C)]);
  }
  let b = 0;
  const convs = Q.filters.length * 2;
  const step = () => {
    const [x, y] = batches[b++ % batches.length];
    tf.tidy(() => {
      opt.minimize(() => {
        let h = x;
        for (let i = 0; i < convs; i += 2) {
          h = tf.fused.conv2d({ x: h, filter: vars[i], strides: 1, pad: 'same', bias: vars[i + 1],
            activation: 'relu' });
          h = tf.maxPool(h, 2, 2, 'valid');
        }
        h = tf.reshape(h, [B, flat]);
        h = tf.fused.matMul({ a: h, b: vars[convs], bias: vars[convs + 1], activation: 'relu' });
        h = tf.fused.matMul({ a: h, b: vars[convs + 2], bias: vars[convs + 3] });
        return tf.losses.softmaxCrossEntropy(y, h);
      }, false, vars);
    });
  };
  return { step, samplesPerStep: B, kernels: `tfjs-${tf.getBackend()}` };
}

export async function convnetjsCnnCase(convnetjs, { X, Y, n, f }) {
  const defs = [{ type: 'input', out_sx: Q.side, out_sy: Q.side, out_depth: Q.channels }];
  for (const filters of Q.filters) {
    defs.push({ type: 'conv', sx: Q.kernel, filters, stride: 1, pad: (Q.kernel - 1) / 2, activation: 'relu' },
      { type: 'pool', sx: 2, stride: 2 });
  }
  defs.push({ type: 'fc', num_neurons: Q.fc, activation: 'relu' }, { type: 'softmax', num_classes: C });
  const net = new convnetjs.Net();
  net.makeLayers(defs);
  const trainer = new convnetjs.Trainer(net, { method: 'sgd', learning_rate: LR, momentum: MOMENTUM,
    batch_size: B, l2_decay: 0 });
  const vols = [];
  for (let i = 0; i < n; i++) {
    const v = new convnetjs.Vol(Q.side, Q.side, Q.channels, 0);
    v.w.set(X.subarray(i * f, (i + 1) * f));
    vols.push(v);
  }
  let k = 0;
  // A step is 8 samples (a batch of 64 takes seconds here); the weights
  // still move every 64 samples, as batch_size says.
  const step = () => {
    for (let i = 0; i < 8; i++, k++) trainer.train(vols[k % n], Y[k % n]);
  };
  return { step, samplesPerStep: 8, kernels: 'js' };
}

// The RESULT line format of bench/train_bench.cpp.
export function resultLine(impl, config, kernels, r, samplesPerStep) {
  const samples = r.steps * samplesPerStep;
  let line = `RESULT impl=${impl} config=${config} kernels=${kernels.replace(/ /g, ',')} ` +
    `params=${paramCount(config)} batch=${B} steps_per_s=${(samples / B / r.wall).toFixed(2)} ` +
    `samples_per_s=${(samples / r.wall).toFixed(1)}`;
  if (r.cpu !== undefined) line += ` cpu_samples_per_s=${(samples / r.cpu).toFixed(1)}`;
  return line;
}
