// dnnlab_api.mjs: the JS classes over the core's C API (dnnlab_wasm.h),
// independent of how the module was loaded. dnnlab.mjs loads the module
// beside it; the join page's worker loads it from a content-hashed URL and
// calls wrapCore() itself:
//
//   const { default: factory } = await import(welcome.wasm.js);
//   const core = wrapCore(await factory({ locateFile: () => welcome.wasm.wasm }));

const STATUS = ['ok', 'spec', 'shape', 'numeric', 'data', 'argument', 'internal'];

export class DnnlabError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'DnnlabError';
    this.status = status;
    this.code = STATUS[status] ?? 'internal';
  }
}

// Whether this engine runs relaxed SIMD (Chrome 114+; node 20 with
// --experimental-wasm-relaxed-simd), i.e. can load dnnlab_core_relaxed.wasm:
// validates a one-function module that uses f32x4.relaxed_madd.
export function relaxedSimdSupported() {
  try {
    return WebAssembly.validate(maddModule());
  } catch {
    return false;
  }
}

// Whether this engine's relaxed_madd is fused (one rounding, an FMA) or a
// multiply then an add: relaxed SIMD leaves that to the engine and the CPU,
// so the relaxed build's numbers depend on it, and results record it.
// (1 + 2^-23)(1 - 2^-23) - 1 is -2^-46 fused and 0 otherwise. null where
// relaxed SIMD is missing.
export function relaxedMaddFused() {
  if (!relaxedSimdSupported()) return null;
  const { f } = new WebAssembly.Instance(new WebAssembly.Module(maddModule())).exports;
  const e = 2 ** -23;
  return f(1 + e, 1 - e, -1) !== 0;
}

// A module exporting f(a, b, c) = lane 0 of relaxed_madd(splat a, splat b, splat c).
function maddModule() {
  const splat = [0xfd, 0x13];  // f32x4.splat
  const body = [0x00, 0x20, 0, ...splat, 0x20, 1, ...splat, 0x20, 2, ...splat,
    0xfd, 0x85, 0x02,          // f32x4.relaxed_madd
    0xfd, 0x1f, 0, 0x0b];      // f32x4.extract_lane 0, end
  return new Uint8Array([0x00, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
    1, 8, 1, 0x60, 3, 0x7d, 0x7d, 0x7d, 1, 0x7d,  // type (f32 f32 f32) -> f32
    3, 2, 1, 0,                                   // one function of that type
    7, 5, 1, 1, 0x66, 0, 0,                       // export "f"
    10, body.length + 2, 1, body.length, ...body]);
}

// Wraps an instantiated emscripten module (what createDnnlabCore resolves to).
export function wrapCore(mod) {
  return new Core(mod);
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
  // bytes: a shard's safetensors bytes (Uint8Array or ArrayBuffer). The core
  // keeps the decoded floats; the bytes are not kept.
  openShard(bytes) {
    const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const h = this.withBytes(b, (p) => this.mod._dnnlab_shard_open(p, b.byteLength));
    if (!h) throw this.error();
    return new Shard(this, h);
  }
  // spec: an object (or JSON text) as described in dnnlab_wasm.h.
  createModel(spec) {
    const text = typeof spec === 'string' ? spec : JSON.stringify(spec);
    const h = this.withString(text, (p) => this.mod._dnnlab_model_create(p));
    if (!h) throw this.error();
    return new CoreModel(this, h);
  }
  // A client of a distributed run (dnnlab_hybrid_create): spec as for
  // createModel, with `parts` (features first); shard whose train split the
  // welcome's fingerprint names.
  createHybridClient(spec, shard, fingerprint) {
    const text = typeof spec === 'string' ? spec : JSON.stringify(spec);
    const h = this.withString(text, (sp) =>
      this.withString(String(fingerprint), (fp) => this.mod._dnnlab_hybrid_create(sp, shard.h, fp)));
    if (!h) throw this.error();
    return new HybridClient(this, h);
  }
}

// The wasm side of a hybrid client: binary frames in, the frame to send back
// out. The caller only moves bytes.
class HybridClient {
  constructor(core, handle) {
    this.core = core;
    this.handle = handle;
  }
  get h() {
    if (!this.handle) throw new DnnlabError(5, 'the client has been freed');
    return this.handle;
  }
  // bytes: ArrayBuffer or Uint8Array of one binary frame. Returns the reply
  // (a Uint8Array copy) or null when there is nothing to send.
  frame(bytes) {
    const b = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const m = this.core.mod, h = this.h;
    const lp = m._malloc(4);
    if (!lp) throw new DnnlabError(6, 'out of wasm memory');
    try {
      this.core.check(this.core.withBytes(b, (p) => m._dnnlab_hybrid_frame(h, p, b.byteLength, lp)));
      const n = m.HEAP32[lp >> 2];
      if (!n) return null;
      const p = m._dnnlab_hybrid_reply(h);
      return m.HEAPU8.slice(p, p + n);
    } finally {
      m._free(lp);
    }
  }
  // { tickets, version, done, frames_in, bytes_in, frames_out, bytes_out }
  info() {
    const p = this.core.mod._dnnlab_hybrid_info(this.h);
    if (!p) throw this.core.error();
    return JSON.parse(this.core.mod.UTF8ToString(p));
  }
  free() {
    if (this.handle) this.core.mod._dnnlab_hybrid_free(this.handle);
    this.handle = 0;
  }
}

