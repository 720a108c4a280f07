// model.mjs: trains a sequential spec (layers.mjs: dense, conv2d, pooling,
// batchnorm, activations, flatten; softmax cross-entropy; any of the core's
// five optimizers at a constant learning rate) on the WebGPU kernel table,
// as the wasm core's Trainer does, shadowing a wasm core model of the same
// spec: its initial parameters (getParams()) and its batch order
// (epochOrder()), one optimizer step per batch. The training set goes up
// once; per epoch only the order goes up and two floats per batch (loss,
// hits) come down.
//
//   const wasmModel = core.createModel(spec);         // initializes; gives the order
//   const m = new WebGpuModel(gpu, spec, wasmModel);  // (loadCore's createGpuModel does this)
//   m.loadData(x, y);
//   const { loss, accuracy } = await m.trainEpoch();
//   await m.trainEpoch({ between: async ({ samplesDone, samplesTotal }) => {} });  // in chunks
//   const val = await m.evaluate(vx, vy);             // { loss, accuracy }
//   const w = await m.getParams();  // the flat layout getParams() uses
import { groups1d } from './device.mjs';
import { webgpuKernels } from './kernels.mjs';
import { allocate, backward, buildLayers, forward, trainable } from './layers.mjs';
import { ELEMENTWISE_MAIN, kernelHead } from './wgsl_common.mjs';

export { GpuDevice, GpuFailure } from './device.mjs';
export { GpuOrWasmModel } from './fallback.mjs';

// An epoch with a `between` hook goes up in chunks of about CHUNK_SECONDS
// (the wasm core's slices in the join worker are as long): short enough
// for a progress bar and a prompt Pause, long enough that a real GPU's
// wait at each chunk's end costs little.
const CHUNK_SECONDS = 0.1;
// The next slice's (or chunk's) batches after `batches` took `seconds`,
// aiming at `target` seconds: at most 4 times more or fewer at a step, so
// that one slow slice (a pipeline compiled, a GC) does not swing it.
export function nextSliceBatches(batches, seconds, target) {
  if (!(seconds > 0)) return batches;
  return Math.max(1, Math.min(4096, Math.round(batches * Math.min(4, Math.max(0.25, target / seconds)))));
}

const OPTIMIZER_DEFAULTS = { lr: 0.01, momentum: 0, nesterov: false, weight_decay: 0, beta1: 0.9, beta2: 0.999,
  eps: 1e-8, alpha: 0.99, centered: false, lr_decay: 0, initial_accumulator: 0 };

// x_batch[i] = x[order[offset + i]] (rows of `row` floats), y_batch likewise.
const GATHER = /* wgsl */ `
${kernelHead('n: i32, row: i32, offset: i32', ['x', 'y i32', 'order i32', 'xb rw', 'yb rw i32'])}
${ELEMENTWISE_MAIN}
  let r = i / u.row;
  let src = order[u.offset + r];
  xb[i] = x[src * u.row + i % u.row];
  if (i % u.row == 0) { yb[r] = y[src]; }
}`;

function concat(parts) {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let off = 0;
  for (const p of parts) out.set(p, (off += p.length) - p.length);
  return out;
}

function checkSpec(spec, layers) {
  const width = layers.at(-1).outShape.reduce((x, y) => x * y, 1);
  if (width !== spec.classes) throw new Error(`WebGpuModel: the last layer has ${width} outputs, not ${spec.classes} classes`);
  if ((spec.loss ?? 'softmax_cross_entropy') !== 'softmax_cross_entropy') throw new Error('WebGpuModel: softmax cross-entropy only');
  if (spec.schedule && (spec.schedule.type ?? 'constant') !== 'constant') throw new Error('WebGpuModel: constant learning rate only');
}

export class WebGpuModel {
  // source: the wasm core model (dnnlab_api.mjs's CoreModel) of the same
  // spec, read now for the initial parameters and each epoch for the order;
  // freed with this model when `ownsSource`.
  constructor(gpu, spec, source, { ownsSource = false } = {}) {
    const params = source.getParams();
    this.source = source;
    this.ownsSource = ownsSource;
    this.gpu = gpu;
    this.k = webgpuKernels(gpu);
    this.spec = spec;
    this.opt = { ...OPTIMIZER_DEFAULTS, ...spec.optimizer, type: spec.optimizer?.type ?? 'sgd' };
    this.batch = spec.batch_size ?? 64;
    this.epoch = 0;
    this.steps = 0;
    this.chunkBatches = 4;  // adapted as chunks are timed (trainEpoch's between)
    this.chunks = 0;        // chunks the last epoch ran in
    let off = 0;
    const take = (n) => params.subarray(off, (off += n));
    this.layers = buildLayers(spec, take, (values) => this.param(values));
    checkSpec(spec, this.layers);
    if (off !== params.length) throw new Error(`WebGpuModel: ${params.length} parameters given, the spec has ${off}`);
    this.inputSize = spec.input.reduce((a, b) => a * b, 1);
  }

