// Runs in Chromium (webgpu_kernels.test.mjs serves it): an MLP and a CNN
// trained on the WebGPU backend (src/wasm/webgpu/model.mjs) against the wasm
// core training the same spec from the same initial parameters in the same
// batch order.
import { loadCore } from '/probe/dnnlab.mjs';
import { uniform } from '/test/webgpu_kernels_common.mjs';

const LAYERS = [{ type: 'dense', units: 64 }, { type: 'relu' }, { type: 'dense', units: 33 }, { type: 'tanh' },
  { type: 'dense', units: 10 }];
// A CNN with every layer kind the executor has: conv2d (bias and fused
// relu; no bias, before batchnorm), batchnorm, a standalone activation, max
// and average pooling, flatten into dense.
const CNN = [{ type: 'conv2d', filters: 4, kernel: 3, padding: 1 }, { type: 'relu' },
  { type: 'max_pool2d', kernel: 2 }, { type: 'conv2d', filters: 8, kernel: 3, padding: 1, bias: false },
  { type: 'batchnorm' }, { type: 'elu' }, { type: 'avg_pool2d', kernel: 2 }, { type: 'flatten' },
  { type: 'dense', units: 10 }];
// Two of the five optimizers on the MLP (the kernel checks cover every
// optimizer; CI time), SGD with momentum on the CNN.
const RUNS = [
  ['mlp', { type: 'sgd', lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-4 }],
  ['mlp', { type: 'adamw', lr: 2e-3, weight_decay: 0.05 }],
  ['cnn', { type: 'sgd', lr: 0.01, momentum: 0.9 }],
];
export const EPOCHS = 3;
const SAMPLES = 300;  // 5 batches of 64, the last of 44
// 3 batches of 16, the last of 8: SwiftShader takes ~10 ms per 64x64 tile's
// workgroup, so the CNN's batches are small.
const CNN_SAMPLES = 40;

// n samples of d features in `classes` Gaussian blobs.
function blobs(n, d, classes) {
  const centers = Array.from({ length: classes }, () => uniform(d, -1, 1));
  const x = new Float32Array(n * d), y = new Int32Array(n);
  const noise = uniform(n * d, -1.2, 1.2);
  for (let i = 0; i < n; i++) {
    y[i] = i % classes;
    for (let j = 0; j < d; j++) x[i * d + j] = centers[y[i]][j] + noise[i * d + j];
  }
  return { x, y };
}

// Then runFailures on the same core (its pipelines compiled: SwiftShader
// takes seconds per pipeline).
export async function runMlp() {
  const core = await loadCore({ simd: 'simd128', backend: 'auto' });
  if (core.backend !== 'webgpu') return { error: 'no WebGPU adapter' };
  const gpu = core.gpu;
  const sets = { mlp: blobs(SAMPLES, 48, 10), cnn: blobs(CNN_SAMPLES, 64, 10) };
  const runs = [];
  for (const [model, optimizer] of RUNS) {
    const spec = { input: model === 'cnn' ? [1, 8, 8] : [48], classes: 10, layers: model === 'cnn' ? CNN : LAYERS,
      optimizer, batch_size: model === 'cnn' ? 16 : 64, seed: 5 };
    const { x, y } = sets[model];
    const wasm = core.createModel(spec);
    const gpuModel = core.createGpuModel(spec);  // the same initial parameters as `wasm`
    wasm.loadData(x, y);
    gpuModel.loadData(x, y);
    const epochs = [];
    const before = { ...gpu.stats };
    for (let e = 0; e < EPOCHS; e++) {
      const w = wasm.trainEpoch(), g = await gpuModel.trainEpoch();
      epochs.push({ wasmLoss: w.loss, gpuLoss: g.loss, wasmAcc: w.accuracy, gpuAcc: g.accuracy });
    }
    // Host <-> device traffic and dispatches per training step (bench/RESULTS.md).
    const steps = EPOCHS * Math.ceil(y.length / spec.batch_size);
    const perStep = Object.fromEntries(Object.keys(before).map((key) => [key, (gpu.stats[key] - before[key]) / steps]));
    // Evaluation with the trained parameters (BatchNorm on its running statistics).
    const evalWasm = wasm.evaluate(x, y), evalGpu = await gpuModel.evaluate(x, y);
    const pw = wasm.getParams(), pg = await gpuModel.getParams();
    let scale = 1, err = 0;
    for (let i = 0; i < pw.length; i++) {
      scale = Math.max(scale, Math.abs(pw[i]));
      err = Math.max(err, Math.abs(pw[i] - pg[i]));
    }
    runs.push({ model, optimizer: optimizer.type, epochs, evalWasm, evalGpu, paramErr: err / scale, params: pw.length, perStep });
    wasm.free();
    gpuModel.free();
  }
  return { runs, adapter: core.adapter, handoffs: await runHandoffs(core, sets), chunked: await runChunked(core, sets),
    failures: await runFailures(core) };
}

