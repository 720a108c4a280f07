// The join worker's choice of backend (WebGPU or the wasm core) and its
// WebGPU trials. src/wasm/webgpu/README.md describes the executor; this is
// the policy around it:
//
// - The page asks for 'auto' (default), 'webgpu' or 'wasm' (?backend= on
//   the join URL).
// - 'wasm': the wasm core, always.
// - 'webgpu' and 'auto' need an adapter (navigator.gpu.requestAdapter) and a
//   spec the executor runs exactly as the native trainer does (sequential
//   dense/conv2d/pooling/batchnorm/activation/flatten layers, softmax
//   cross-entropy, a constant learning rate without warm-up). Else wasm.
// - 'auto' then probes the trial's model once per model shape: a few
//   batches of the training split each way (one untimed pass first, which
//   compiles the GPU's pipelines), and takes WebGPU only when its timed pass
//   was faster than the wasm core's. The probe's numbers are kept with the
//   choice (state.backendChoice), shown on the page.
// - 'webgpu': WebGPU without a probe where it can run.
// - A lost device or a failing kernel mid-trial: GpuOrWasmModel hands the
//   last GPU epoch's checkpoint to the wasm core, which redoes the epoch and
//   finishes the trial; the result's backend is then 'webgpu→wasm'. The next
//   trial asks for a new device.
//
// gpu_fault (?gpu_fault= on the join URL; for the fallback tests) injects
// what a real GPU can do to a tab: 'adapter' makes every adapter request
// fail, 'lost' destroys the device during the second epoch of the first
// WebGPU trial (its first chunk submitted, not done).
import { GpuDevice, GpuFailure, GpuOrWasmModel, WebGpuModel } from '../../../src/wasm/webgpu/model.mjs';
import { ACT } from '../../../src/wasm/webgpu/wgsl_common.mjs';

export const FALLEN_BACK = 'webgpu\u2192wasm';
const ADAPTER_TEXT = 64;  // the server's bound on vendor and architecture
const GPU_LAYERS = new Set(['dense', 'conv2d', 'max_pool2d', 'avg_pool2d', 'global_avg_pool', 'batchnorm',
  'flatten', ...Object.keys(ACT)]);
const PROBE_BATCHES = 3;

// Why the WebGPU executor cannot train this spec as the native trainer
// would, or '' when it can.
export function gpuUnsupported(spec) {
  if (spec.parts) return 'a model with named parts';
  if ((spec.loss ?? 'softmax_cross_entropy') !== 'softmax_cross_entropy') return `the ${spec.loss} loss`;
  const s = spec.schedule;
  if (s && ((s.type ?? 'constant') !== 'constant' || (s.warmup_epochs ?? 0) > 0)) return 'a learning-rate schedule';
  for (const l of spec.layers ?? []) {
    if (!GPU_LAYERS.has(l.type)) return `a ${l.type} layer`;
    if (l.inputs?.length) return 'a layer with named inputs';
  }
  return '';
}

const bounded = (s) => String(s ?? '').slice(0, ADAPTER_TEXT);

export class GpuBackend {
  // requested: 'auto' | 'webgpu' | 'wasm'; fault: '' | 'adapter' | 'lost';
  // gpu: the GPU object (navigator.gpu in a worker where WebGPU is on);
  // noGpu: why there is none, where the host knows better than a browser's
  // words (node without the npm webgpu package).
  constructor({ requested = 'auto', fault = '', gpu = globalThis.navigator?.gpu, noGpu = '' } = {}) {
    this.requested = requested;
    this.fault = fault;
    this.gpu = gpu;
    this.noGpu = noGpu;
    this.device = null;
    this.adapter = null;     // { vendor, architecture } of the device's adapter
    this.unavailable = '';   // why there is no device
    this.probes = new Map(); // model shape -> { backend, reason, gpuSamplesPerSecond, wasmSamplesPerSecond }
    this.lostInjected = false;
  }