  // A parameter with its gradient and optimizer state on the GPU.
  param(values) {
    const gpu = this.gpu, n = values.length, o = this.opt;
    const p = { n, value: gpu.tensor(values), grad: gpu.zeros(n), s1: gpu.zeros(n), s2: null, s3: null };
    if (o.type === 'adagrad') gpu.write(p.s1, new Float32Array(n).fill(o.initial_accumulator));
    if (o.type === 'adam' || o.type === 'adamw' || (o.type === 'rmsprop' && o.momentum > 0)) p.s2 = gpu.zeros(n);
    if (o.type === 'rmsprop' && o.centered) p.s3 = gpu.zeros(n);
    return p;
  }

  // The training set (x: n * input floats, y: n labels), uploaded once.
  loadData(x, y) {
    const gpu = this.gpu, width = this.inputSize, n = y.length;
    if (x.length !== n * width) throw new Error(`WebGpuModel: ${x.length} floats for ${n} samples of ${width}`);
    this.n = n;
    this.x = gpu.tensor(x instanceof Float32Array ? x : Float32Array.from(x));
    this.y = gpu.tensor(y instanceof Int32Array ? y : Int32Array.from(y));
    this.order = gpu.zeros(n);
    const bs = Math.min(this.batch, n);
    this.xb = gpu.zeros(bs * width);
    this.yb = gpu.zeros(bs);
    allocate(gpu, this.layers, bs);
    this.lossOut = gpu.zeros(2);
    this.metrics = gpu.zeros(2 * Math.ceil(n / bs));
  }

  // One epoch as nn::Trainer runs it: { epoch, loss, accuracy } (means over
  // samples). Without `between` it is recorded at once and read back at the
  // end: the event loop runs meanwhile, but nothing can act within the
  // epoch. With `between` (an async hook) the batches go up in chunks, and
  // after each chunk but the last the GPU is awaited and then
  // between({ samplesDone, samplesTotal }): the join worker shows progress,
  // waits while paused, and throws on a lost connection there. A chunk is
  // `chunkBatches` batches where given (the tests), else about CHUNK_SECONDS
  // as the chunks before it were timed. The same dispatches in the same
  // order either way: the numbers are identical, bit for bit. A device lost
  // mid-epoch fails the wait at the next chunk's end (GpuFailure).
  async trainEpoch({ between = null, chunkBatches = 0 } = {}) {
    const gpu = this.gpu, n = this.n, bs = Math.min(this.batch, n), width = this.inputSize;
    gpu.write(this.order, this.source.epochOrder(this.epoch, n));
    const counts = [];
    let t0 = performance.now(), inChunk = 0;
    this.chunks = 1;
    for (let done = 0, b = 0; done < n; done += bs, b++) {
      const cnt = Math.min(bs, n - done);
      gpu.run(GATHER, [this.x, this.y, this.order, this.xb, this.yb], [[cnt * width, 'i32'], [width, 'i32'],
        [done, 'i32']], groups1d(cnt * width));
      this.step(cnt);
      gpu.copy(this.lossOut, this.metrics, 2, 0, 2 * b);
      counts.push(cnt);
      if (between && ++inChunk >= (chunkBatches || this.chunkBatches) && done + cnt < n) {
        await gpu.done();  // nothing stays recorded while the hook runs (it may end the trial)
        if (!chunkBatches) this.chunkBatches = nextSliceBatches(inChunk, (performance.now() - t0) / 1000, CHUNK_SECONDS);
        await between({ samplesDone: done + cnt, samplesTotal: n });
        this.chunks++;
        t0 = performance.now();
        inChunk = 0;
      }
    }
    const { loss, hits } = await this.totals(this.metrics, counts);
    this.epoch++;
    return { epoch: this.epoch, loss: loss / n, accuracy: hits / n };
  }

