// layers.mjs: the layers a sequential spec is built from on the WebGPU
// kernels, each with nn's semantics (src/nn/layers.cpp, conv_layers.cpp):
// dense and conv2d (an activation right after either is fused into it, as
// nn::Model fuses), a standalone activation, max/avg pooling, global average
// pooling, batchnorm, flatten. A layer owns its output and output-gradient
// buffers for a batch of `bs`; forward(cnt, x) fills out; backward(cnt, x,
// dx) reads dOut (overwritten) and writes dx (null for the first layer).
import { ACT, POOL } from './kernels.mjs';

const ACT_DEFAULT_ALPHA = { leaky_relu: 0.01, elu: 1 };
const numel = (shape) => shape.reduce((a, b) => a * b, 1);
const chw = (shape) => (shape.length === 3 ? shape : [shape[0], 1, 1]);
const outSize = (i, k, s, p) => Math.floor((i + 2 * p - k) / s) + 1;

// Builds the layers of spec.layers for input shape spec.input. take(n) hands
// out the next n initial parameter values (the wasm core's flat layout:
// weight then bias, layer by layer); param(values) makes a trainable tensor.
export function buildLayers(spec, take, param) {
  const layers = [];
  let shape = spec.input;
  for (const l of spec.layers) {
    const prev = layers.at(-1);
    if (l.type in ACT && l.type !== 'identity') {
      const act = ACT[l.type], alpha = l.alpha ?? ACT_DEFAULT_ALPHA[l.type] ?? 0;
      if (prev?.fuse && prev.act === ACT.identity) {
        prev.act = act;
        prev.alpha = alpha;
      } else {
        layers.push({ kind: 'act', act, alpha, inShape: shape, outShape: shape });
      }
      continue;
    }
    const layer = { kind: l.type, inShape: shape, act: ACT.identity, alpha: 0 };
    if (l.type === 'dense') {
      const inn = numel(shape);
      Object.assign(layer, { fuse: true, in: inn, out: l.units, outShape: [l.units] });
      layer.w = param(take(inn * l.units));
      layer.b = l.bias === false ? null : param(take(l.units));
    } else if (l.type === 'conv2d') {
      const [c, h, w] = chw(shape), k = l.filters, kk = l.kernel ?? 3, st = l.stride ?? 1, pad = l.padding ?? 0;
      layer.conv = { n: 0, c, h, w, k, kh: kk, kw: kk, sh: st, sw: st, ph: pad, pw: pad };
      Object.assign(layer, { fuse: true, outShape: [k, outSize(h, kk, st, pad), outSize(w, kk, st, pad)] });
      layer.w = param(take(k * c * kk * kk));
      layer.b = l.bias === false ? null : param(take(k));
    } else if (l.type === 'max_pool2d' || l.type === 'avg_pool2d' || l.type === 'global_avg_pool') {
      const [c, h, w] = chw(shape);
      const global = l.type === 'global_avg_pool';
      const kk = global ? 0 : l.kernel ?? 2, st = global ? 1 : l.stride || kk, pad = global ? 0 : l.padding ?? 0;
      layer.pool = global ? { n: 0, c, h, w, kh: h, kw: w, sh: 1, sw: 1, ph: 0, pw: 0 }
        : { n: 0, c, h, w, kh: kk, kw: kk, sh: st, sw: st, ph: pad, pw: pad };
      layer.poolKind = l.type === 'max_pool2d' ? POOL.max : POOL.avg;
      layer.outShape = global ? [c] : [c, outSize(h, kk, st, pad), outSize(w, kk, st, pad)];
    } else if (l.type === 'batchnorm') {
      const c = shape[0];
      Object.assign(layer, { c, sp: numel(shape) / c, momentum: l.momentum ?? 0.1, eps: l.eps ?? 1e-5, outShape: shape });
      layer.bn = param(new Float32Array([...take(c), ...take(c)]));  // gamma, beta: one 2c tensor
    } else if (l.type === 'flatten') {
      layer.outShape = [numel(shape)];
    } else {
      throw new Error(`WebGPU backend: layer '${l.type}' is not supported yet`);
    }
    layers.push(layer);
    shape = layer.outShape;
  }
  return layers;
}