// An epoch in chunks (trainEpoch's between hook, what the join worker uses
// for progress and Pause) against the same epoch in one go, from the same
// parameters: the same dispatches in the same order, so the losses,
// accuracies, parameters and optimizer state are identical, bit for bit.
// One batch a chunk and the timed chunks the join worker gets; the hook
// sees each chunk's end but the last.
async function runChunked(core, sets) {
  const out = [];
  for (const [model, optimizer] of [['mlp', { type: 'adam', lr: 2e-3 }], ['cnn', { type: 'sgd', lr: 0.01, momentum: 0.9 }]]) {
    const spec = { input: model === 'cnn' ? [1, 8, 8] : [48], classes: 10, layers: model === 'cnn' ? CNN : LAYERS,
      optimizer, batch_size: model === 'cnn' ? 16 : 64, seed: 11 };
    const { x, y } = sets[model];
    const trained = [];
    for (const chunkBatches of [0, 1, -1]) {  // 0: one go; 1: a batch a chunk; -1: timed chunks
      const m = core.createGpuModel(spec);
      m.loadData(x, y);
      const epochs = [], seen = [];
      for (let e = 0; e < 2; e++) {
        const between = chunkBatches ? async (p) => { seen.push(p.samplesDone); } : null;
        const r = await m.trainEpoch({ between, chunkBatches: Math.max(0, chunkBatches) });
        epochs.push([r.loss, r.accuracy, m.chunks]);
      }
      trained.push({ epochs, seen, params: Array.from(await m.getParams()), state: Array.from((await m.getState()).values) });
      m.free();
    }
    const [one, each, timed] = trained;
    const same = (a, b) => a.length === b.length && a.every((v, i) => Object.is(v, b[i]));
    out.push({ model, one: one.epochs, each: each.epochs, timed: timed.epochs, seen: each.seen, params: one.params.length,
      sameLoss: [each, timed].map((t) => t.epochs.every((e, i) => e[0] === one.epochs[i][0] && e[1] === one.epochs[i][1])),
      sameParams: [each, timed].map((t) => same(t.params, one.params)),
      sameState: [each, timed].map((t) => same(t.state, one.state)) });
  }
  return out;
}

