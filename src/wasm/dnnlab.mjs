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
import createDnnlabCore from './dnnlab_core.mjs';

const STATUS = ['ok', 'spec', 'shape', 'numeric', 'data', 'argument', 'internal'];

export class DnnlabError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'DnnlabError';
    this.status = status;
    this.code = STATUS[status] ?? 'internal';
  }
}

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string';

// options: passed to the emscripten factory (e.g. { wasmBinary } or
// { locateFile }). Under node the .wasm beside this file is read directly.
export async function loadCore(options = {}) {
  const opts = { ...options };
  if (isNode && !opts.wasmBinary && !opts.locateFile) {
    const { readFileSync } = await import('node:fs');
    opts.wasmBinary = readFileSync(new URL('./dnnlab_core.wasm', import.meta.url));
  }
  return new Core(await createDnnlabCore(opts));
}

class Core {
  constructor(mod) {
    this.mod = mod;
    this.kernels = mod.UTF8ToString(mod._dnnlab_kernels_name());
  }
  error() {
    const m = this.mod;
    return new DnnlabError(m._dnnlab_last_status(), m.UTF8ToString(m._dnnlab_last_error()));
  }
  check(status) {
    if (status !== 0) throw this.error();
  }
  // Copies bytes into wasm memory, calls fn(ptr), frees. The heap views are
  // read after malloc because memory growth replaces them.
  withBytes(bytes, fn) {
    const m = this.mod;
    const p = m._malloc(Math.max(1, bytes.byteLength));
    if (!p) throw new DnnlabError(6, 'out of wasm memory');
    try {
      m.HEAPU8.set(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength), p);
      return fn(p);
    } finally {
      m._free(p);
    }
  }
  withString(s, fn) {
    const b = new TextEncoder().encode(s);
    const z = new Uint8Array(b.length + 1);
    z.set(b);
    return this.withBytes(z, fn);
  }
  withScratch(n, fn) {
    const m = this.mod;
    const p = m._malloc(n * 8);
    if (!p) throw new DnnlabError(6, 'out of wasm memory');
    try {
      fn(p);
      return Array.from(m.HEAPF64.subarray(p >> 3, (p >> 3) + n));
    } finally {
      m._free(p);
    }
  }
  // spec: an object (or JSON text) as described in dnnlab_wasm.h.
  createModel(spec) {
    const text = typeof spec === 'string' ? spec : JSON.stringify(spec);
    const h = this.withString(text, (p) => this.mod._dnnlab_model_create(p));
    if (!h) throw this.error();
    return new CoreModel(this, h);
  }
}

const f32 = (a) => (a instanceof Float32Array ? a : Float32Array.from(a));
const i32 = (a) => (a instanceof Int32Array ? a : Int32Array.from(a));

class CoreModel {
  constructor(core, handle) {
    this.core = core;
    this.handle = handle;
    this.numParams = core.mod._dnnlab_model_num_params(handle);
    this.inputSize = core.mod._dnnlab_model_input_size(handle);
  }
  get h() {
    if (!this.handle) throw new DnnlabError(5, 'the model has been freed');
    return this.handle;
  }
  // Calls fn(xPtr, xCount, yPtr, n) with x and y copied into wasm memory.
  withSet(x, y, fn) {
    x = f32(x);
    y = i32(y);
    return this.core.withBytes(x, (xp) => this.core.withBytes(y, (yp) => fn(xp, x.length, yp, y.length)));
  }
  // Copies the training set into the model (replacing any earlier one).
  loadData(x, y) {
    const h = this.h;
    this.core.check(this.withSet(x, y, (xp, xn, yp, n) => this.core.mod._dnnlab_model_load_data(h, xp, xn, yp, n)));
  }
  // One epoch over the loaded set: { loss, accuracy, seconds, samplesPerSecond }.
  trainEpoch() {
    const h = this.h;
    const r = this.core.withScratch(4, (p) => this.core.check(this.core.mod._dnnlab_model_train_epochs(h, 1, p)));
    return { loss: r[0], accuracy: r[1], seconds: r[2], samplesPerSecond: r[3] };
  }
  // `steps` batches from the loaded set: { loss, accuracy, seconds, samplesPerSecond }.
  trainSteps(steps) {
    const h = this.h;
    const r = this.core.withScratch(4, (p) => this.core.check(this.core.mod._dnnlab_model_train_steps(h, steps, p)));
    return { loss: r[0], accuracy: r[1], seconds: r[2], samplesPerSecond: r[3] };
  }
  // Loads (x, y) and trains: { epochs } (default 1) returns one result per
  // epoch; { steps } returns one result for that many batches.
  train(x, y, { epochs = 1, steps } = {}) {
    this.loadData(x, y);
    if (steps !== undefined) return this.trainSteps(steps);
    const out = [];
    for (let e = 0; e < epochs; e++) out.push({ epoch: e + 1, ...this.trainEpoch() });
    return out;
  }
  evaluate(x, y) {
    const h = this.h;
    const r = this.core.withScratch(2, (p) =>
      this.core.check(this.withSet(x, y, (xp, xn, yp, n) => this.core.mod._dnnlab_model_evaluate(h, xp, xn, yp, n, p))));
    return { loss: r[0], accuracy: r[1] };
  }
  getParams() {
    const h = this.h, m = this.core.mod, n = this.numParams;
    const p = m._malloc(Math.max(1, n * 4));
    try {
      this.core.check(m._dnnlab_model_get_params(h, p, n));
      return m.HEAPF32.slice(p >> 2, (p >> 2) + n);
    } finally {
      m._free(p);
    }
  }
  setParams(values) {
    const h = this.h, v = f32(values);
    this.core.check(this.core.withBytes(v, (p) => this.core.mod._dnnlab_model_set_params(h, p, v.length)));
  }
  // Safetensors bytes (Uint8Array, a copy).
  saveWeights() {
    const h = this.h, m = this.core.mod;
    const lp = m._malloc(4);
    try {
      const p = m._dnnlab_model_save(h, lp);
      if (!p) throw this.core.error();
      const len = m.HEAP32[lp >> 2];
      return m.HEAPU8.slice(p, p + len);
    } finally {
      m._free(lp);
    }
  }
  loadWeights(bytes) {
    const h = this.h;
    this.core.check(this.core.withBytes(bytes, (p) => this.core.mod._dnnlab_model_load(h, p, bytes.byteLength)));
  }
  free() {
    if (this.handle) this.core.mod._dnnlab_model_free(this.handle);
    this.handle = 0;
  }
}
