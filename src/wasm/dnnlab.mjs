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
import createDnnlabCore from './dnnlab_core.mjs';
import { relaxedSimdSupported, wrapCore } from './dnnlab_api.mjs';

export { DnnlabError, relaxedMaddFused, relaxedSimdSupported, wrapCore } from './dnnlab_api.mjs';

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string';

// options: passed to the emscripten factory (e.g. { wasmBinary } or
// { locateFile }), plus simd: 'auto' (default: relaxed SIMD where the engine
// has it), 'relaxed' or 'simd128'. Both builds share this glue: they differ
// only in the GEMM micro-kernel. Under node the .wasm beside this file is
// read directly.
export async function loadCore(options = {}) {
  const { simd = 'auto', ...opts } = options;
  if (!['auto', 'relaxed', 'simd128'].includes(simd)) {
    throw new Error(`loadCore: simd must be 'auto', 'relaxed' or 'simd128', not '${simd}'`);
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
  return wrapCore(await createDnnlabCore(opts));
}
