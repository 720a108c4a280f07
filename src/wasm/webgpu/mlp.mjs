// mlp.mjs: trains an MLP spec (dense layers, each optionally followed by an
// activation, softmax cross-entropy, any of the core's optimizers with a
// constant learning rate) on the WebGPU kernel table, as the wasm core's
// Trainer does, shadowing a wasm core model of the same spec: its initial
// parameters (getParams()) and its batch order (epochOrder()), one
// optimizer step per batch. The training set goes up once; per epoch only the order goes up
// and two floats per batch (loss, hits) come down.
//
//   const wasmModel = core.createModel(spec);       // initializes; gives the order
//   const m = new WebGpuMlp(gpu, spec, wasmModel);  // (loadCore's createGpuModel does this)
//   m.loadData(x, y);
//   const { loss, accuracy } = await m.trainEpoch();
//   const w = await m.getParams();  // the flat layout getParams() uses
import { groups1d } from './device.mjs';

export { GpuDevice } from './device.mjs';
import { ACT, webgpuKernels } from './kernels.mjs';
import { ELEMENTWISE_MAIN, kernelHead } from './wgsl_common.mjs';

const ACT_DEFAULT_ALPHA = { leaky_relu: 0.01, elu: 1 };
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

// The dense layers of an MLP spec with their fused activations.
function denseLayers(spec) {
  const layers = [];
  let width = spec.input.reduce((a, b) => a * b, 1);
  for (const l of spec.layers) {
    if (l.type === 'dense') {
      layers.push({ in: width, out: l.units, bias: l.bias !== false, act: ACT.identity, alpha: 0 });
      width = l.units;
    } else if (l.type in ACT && layers.length && layers.at(-1).act === ACT.identity) {
      layers.at(-1).act = ACT[l.type];
      layers.at(-1).alpha = l.alpha ?? ACT_DEFAULT_ALPHA[l.type] ?? 0;
    } else {
      throw new Error(`WebGpuMlp: layer '${l.type}' is not supported (dense, each optionally followed by one activation)`);
    }
  }
  if (width !== spec.classes) throw new Error(`WebGpuMlp: the last layer has ${width} units, not ${spec.classes} classes`);
  if ((spec.loss ?? 'softmax_cross_entropy') !== 'softmax_cross_entropy') throw new Error('WebGpuMlp: softmax cross-entropy only');
  if (spec.schedule && (spec.schedule.type ?? 'constant') !== 'constant') throw new Error('WebGpuMlp: constant learning rate only');
  return layers;
}