  // A device, or null (with this.unavailable saying why). A lost device is
  // replaced on the next call.
  async open() {
    if (this.requested === 'wasm') {
      this.unavailable = 'the page asked for wasm';
      return null;
    }
    if (this.device && !this.device.failure) return this.device;
    this.device = null;
    let gpu = this.gpu;
    if (gpu && this.fault === 'adapter') {
      gpu = { requestAdapter: async () => { throw new Error('the adapter request failed (gpu_fault=adapter)'); } };
    }
    if (!gpu) {
      this.unavailable = this.noGpu || 'no navigator.gpu (WebGPU is off or missing in this browser)';
      return null;
    }
    try {
      this.device = await GpuDevice.create({ gpu });
      if (!this.device) this.unavailable = 'no WebGPU adapter';
    } catch (e) {
      this.unavailable = `the adapter request failed: ${e?.message ?? e}`;
    }
    if (this.device) {
      this.unavailable = '';
      this.adapter = { vendor: bounded(this.device.info.vendor), architecture: bounded(this.device.info.architecture) };
    }
    return this.device;
  }

  // { backend: 'webgpu' | 'wasm', reason, gpuSamplesPerSecond?, wasmSamplesPerSecond? }
  // for a trial of `spec` on `shard`'s training split.
  async choose(core, spec, shard) {
    const unsupported = this.requested === 'wasm' ? '' : gpuUnsupported(spec);
    if (unsupported) return { backend: 'wasm', reason: `WebGPU cannot train ${unsupported} yet` };
    const device = await this.open();
    if (!device) return { backend: 'wasm', reason: this.unavailable };
    if (this.requested === 'webgpu') return { backend: 'webgpu', reason: 'the page asked for webgpu' };
    const key = JSON.stringify([spec.input, spec.layers, spec.batch_size, spec.optimizer?.type]);
    let p = this.probes.get(key);
    if (!p) {
      p = await probe(core, device, spec, shard).catch((e) => ({ error: String(e?.message ?? e) }));
      if (p.error) p = { backend: 'wasm', reason: `the WebGPU probe failed: ${p.error}` };
      else {
        p.backend = p.gpuSamplesPerSecond > p.wasmSamplesPerSecond ? 'webgpu' : 'wasm';
        p.reason = `probe: WebGPU ${Math.round(p.gpuSamplesPerSecond)} samples/s, wasm ${Math.round(p.wasmSamplesPerSecond)}`;
      }
      if (device.failure) return { backend: 'wasm', reason: `the device failed during the probe: ${device.failure.message}` };
      this.probes.set(key, p);
    }
    return p;
  }

  // A trial on the GPU (GpuTrial), the wasm core its fallback.
  trial(core, spec, shard) {
    const lose = this.fault === 'lost' && !this.lostInjected;
    if (lose) this.lostInjected = true;
    return new GpuTrial(core, this.device, spec, shard, lose);
  }
}

// Samples/s of PROBE_BATCHES batches of the training split on each backend,
// after one untimed pass each (pipeline compilation, the wasm core's warm-up).
async function probe(core, device, spec, shard) {
  const bs = spec.batch_size ?? 64;
  const train = shard.arrays('train');
  const n = Math.min(train.y.length, PROBE_BATCHES * bs);
  if (!n) throw new Error('an empty training split');
  const x = train.x.slice(0, n * shard.info.features), y = train.y.slice(0, n);
  const timed = async (fn) => {
    await fn();
    const t0 = performance.now();
    await fn();
    return n / Math.max(1e-6, (performance.now() - t0) / 1000);
  };
  const wasm = core.createModel(spec);
  let gpuModel = null;
  try {
    wasm.loadData(x, y);
    const wasmSamplesPerSecond = await timed(() => wasm.trainEpoch());
    gpuModel = new WebGpuModel(device, spec, core.createModel(spec), { ownsSource: true });
    gpuModel.loadData(x, y);
    const gpuSamplesPerSecond = await timed(() => gpuModel.trainEpoch());
    return { gpuSamplesPerSecond, wasmSamplesPerSecond };
  } finally {
    wasm.free();
    try {
      gpuModel?.free();
    } catch {
      // a lost device's buffers are gone already
    }
  }
}