// Allocates each layer's per-batch buffers (outputs, gradients, argmax, statistics).
export function allocate(gpu, layers, bs) {
  for (const l of layers) {
    l.outN = numel(l.outShape);
    l.y = gpu.zeros(bs * l.outN);
    l.dy = gpu.zeros(bs * l.outN);
    if (l.poolKind === POOL.max) l.argmax = gpu.zeros(bs * l.outN);
    if (l.kind === 'batchnorm') {
      l.running = gpu.tensor(new Float32Array([...new Array(l.c).fill(0), ...new Array(l.c).fill(1)]));
      l.stats = gpu.zeros(2 * l.c);
    }
  }
}

export function forward(k, l, cnt, x, training) {
  if (l.kind === 'dense') {
    k.sgemm(false, false, cnt, l.out, l.in, 1, x, l.in, l.w.value, l.out, 0, l.y, l.out,
      { bias: l.b?.value ?? null, act: l.act, alpha: l.alpha });
  } else if (l.kind === 'conv2d') {
    k.conv2d_forward({ ...l.conv, n: cnt }, x, l.w.value, l.b?.value ?? null, l.act, l.alpha, l.y);
  } else if (l.pool) {
    k.pool2d_forward(l.poolKind, { ...l.pool, n: cnt }, x, l.y, l.argmax ?? null);
  } else if (l.kind === 'batchnorm') {
    k.batchnorm_forward(cnt, l.c, l.sp, l.momentum, l.eps, training, x, l.bn.value, l.running, l.stats, l.y);
  } else if (l.kind === 'act') {
    k.act_forward(l.act, l.alpha, x, l.y, cnt * l.outN);
  } else {  // flatten: the same floats
    k.gpu.copy(x, l.y, cnt * l.outN);
  }
}

// dOut is l.dy; dx may be null (the first layer: no input gradient).
export function backward(k, l, cnt, x, dx) {
  if ((l.kind === 'dense' || l.kind === 'conv2d') && l.act !== ACT.identity) {
    k.act_backward(l.act, l.alpha, l.y, l.dy, l.dy, cnt * l.outN);
  }
  if (l.kind === 'dense') {
    k.sgemm(true, false, l.in, l.out, cnt, 1, x, l.in, l.dy, l.out, 0, l.w.grad, l.out);
    if (l.b) k.col_sum(l.dy, cnt, l.out, l.out, l.b.grad, false);
    if (dx) k.sgemm(false, true, cnt, l.in, l.out, 1, l.dy, l.out, l.w.value, l.out, 0, dx, l.in);
  } else if (l.kind === 'conv2d') {
    const s = { ...l.conv, n: cnt };
    k.conv2d_backward_filter(s, x, l.dy, l.w.grad, l.b?.grad ?? null, false);
    if (dx) k.conv2d_backward_data(s, l.w.value, l.dy, dx);
  } else if (l.kind === 'batchnorm') {
    k.batchnorm_backward(cnt, l.c, l.sp, x, l.dy, l.bn.value, l.stats, l.bn.grad, dx, false);
  } else if (!dx) {
    // nothing to pass back
  } else if (l.pool) {
    k.pool2d_backward(l.poolKind, { ...l.pool, n: cnt }, l.dy, l.argmax ?? null, dx);
  } else if (l.kind === 'act') {
    k.act_backward(l.act, l.alpha, l.y, l.dy, dx, cnt * l.outN);
  } else {
    k.gpu.copy(l.dy, dx, cnt * l.outN);
  }
}

// The trainable tensors in the wasm core's parameter order.
export const trainable = (layers) => layers.flatMap((l) => [l.w, l.b, l.bn]).filter(Boolean);