  // Mean loss and accuracy over (x, y) with the current parameters
  // (BatchNorm with its running statistics), as Model::evaluate, in batches
  // of the training batch size (loadData sizes the buffers first):
  // { loss, accuracy }.
  async evaluate(x, y) {
    const gpu = this.gpu, k = this.k, n = y.length, width = this.inputSize;
    if (!this.xb) throw new Error('WebGpuModel: evaluate needs loadData first (it sizes the batch buffers)');
    if (x.length !== n * width) throw new Error(`WebGpuModel: ${x.length} floats for ${n} samples of ${width}`);
    const bs = this.xb.length / width;
    const gx = gpu.tensor(x instanceof Float32Array ? x : Float32Array.from(x));
    const gy = gpu.tensor(y instanceof Int32Array ? y : Int32Array.from(y));
    const metrics = gpu.zeros(2 * Math.ceil(n / bs)), counts = [];
    for (let done = 0, b = 0; done < n; done += bs, b++) {
      const cnt = Math.min(bs, n - done);
      gpu.copy(gx, this.xb, cnt * width, done * width, 0);
      gpu.copy(gy, this.yb, cnt, done, 0);
      let h = this.xb;
      for (const l of this.layers) {
        forward(k, l, cnt, h, false);
        h = l.y;
      }
      k.softmax_cross_entropy(h, this.yb, cnt, this.layers.at(-1).outN, null, this.lossOut);
      gpu.copy(this.lossOut, metrics, 2, 0, 2 * b);
      counts.push(cnt);
    }
    const { loss, hits } = await this.totals(metrics, counts);
    for (const t of [gx, gy, metrics]) t.destroy();
    return { loss: loss / n, accuracy: hits / n };
  }

  // Sums the per-batch [mean loss, hits] pairs in double, loss weighted by
  // the batch's size, as nn::Trainer sums them.
  async totals(metrics, counts) {
    const m = await this.gpu.read(metrics, Float32Array, 2 * counts.length);
    let loss = 0, hits = 0;
    counts.forEach((cnt, b) => {
      loss += m[2 * b] * cnt;
      hits += m[2 * b + 1];
    });
    return { loss, hits };
  }

  // Forward, loss, backward and the optimizer step on the gathered batch of cnt rows.
  step(cnt) {
    const k = this.k, L = this.layers;
    let h = this.xb;
    for (const l of L) {
      forward(k, l, cnt, h, true);
      h = l.y;
    }
    const last = L.at(-1);
    k.softmax_cross_entropy(last.y, this.yb, cnt, last.outN, last.dy, this.lossOut);
    for (let i = L.length - 1; i >= 0; i--) backward(k, L[i], cnt, i ? L[i - 1].y : this.xb, i ? L[i - 1].dy : null);
    this.steps++;
    for (const p of trainable(L)) this.update(p);
  }

  update(p) {
    const k = this.k, o = this.opt, t = this.steps;
    if (o.type === 'sgd') k.sgd_step(p.value, p.grad, p.s1, p.n, o);
    else if (o.type === 'adagrad') k.adagrad_step(p.value, p.grad, p.s1, p.n, { ...o, step: t });
    else if (o.type === 'rmsprop') k.rmsprop_step(p.value, p.grad, p.s1, p.s2, p.s3, p.n, o);
    else if (o.type === 'adam' || o.type === 'adamw') k.adam_step(p.value, p.grad, p.s1, p.s2, p.n, { ...o, decoupled: o.type === 'adamw', step: t });
    else throw new Error(`WebGpuModel: unknown optimizer '${o.type}'`);
  }

  // The parameters in the wasm core's flat layout (weight then bias per layer).
  async getParams() {
    const parts = [];
    for (const p of trainable(this.layers)) parts.push(await this.gpu.read(p.value));
    return concat(parts);
  }

  // The training state in dnnlab_model_get_state's layout, { values, steps,
  // epoch }: with getParams(), what a wasm core model needs to continue this
  // run (setParams, setState). BatchNorm's gamma and beta are one tensor
  // here and two parameters there: their state is split back.
  async getState() {
    const parts = [];
    const states = async (p) => {
      const out = [];
      for (const t of [p.s1, p.s2, p.s3]) if (t) out.push(await this.gpu.read(t));
      return out;
    };
    for (const l of this.layers) {
      for (const p of [l.w, l.b]) if (p) parts.push(...await states(p));
      if (l.bn) {
        const s = await states(l.bn);
        for (const half of [0, 1]) parts.push(...s.map((t) => t.subarray(half * l.c, (half + 1) * l.c)));
      }
    }
    for (const l of this.layers) if (l.running) parts.push(await this.gpu.read(l.running));
    return { values: concat(parts), steps: this.steps, epoch: this.epoch };
  }

  free() {
    for (const p of trainable(this.layers)) for (const t of [p.value, p.grad, p.s1, p.s2, p.s3]) t?.destroy();
    for (const l of this.layers) for (const t of [l.y, l.dy, l.argmax, l.running, l.stats]) t?.destroy();
    for (const t of [this.x, this.y, this.order, this.xb, this.yb, this.lossOut, this.metrics]) t?.destroy();
    if (this.ownsSource) this.source.free();
  }
}