// One trial on WebGPU with the wasm core as its fallback (GpuOrWasmModel):
// the training split uploaded once, each epoch then the validation split
// evaluated as the native trainer's fit does.
export class GpuTrial {
  constructor(core, device, spec, shard, loseDevice = false) {
    this.shard = shard;
    this.device = device;
    this.loseDevice = loseDevice;
    this.lr = spec.optimizer?.lr ?? 0.01;
    const wasm = core.createModel(spec);
    try {
      wasm.useSplit(shard, 'train');  // the fallback trains on the shard's copy
      this.m = new GpuOrWasmModel(new WebGpuModel(device, spec, wasm), wasm);
      const train = shard.arrays('train');
      this.n = train.y.length;
      this.m.gpu.loadData(train.x, train.y);  // uploads now: the views are not kept
    } catch (e) {
      wasm.free();
      throw e;
    }
  }

  get backend() {
    return this.m.failure ? FALLEN_BACK : 'webgpu';
  }
  get failure() {
    return this.m.failure;
  }
  // Chunks the last epoch ran in on the GPU (1 where the wasm core redid it).
  get chunks() {
    return this.m.backend === 'webgpu' ? this.m.gpu.chunks : 1;
  }

  // One epoch and the validation split: what CoreModel.fitEpoch returns.
  // between: the join worker's hook between the epoch's chunks
  // (WebGpuModel.trainEpoch): progress, Pause, a lost connection.
  async epoch(between) {
    const t0 = performance.now();
    const pending = this.m.trainEpoch({ between });
    if (this.loseDevice && this.m.epoch === 1 && this.m.backend === 'webgpu') {
      this.loseDevice = false;
      this.device.device.destroy();  // mid-epoch: its first chunk submitted, not done
    }
    const r = await pending;
    const val = await this.evaluate('val');
    const seconds = (performance.now() - t0) / 1000;
    return { epoch: r.epoch, trainLoss: r.loss, trainAcc: r.accuracy, valLoss: val.loss, valAcc: val.accuracy,
      seconds, samplesPerSecond: this.n / Math.max(1e-6, seconds), lr: this.lr };
  }

  // { loss, accuracy } over a split ({0, 0} when it is empty), on the GPU
  // while it lasts.
  async evaluate(split) {
    if (!this.shard.info[split]) return { loss: 0, accuracy: 0 };
    if (this.m.backend === 'webgpu') {
      try {
        const s = this.shard.arrays(split);
        return await this.m.gpu.evaluate(s.x, s.y);  // uploads before its first await
      } catch (e) {
        if (!(e instanceof GpuFailure)) throw e;
        this.m.fallBack(e);
      }
    }
    return this.m.wasm.evaluateSplit(this.shard, split);
  }

  // The test split, once at the end: in the wasm core from the last GPU
  // epoch's checkpoint (parameters, BatchNorm statistics), not on the GPU.
  // A forward pass over the whole test set (10,000 Fashion-MNIST images) is
  // minutes on SwiftShader, and one pass either way on a real GPU.
  test() {
    if (!this.shard.info.test) return { loss: 0, accuracy: 0 };
    const m = this.m;
    if (m.backend === 'webgpu' && m.checkpoint) {
      m.wasm.setParams(m.checkpoint.params);
      m.wasm.setState(m.checkpoint.state);
    }
    return m.wasm.evaluateSplit(this.shard, 'test');
  }

  async getParams() {
    if (this.m.backend === 'webgpu') {
      try {
        return await this.m.gpu.getParams();
      } catch (e) {
        if (!(e instanceof GpuFailure)) throw e;
        this.m.fallBack(e);  // the last epoch's checkpoint is what the run ended with
      }
    }
    return this.m.wasm.getParams();
  }

  free() {
    this.m.free();
  }
}