// What a caller falls back on: a device lost mid-training (destroy()) and a
// shader that fails to compile surface as GpuFailure from the next call
// that reads; GpuOrWasmModel finishes its run in the wasm core.
async function runFailures(core) {
  const spec = { input: [48], classes: 10, layers: LAYERS, batch_size: 32, seed: 2 };
  const { x, y } = blobs(64, 48, 10);
  const out = {};
  // The fallback: epoch 1 on WebGPU, the device lost during epoch 2
  // between its two chunks (a batch each), which the wasm core redoes from
  // epoch 1's checkpoint; epoch 3 on wasm. Against 3 epochs in the wasm
  // core. (The join test loses its device with a chunk submitted.)
  const m = core.createGpuModel({ ...spec, optimizer: { type: 'sgd', lr: 0.05, momentum: 0.9 } }, { fallback: true });
  const ref = core.createModel({ ...spec, optimizer: { type: 'sgd', lr: 0.05, momentum: 0.9 } });
  m.loadData(x, y);
  ref.loadData(x, y);
  const g = core.createGpuModel(spec);  // a second model on the same device, not freed by the fallback
  g.loadData(x, y);
  out.epochs = [];
  for (let e = 0; e < 3; e++) {
    const lose = async () => { if (e === 1) core.gpu.device.destroy(); };
    const r = await m.trainEpoch({ between: lose, chunkBatches: 1 });
    out.epochs.push({ backend: r.backend, epoch: r.epoch, loss: r.loss, ref: ref.trainEpoch().loss });
  }
  out.failure = `${m.failure?.name} ${m.failure?.kind}`;
  // A GPU model on the lost device: every call that reads fails the same way.
  out.lost = await g.trainEpoch().then(() => 'no error', (e) => `${e.name} ${e.kind}`);
  out.lostAgain = await g.evaluate(x, y).then(() => 'no error', (e) => `${e.name} ${e.kind}`);
  for (const model of [m, ref, g]) model.free();
  const { GpuDevice } = await import('/probe/webgpu/device.mjs');
  const gpu = await GpuDevice.create();
  const t = gpu.tensor(new Float32Array(4));
  gpu.run('this is not WGSL', [t], [], [1, 1, 1]);
  out.shader = await gpu.read(t).then(() => 'no error', (e) => `${e.name} ${e.kind}`);
  const wasm = core.createModel(spec);
  wasm.loadData(x, y);
  out.wasmLoss = wasm.trainEpoch().loss;
  wasm.free();
  return out;
}

// A run continued in the wasm core (what a fallback does): 2 epochs on
// WebGPU, then its parameters and state (optimizer moments, step count,
// BatchNorm statistics) into a fresh wasm model for the third, against 3
// epochs in the wasm core alone. Adam keeps two state tensors, so the CNN's
// BatchNorm state is split back into gamma's and beta's.
async function runHandoffs(core, sets) {
  const out = [];
  for (const [model, optimizer] of [['mlp', { type: 'adamw', lr: 2e-3, weight_decay: 0.05 }],
    ['cnn', { type: 'adam', lr: 2e-3 }]]) {
    const spec = { input: model === 'cnn' ? [1, 8, 8] : [48], classes: 10, layers: model === 'cnn' ? CNN : LAYERS,
      optimizer, batch_size: model === 'cnn' ? 16 : 64, seed: 9 };
    const { x, y } = sets[model];
    const gpuModel = core.createGpuModel(spec), ref = core.createModel(spec), cont = core.createModel(spec);
    gpuModel.loadData(x, y);
    ref.loadData(x, y);
    cont.loadData(x, y);
    for (let e = 0; e < 2; e++) {
      await gpuModel.trainEpoch();
      ref.trainEpoch();
    }
    const gs = await gpuModel.getState(), rs = ref.getState();
    let scale = 1, err = 0;
    for (let i = 0; i < rs.values.length; i++) {
      scale = Math.max(scale, Math.abs(rs.values[i]));
      err = Math.max(err, Math.abs(rs.values[i] - gs.values[i]));
    }
    cont.setParams(await gpuModel.getParams());
    cont.setState(gs);
    const c = cont.trainEpoch(), r = ref.trainEpoch();
    out.push({ model, optimizer: optimizer.type, stateLength: [gs.values.length, rs.values.length],
      counters: [gs.steps, gs.epoch, rs.steps, rs.epoch], stateErr: err / scale, contLoss: c.loss, refLoss: r.loss });
    for (const m of [gpuModel, ref, cont]) m.free();
  }
  return out;
}