export class WebGpuMlp {
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
    this.layers = denseLayers(spec);
    this.opt = { ...OPTIMIZER_DEFAULTS, ...spec.optimizer, type: spec.optimizer?.type ?? 'sgd' };
    this.batch = spec.batch_size ?? 64;
    this.epoch = 0;
    this.steps = 0;
    let off = 0;
    const take = (n) => params.subarray(off, (off += n));
    for (const l of this.layers) {
      l.w = this.param(take(l.in * l.out));
      l.b = l.bias ? this.param(take(l.out)) : null;
    }
    if (off !== params.length) throw new Error(`WebGpuMlp: ${params.length} parameters given, the spec has ${off}`);
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
    const gpu = this.gpu, width = this.layers[0].in, n = y.length;
    if (x.length !== n * width) throw new Error(`WebGpuMlp: ${x.length} floats for ${n} samples of ${width}`);
    this.n = n;
    this.x = gpu.tensor(x instanceof Float32Array ? x : Float32Array.from(x));
    this.y = gpu.tensor(y instanceof Int32Array ? y : Int32Array.from(y));
    this.order = gpu.zeros(n);
    const bs = Math.min(this.batch, n);
    this.xb = gpu.zeros(bs * width);
    this.yb = gpu.zeros(bs);
    for (const l of this.layers) {
      l.yOut = gpu.zeros(bs * l.out);
      l.dy = gpu.zeros(bs * l.out);
    }
    this.lossOut = gpu.zeros(2);
    this.metrics = gpu.zeros(2 * Math.ceil(n / bs));
  }

  // One epoch as nn::Trainer runs it: { epoch, loss, accuracy } (means over samples).
  async trainEpoch() {
    const gpu = this.gpu, n = this.n, bs = Math.min(this.batch, n), width = this.layers[0].in;
    gpu.write(this.order, this.source.epochOrder(this.epoch, n));
    const counts = [];
    for (let done = 0, b = 0; done < n; done += bs, b++) {
      const cnt = Math.min(bs, n - done);
      gpu.run(GATHER, [this.x, this.y, this.order, this.xb, this.yb], [[cnt * width, 'i32'], [width, 'i32'],
        [done, 'i32']], groups1d(cnt * width));
      this.step(cnt);
      gpu.copy(this.lossOut, this.metrics, 2, 0, 2 * b);
      counts.push(cnt);
    }
    const m = await gpu.read(this.metrics, Float32Array, 2 * counts.length);
    let loss = 0, hits = 0;
    counts.forEach((cnt, b) => {
      loss += m[2 * b] * cnt;
      hits += m[2 * b + 1];
    });
    this.epoch++;
    return { epoch: this.epoch, loss: loss / n, accuracy: hits / n };
  }

  // Forward, loss, backward and the optimizer step on the gathered batch of cnt rows.
  step(cnt) {
    const k = this.k, L = this.layers;
    let h = this.xb;
    for (const l of L) {
      k.sgemm(false, false, cnt, l.out, l.in, 1, h, l.in, l.w.value, l.out, 0, l.yOut, l.out,
        { bias: l.b?.value ?? null, act: l.act, alpha: l.alpha });
      h = l.yOut;
    }
    const last = L.at(-1);
    k.softmax_cross_entropy(last.yOut, this.yb, cnt, last.out, last.dy, this.lossOut);
    for (let i = L.length - 1; i >= 0; i--) {
      const l = L[i], x = i ? L[i - 1].yOut : this.xb;
      if (l.act !== ACT.identity) k.act_backward(l.act, l.alpha, l.yOut, l.dy, l.dy, cnt * l.out);
      k.sgemm(true, false, l.in, l.out, cnt, 1, x, l.in, l.dy, l.out, 0, l.w.grad, l.out);
      if (l.b) k.col_sum(l.dy, cnt, l.out, l.out, l.b.grad, false);
      if (i) k.sgemm(false, true, cnt, l.in, l.out, 1, l.dy, l.out, l.w.value, l.out, 0, L[i - 1].dy, l.in);
    }
    this.steps++;
    for (const l of L) for (const p of [l.w, l.b]) if (p) this.update(p);
  }

  update(p) {
    const k = this.k, o = this.opt, t = this.steps;
    if (o.type === 'sgd') k.sgd_step(p.value, p.grad, p.s1, p.n, o);
    else if (o.type === 'adagrad') k.adagrad_step(p.value, p.grad, p.s1, p.n, { ...o, step: t });
    else if (o.type === 'rmsprop') k.rmsprop_step(p.value, p.grad, p.s1, p.s2, p.s3, p.n, o);
    else if (o.type === 'adam' || o.type === 'adamw') k.adam_step(p.value, p.grad, p.s1, p.s2, p.n, { ...o, decoupled: o.type === 'adamw', step: t });
    else throw new Error(`WebGpuMlp: unknown optimizer '${o.type}'`);
  }

  // The parameters in the wasm core's flat layout (weight then bias per layer).
  async getParams() {
    const parts = [];
    for (const l of this.layers) for (const p of [l.w, l.b]) if (p) parts.push(await this.gpu.read(p.value));
    const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    let off = 0;
    for (const p of parts) out.set(p, (off += p.length) - p.length);
    return out;
  }

  free() {
    for (const l of this.layers) {
      for (const p of [l.w, l.b]) for (const t of p ? [p.value, p.grad, p.s1, p.s2, p.s3] : []) t?.destroy();
      l.yOut?.destroy();
      l.dy?.destroy();
    }
    for (const t of [this.x, this.y, this.order, this.xb, this.yb, this.lossOut, this.metrics]) t?.destroy();
    if (this.ownsSource) this.source.free();
  }
}