const SPLITS = { train: 0, val: 1, test: 2 };
function splitIndex(split) {
  const i = typeof split === 'number' ? split : SPLITS[split];
  if (i === undefined) throw new DnnlabError(5, `unknown split ${split} (train, val or test)`);
  return i;
}

class Shard {
  constructor(core, handle) {
    this.core = core;
    this.handle = handle;
    // { dataset, classes, sample_shape, features, normalize, dataset_sha256, train, val, test }
    this.info = JSON.parse(core.mod.UTF8ToString(core.mod._dnnlab_shard_info(handle)));
  }
  get h() {
    if (!this.handle) throw new DnnlabError(5, 'the shard has been freed');
    return this.handle;
  }
  // A split's samples and labels: { x: Float32Array (n * features), y:
  // Int32Array (n) }, views of the core's memory (no copy), for a backend
  // outside the core to upload at once: the views go stale when the core's
  // memory grows or the shard is freed.
  arrays(split) {
    const i = splitIndex(split), m = this.core.mod, h = this.h;
    const n = this.info[['train', 'val', 'test'][i]];
    const features = this.info.features;
    if (!n) return { x: new Float32Array(0), y: new Int32Array(0) };
    const xp = m._dnnlab_shard_x(h, i), yp = m._dnnlab_shard_y(h, i);
    if (!xp || !yp) throw this.core.error();
    return { x: m.HEAPF32.subarray(xp >> 2, (xp >> 2) + n * features), y: m.HEAP32.subarray(yp >> 2, (yp >> 2) + n) };
  }
  // Models still using the shard keep its data alive in the core.
  free() {
    if (this.handle) this.core.mod._dnnlab_shard_free(this.handle);
    this.handle = 0;
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
  // The trainer's sample order for 0-based `epoch` over n samples (Int32Array).
  epochOrder(epoch, n) {
    const h = this.h, m = this.core.mod;
    const p = m._malloc(Math.max(4, 4 * n));
    if (!p) throw new DnnlabError(6, 'out of wasm memory');
    try {
      this.core.check(m._dnnlab_model_epoch_order(h, epoch, n, p));
      return m.HEAP32.slice(p >> 2, (p >> 2) + n);
    } finally {
      m._free(p);
    }
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
  // Trains on a split of the shard from now on (replaces loadData's set).
  useSplit(shard, split = 'train') {
    this.core.check(this.core.mod._dnnlab_model_use_split(this.h, shard.h, splitIndex(split)));
  }
  // One epoch as the native trainer runs it, then the shard's val split (if
  // a shard is given and its val split is not empty).
  fitEpoch(shard = null) {
    const h = this.h, s = shard ? shard.h : 0;
    const r = this.core.withScratch(8, (p) => this.core.check(this.core.mod._dnnlab_model_fit_epoch(h, s, p)));
    return { epoch: r[7], trainLoss: r[0], trainAcc: r[1], valLoss: r[2], valAcc: r[3], seconds: r[4], samplesPerSecond: r[5], lr: r[6] };
  }
  // Up to maxBatches more batches of the current epoch (dnnlab_model_fit_epoch_part):
  // { done: false, epoch, samplesDone, samplesTotal } until the epoch ends, then
  // { done: true, ...what fitEpoch returns, samplesDone, samplesTotal }.
  fitEpochPart(shard, maxBatches) {
    const h = this.h, s = shard ? shard.h : 0;
    const r = this.core.withScratch(10, (p) =>
      this.core.check(this.core.mod._dnnlab_model_fit_epoch_part(h, s, maxBatches | 0, p)));
    const progress = { epoch: r[7], samplesDone: r[8], samplesTotal: r[9] };
    if (r[8] < r[9]) return { done: false, ...progress };
    return { done: true, ...progress, trainLoss: r[0], trainAcc: r[1], valLoss: r[2],
      valAcc: r[3], seconds: r[4], samplesPerSecond: r[5], lr: r[6] };
  }
  evaluateSplit(shard, split) {
    const h = this.h, s = shard.h, i = splitIndex(split);
    const r = this.core.withScratch(2, (p) => this.core.check(this.core.mod._dnnlab_model_evaluate_split(h, s, i, p)));
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
  // The training state beyond the parameters (dnnlab_model_get_state):
  // { values: Float32Array, steps, epoch }; setState takes the same.
  getState() {
    const h = this.h, m = this.core.mod, n = m._dnnlab_model_num_state(h);
    if (n < 0) throw this.core.error();
    const p = m._malloc(Math.max(4, n * 4));
    if (!p) throw new DnnlabError(6, 'out of wasm memory');
    try {
      const c = this.core.withScratch(2, (cp) => this.core.check(m._dnnlab_model_get_state(h, p, n, cp)));
      return { values: m.HEAPF32.slice(p >> 2, (p >> 2) + n), steps: c[0], epoch: c[1] };
    } finally {
      m._free(p);
    }
  }
  setState({ values, steps, epoch }) {
    const h = this.h, m = this.core.mod, v = f32(values);
    const c = Float64Array.of(steps, epoch);
    this.core.check(this.core.withBytes(v, (p) => this.core.withBytes(c, (cp) => m._dnnlab_model_set_state(h, p, v.length, cp))));
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
