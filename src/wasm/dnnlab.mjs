// dnnlab.mjs: the browser core in JS. Hides wasm pointers behind a class and
// turns the C API's status codes (dnnlab_wasm.h) into thrown Errors.
//
//   import { loadCore } from './dnnlab.mjs';
//   const core = await loadCore();               // node, browser or Web Worker
//   const m = core.createModel({ input: [784], classes: 10,
//     layers: [{ type: 'dense', units: 256 }, { type: 'relu' }, { type: 'dense', units: 10 }],
//     optimizer: { type: 'sgd', lr: 0.01, momentum: 0.9 }, batch_size: 64, seed: 1 });
//   const curve = m.train(x, y, { epochs: 3 });  // x: Float32Array n*784, y: Int32Array n
//   const { loss, accuracy } = m.evaluate(vx, vy);
//   const w = m.getParams();                     // Float32Array, flat
//   m.free();
//
//   // A data shard (docs/protocol.md), as browser workers train:
//   const shard = core.openShard(bytes);         // Uint8Array of the .safetensors
//   m.useSplit(shard, 'train');                  // shared with the shard, not copied
//   const e = m.fitEpoch(shard);                 // { epoch, trainLoss, trainAcc, valLoss, valAcc,
//                                                //   seconds, samplesPerSecond, lr }
//   const test = m.evaluateSplit(shard, 'test'); // { loss, accuracy }
//   shard.free();
//
//   // Training on the GPU (WebGPU; src/wasm/webgpu/README.md): 'auto' takes
//   // WebGPU where navigator.gpu (or options.gpu) gives an adapter, else wasm.
//   const core = await loadCore({ backend: 'auto' });
//   core.backend;                                // 'webgpu' or 'wasm'; core.adapter: vendor, architecture
//   const g = core.createGpuModel(spec);         // a sequential spec; the wasm core's initial parameters
//   g.loadData(x, y);
//   const e = await g.trainEpoch();              // { epoch, loss, accuracy }, as m.trainEpoch()
//   core.createGpuModel(spec, { fallback: true }) // the same, on wasm from a lost device on
import createDnnlabCore from './dnnlab_core.mjs';
import { relaxedSimdSupported, wrapCore } from './dnnlab_api.mjs';

export { DnnlabError, relaxedMaddFused, relaxedSimdSupported, wrapCore } from './dnnlab_api.mjs';

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string';

// options: passed to the emscripten factory (e.g. { wasmBinary } or
// { locateFile }), plus simd: 'auto' (default: relaxed SIMD where the engine
// has it), 'relaxed' or 'simd128'. Both builds share this glue: they differ
// only in the GEMM micro-kernel. Under node the .wasm beside this file is
// read directly. backend: 'wasm' (default), 'webgpu' (throws where no
// adapter is given) or 'auto'; gpu: a GPU object to use instead of
// navigator.gpu (e.g. from a node WebGPU implementation). The wasm core is
// loaded in every case: it builds models, gives their initial parameters
// and is the fallback.
export async function loadCore(options = {}) {
  const { simd = 'auto', backend = 'wasm', gpu, ...opts } = options;
  if (!['auto', 'relaxed', 'simd128'].includes(simd)) {
    throw new Error(`loadCore: simd must be 'auto', 'relaxed' or 'simd128', not '${simd}'`);
  }
  if (!['wasm', 'webgpu', 'auto'].includes(backend)) {
    throw new Error(`loadCore: backend must be 'wasm', 'webgpu' or 'auto', not '${backend}'`);
  }
  const relaxed = simd === 'relaxed' || (simd === 'auto' && relaxedSimdSupported());
  const file = new URL(relaxed ? './dnnlab_core_relaxed.wasm' : './dnnlab_core.wasm', import.meta.url);
  if (!opts.wasmBinary && !opts.locateFile) {
    if (isNode) {
      const { readFileSync } = await import('node:fs');
      opts.wasmBinary = readFileSync(file);
    } else {
      opts.locateFile = () => file.href;
    }
  }
  const core = wrapCore(await createDnnlabCore(opts));
  core.backend = 'wasm';
  if (backend === 'wasm') return core;
  const webgpu = await import('./webgpu/model.mjs');
  const device = await webgpu.GpuDevice.create(gpu ? { gpu } : {}).catch(() => null);
  if (!device) {
    if (backend === 'webgpu') throw new Error('loadCore: WebGPU asked for, but no WebGPU adapter is available');
    return core;
  }
  core.backend = 'webgpu';
  core.gpu = device;
  core.adapter = device.info;
  // A sequential spec (src/wasm/webgpu/layers.mjs) trained on the GPU from the
  // parameters the wasm core initializes for the same spec and seed, in its
  // batch order.
  // { fallback: true }: a GpuOrWasmModel, which moves to the wasm core on a
  // lost device or a failing kernel without losing the run.
  core.createGpuModel = (spec, { fallback = false } = {}) => {
    const m = core.createModel(spec);
    try {
      if (!fallback) return new webgpu.WebGpuModel(device, spec, m, { ownsSource: true });
      return new webgpu.GpuOrWasmModel(new webgpu.WebGpuModel(device, spec, m), m);
    } catch (e) {
      m.free();
      throw e;
    }
  };
  return core;
}
