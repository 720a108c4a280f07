// Runs in Chromium (webgpu_kernels.test.mjs serves it): MLPs trained on the
// WebGPU backend (src/wasm/webgpu/mlp.mjs) against the wasm core training the
// same spec from the same initial parameters in the same batch order.
import { loadCore } from '/probe/dnnlab.mjs';
import { uniform } from '/test/webgpu_kernels_common.mjs';

const LAYERS = [{ type: 'dense', units: 64 }, { type: 'relu' }, { type: 'dense', units: 33 }, { type: 'tanh' },
  { type: 'dense', units: 10 }];
// Three of the five (the kernel checks cover every optimizer; CI time).
const OPTIMIZERS = [
  { type: 'sgd', lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-4 },
  { type: 'adamw', lr: 2e-3, weight_decay: 0.05 },
  { type: 'rmsprop', lr: 2e-3, momentum: 0.5, centered: true },
];
export const EPOCHS = 3;
const SAMPLES = 500;  // 8 batches of 64, the last of 52

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

export async function runMlp() {
  const core = await loadCore({ simd: 'simd128', backend: 'auto' });
  if (core.backend !== 'webgpu') return { error: 'no WebGPU adapter' };
  const gpu = core.gpu;
  const { x, y } = blobs(SAMPLES, 48, 10);
  const runs = [];
  for (const optimizer of OPTIMIZERS) {
    const spec = { input: [48], classes: 10, layers: LAYERS, optimizer, batch_size: 64, seed: 5 };
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
    const steps = EPOCHS * Math.ceil(SAMPLES / spec.batch_size);
    const perStep = Object.fromEntries(Object.keys(before).map((key) => [key, (gpu.stats[key] - before[key]) / steps]));
    const pw = wasm.getParams(), pg = await gpuModel.getParams();
    let scale = 1, err = 0;
    for (let i = 0; i < pw.length; i++) {
      scale = Math.max(scale, Math.abs(pw[i]));
      err = Math.max(err, Math.abs(pw[i] - pg[i]));
    }
    runs.push({ optimizer: optimizer.type, epochs, paramErr: err / scale, params: pw.length, perStep });
    wasm.free();
    gpuModel.free();
  }
  return { runs, adapter: core.adapter };
}
